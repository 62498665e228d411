"""The preemption sweep shell on a manual clock against the fake API: skip on unknown
physical state, phase marks, execution (Event, report, uid-preconditioned delete),
delegation and its fallback, warnings written, told once and cleared, headroom."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.base.inventory import placement_of
from reconciler.base.pods import PodView, project_pod
from reconciler.base.settings import PreemptionSettings
from reconciler.preemption.plan import holders_of, rooms_from
from reconciler.preemption.sweep import Sweeper
from shared import model, vocab
from shared.appclient import PreemptionCandidate
from shared.appclient.outcomes import Recorded, Transient, TransientReason, Victims
from shared.appclient.requests import OverstayReport
from shared.clock import ManualClock, format_utc
from shared.policy.forecast import forecast
from shared.policy.inventory import Inventory, build_inventory, project_node_facts
from shared.policy.matching import MatchRules
from shared.policy.preemption import Phase
from shared.resources import PODS
from tests.fakekube import FakeKube
from tests.reconciler.builders import START
from tests.reconciler.upholdkit import Emitter, facts, raw_pod

H = timedelta(hours=1)
MIN = timedelta(minutes=1)
NOW = START + 2 * H  # bob's booking (START..START+1h) has ended: his pods overstay
BOUNDARY = NOW + 10 * MIN


def node(name: str, gpus: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "taints": [
                {
                    "key": vocab.RESERVATION_TAINT_KEY,
                    "value": "a100",
                    "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
                }
            ]
        },
        "status": {
            "allocatable": {vocab.GPU_RESOURCE: str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


class FakeApp:
    """The app's victim choice and overstay reports, scripted."""

    def __init__(self, answer: Any = None) -> None:
        self.answer = answer
        self.asked: list[tuple[dict[str, int], list[str]]] = []
        self.reports: list[OverstayReport] = []

    async def select_victims(
        self, needed_by_class: Mapping[str, int], candidates: Sequence[PreemptionCandidate]
    ) -> Any:
        self.asked.append((dict(needed_by_class), [c.pod_uid for c in candidates]))
        if callable(self.answer):
            return self.answer(candidates)
        return self.answer

    async def report_overstay(self, report: OverstayReport) -> Any:
        self.reports.append(report)
        return Recorded(None)  # type: ignore[arg-type]


class World:
    def __init__(self, app: FakeApp | None = None, **settings: Any) -> None:
        self.kube = FakeKube()
        self.clock = ManualClock(NOW)
        self.emit = Emitter(self.kube)
        self.rules = MatchRules()
        self.app = app
        self.known = True
        self.reservations: dict[str, model.GPUReservation] = {}
        self.nodes = [node("n1"), node("n2")]
        defaults: dict[str, Any] = {"lead": 15 * MIN, "delegate": app is not None}
        self.sweeper = Sweeper(
            self.kube,
            self.clock,
            self.emit,
            pods=self.pods,
            reservations=lambda: self.reservations,
            inventory=self.inventory,
            ready=lambda: True,
            app=app,
            settings=PreemptionSettings(**{**defaults, **settings}),
            rules=self.rules,
            zone=None,
            lock=asyncio.Lock(),
            rng=random.Random(3),
        )

    def book(self, rid: int, owner: str, start: datetime, end: datetime, gpus: int) -> None:
        f = facts(rid, start, end, gpus=gpus, owner=owner)
        self.reservations[f.name] = model.GPUReservation(f)

    def pods(self) -> dict[str, PodView]:
        views = (project_pod(p, self.rules) for p in self.kube.items(PODS))
        return {v.key: v for v in views if v is not None}

    def inventory(self) -> Inventory | None:
        if not self.known:
            return None
        placements = [placement_of(p) for p in self.pods().values()]
        node_facts = [f for f in map(project_node_facts, self.nodes) if f is not None]
        return build_inventory(node_facts, [p for p in placements if p is not None], ["a100"])

    def pod(self, name: str, ns: str, ref: str, node: str, **notes: str) -> None:
        self.kube.add(PODS, raw_pod(name, ref, ns=ns, node=node, notes=notes), ns)

    def alive(self, ns: str) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.kube.items(PODS, ns))

    def full(self) -> None:
        """n1: bob's b1, b2 (overstaying); n2: carol's c1, c2 (guaranteed)."""
        self.book(1, "bob", START, START + H, 2)
        self.book(2, "carol", START, NOW + 5 * H, 2)
        self.pod("b1", "bob", "res-1", "n1")
        self.pod("b2", "bob", "res-1", "n1")
        self.pod("c1", "carol", "res-2", "n2")
        self.pod("c2", "carol", "res-2", "n2")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_unknown_physical_state_skips_the_sweep_and_marks_nothing() -> None:
    w = World()
    w.full()
    w.book(3, "dave", BOUNDARY, BOUNDARY + H, 2)
    w.known = False
    result = run(w.sweeper.once())
    assert result.skipped
    assert w.sweeper.marks == set()
    assert w.alive("bob") == ["b1", "b2"]


def test_phase_a_kills_exactly_the_overstayers_needed_never_guaranteed_pods() -> None:
    w = World()
    w.full()
    w.book(3, "dave", BOUNDARY, BOUNDARY + H, 2)
    result = run(w.sweeper.once())
    assert sorted(v.holder.name for v in result.victims) == ["b1", "b2"]
    assert w.alive("bob") == []
    assert w.alive("carol") == ["c1", "c2"]
    preempted = sorted(k for k, r, _ in w.emit.sent if r == vocab.REASON_PREEMPTED)
    assert preempted == ["bob/b1", "bob/b2"]


def test_overstayers_whose_class_label_was_removed_or_changed_are_preempted_too() -> None:
    """A pod's class comes from its admission: an edited label is no shield."""
    w = World()
    w.full()
    for name, label in (("b1", None), ("b2", "h100")):
        labels = w.kube.objects[("pods", "bob", name)]["metadata"]["labels"]
        if label is None:
            del labels[vocab.GPU_CLASS_LABEL]
        else:
            labels[vocab.GPU_CLASS_LABEL] = label
    w.book(3, "dave", BOUNDARY, BOUNDARY + H, 2)
    result = run(w.sweeper.once())
    assert sorted(v.holder.name for v in result.victims) == ["b1", "b2"]
    assert w.alive("bob") == []
    assert w.alive("carol") == ["c1", "c2"]


def test_an_unmet_shortfall_is_counted_not_acted_on() -> None:
    w = World()
    w.full()
    w.book(3, "dave", BOUNDARY, BOUNDARY + H, 4)  # needs 4: only b1, b2 are eligible
    result = run(w.sweeper.once())
    assert result.unmet == {"a100": 2}
    assert w.alive("carol") == ["c1", "c2"]


def test_each_boundary_once_per_phase() -> None:
    w = World()
    w.full()
    w.book(3, "dave", BOUNDARY, BOUNDARY + H, 2)
    run(w.sweeper.once())
    w.pod("b3", "bob", "res-1", "n1")  # a newcomer takes the freed GPUs
    w.pod("b4", "bob", "res-1", "n1")
    assert run(w.sweeper.once()).victims == []  # phase A was evaluated
    run(w.clock.advance(600))
    result = run(w.sweeper.once())  # phase B
    assert sorted(v.holder.name for v in result.victims) == ["b3", "b4"]


def test_a_pod_relinked_meanwhile_is_not_killed() -> None:
    w = World()
    w.full()
    w.book(3, "dave", BOUNDARY, BOUNDARY + H, 2)
    stale = w.pods()
    w.book(4, "bob", NOW - 30 * MIN, NOW + H, 2)  # not abutting res-1: no chain
    path = "/metadata/annotations/" + vocab.BOOKING_REFERENCE.replace("/", "~1")
    run(w.kube.patch(PODS, "b1", [{"op": "replace", "path": path, "value": "res-4"}], "bob"))
    w.sweeper._pods = lambda: stale  # the cache lags behind the re-link
    result = run(w.sweeper.once())
    assert "b1" in {v.holder.name for v in result.victims}
    assert "b1" in w.alive("bob")
    assert vocab.REASON_PREEMPTED not in [r for k, r, _ in w.emit.sent if k == "bob/b1"]


def test_the_apps_choice_is_used_and_an_empty_answer_respected() -> None:
    app = FakeApp(Victims(("uid-b2",)))
    w = World(app)
    w.full()
    w.book(3, "dave", BOUNDARY, BOUNDARY + H, 1)
    run(w.sweeper.once())
    assert app.asked == [({"a100": 1}, ["uid-b1", "uid-b2"])]
    assert w.alive("bob") == ["b1"]
    spare = FakeApp(Victims(()))
    w2 = World(spare)
    w2.full()
    w2.book(3, "dave", BOUNDARY, BOUNDARY + H, 1)
    result = run(w2.sweeper.once())
    assert w2.alive("bob") == ["b1", "b2"]
    assert result.unmet == {"a100": 1}


def test_a_failed_or_unknown_answer_falls_back_to_the_random_choice() -> None:
    app = FakeApp(Transient(TransientReason.TIMEOUT))
    w = World(app)
    w.full()
    w.book(3, "dave", BOUNDARY, BOUNDARY + H, 1)
    run(w.sweeper.once())
    assert len(w.alive("bob")) == 1
    unknown = FakeApp(Victims(("uid-c1", "uid-zz")))  # never offered: ignored
    w2 = World(unknown)
    w2.full()
    w2.book(3, "dave", BOUNDARY, BOUNDARY + H, 1)
    result = run(w2.sweeper.once())
    assert w2.alive("carol") == ["c1", "c2"]
    assert result.unmet == {"a100": 1}


def test_overstay_report_before_the_delete_when_enabled() -> None:
    app = FakeApp(Victims(("uid-b1",)))
    w = World(app, overstay_report=True)
    w.full()
    w.book(3, "dave", BOUNDARY, BOUNDARY + H, 1)
    run(w.sweeper.once())
    (report,) = app.reports
    assert (report.pod_uid, report.start, report.end, report.end_reason) == (
        "uid-b1",
        START + H,
        NOW,
        "preempted",
    )


def test_warnings_written_told_once_and_cleared() -> None:
    w = World(lead=5 * MIN, warning_lead=30 * MIN)
    w.full()
    w.book(3, "dave", BOUNDARY, BOUNDARY + H, 1)  # 10 min ahead: warned, not yet killed
    result = run(w.sweeper.once())
    assert result.victims == []
    b1 = w.kube.read(PODS, "b1", "bob")["metadata"]["annotations"]
    assert b1[vocab.TERMINATION_WARNING_AT] == format_utc(BOUNDARY - 5 * MIN)
    assert b1[vocab.TERMINATION_WARNING_RISK] == "0.50"
    assert "UTC" in b1[vocab.TERMINATION_WARNING_MESSAGE]
    c1 = w.kube.read(PODS, "c1", "carol")["metadata"]["annotations"]
    assert vocab.TERMINATION_WARNING_AT not in c1
    run(w.sweeper.once())
    warned = [k for k, r, _ in w.emit.sent if r == vocab.REASON_TERMINATION_WARNING]
    assert sorted(warned) == ["bob/b1", "bob/b2"]  # once each, not again
    del w.reservations["res-3"]  # the booking is cancelled and gone
    run(w.sweeper.once())
    b1 = w.kube.read(PODS, "b1", "bob")["metadata"]["annotations"]
    assert vocab.TERMINATION_WARNING_AT not in b1
    assert vocab.TERMINATION_WARNING_MESSAGE not in b1


def test_headroom_warns_first_and_kills_only_after_the_notice() -> None:
    w = World(headroom_percent=50, headroom_notice=10 * MIN, headroom_interval_s=60)
    w.full()
    run(w.sweeper.once())
    assert w.alive("bob") == ["b1", "b2"]
    at = w.kube.read(PODS, "b1", "bob")["metadata"]["annotations"][vocab.TERMINATION_WARNING_AT]
    assert at == format_utc(NOW + 10 * MIN)
    run(w.clock.advance(5 * 60))
    run(w.sweeper.once())
    assert w.alive("bob") == ["b1", "b2"]  # sticky instant not reached
    run(w.clock.advance(6 * 60))
    run(w.sweeper.once())
    assert len(w.alive("bob")) == 0  # target 2 of 4: both overstayers go
    assert w.alive("carol") == ["c1", "c2"]


def test_an_unreadable_warning_instant_counts_as_no_warning() -> None:
    w = World(headroom_percent=50, headroom_notice=0 * MIN, headroom_interval_s=60)
    w.full()
    path = "/metadata/annotations/" + vocab.TERMINATION_WARNING_AT.replace("/", "~1")
    run(w.kube.patch(PODS, "b1", [{"op": "add", "path": path, "value": "soon"}], "bob"))
    run(w.sweeper.once())
    # The garbage stamp is no notice: nobody is killable yet; it is replaced by a real one.
    assert w.alive("bob") == ["b1", "b2"]
    notes = w.kube.read(PODS, "b1", "bob")["metadata"]["annotations"]
    assert notes[vocab.TERMINATION_WARNING_AT] == format_utc(NOW)
    run(w.clock.advance(61))
    run(w.sweeper.once())
    assert w.alive("bob") == []


# --- the forecast names the sweep's victims --------------------------------------------

_pods = st.lists(
    st.tuples(
        st.sampled_from(["bob", "carol"]), st.integers(1, 2), st.sampled_from(["n1", "n2", "n3"])
    ),
    max_size=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_pods, st.integers(1, 4), st.integers(0, 2), st.integers(2, 4))
def test_the_forecast_names_the_pods_the_sweep_takes(
    pods: list[tuple[str, int, str]], wanted: int, unused: int, per_node: int
) -> None:
    """Issue 27, case 1, as a property over random clusters: planned by one model, the
    pods the forecast gives risk 1 are all preempted by the sweep that follows (nothing
    changed in between), and every pod preempted had a risk above 0. bob's pods
    overstay, carol's are guaranteed; a booking that started unused (``unused`` GPUs)
    holds its room; dave's booking of ``wanted`` GPUs starts within the lead."""
    w = World()
    w.nodes = [node(n, per_node) for n in ("n1", "n2", "n3")]
    w.book(1, "bob", START, START + H, 8)
    w.book(2, "carol", START, NOW + 5 * H, 8)
    if unused:
        w.book(4, "erin", NOW - 2 * MIN, NOW + H, unused)
        # A running leader's sweeps handled that start when it came (both phases).
        w.sweeper.marks |= {(NOW - 2 * MIN, Phase.AHEAD), (NOW - 2 * MIN, Phase.AT)}
    w.book(3, "dave", BOUNDARY, BOUNDARY + H, wanted)
    used = {"n1": 0, "n2": 0, "n3": 0}
    for i, (owner, gpus, where) in enumerate(pods):
        if used[where] + gpus > per_node:
            continue  # the scheduler would not have placed it there
        used[where] += gpus
        ref = "res-1" if owner == "bob" else "res-2"
        w.kube.add(PODS, raw_pod(f"p{i}", ref, gpus=gpus, ns=owner, node=where), owner)
    reservations = w.reservations
    inventory = w.inventory()
    assert inventory is not None
    holders = holders_of(w.pods().values(), reservations, NOW, use_group=False)
    told = forecast(
        NOW,
        w.sweeper.settings.lead,
        [r.facts for r in reservations.values()],
        holders,
        rooms_from(inventory),
        delegated=False,
    )
    risk = {p["uid"]: max(b["risk"] for b in p["buckets"]) for p in told["pods"]}
    victims = {v.holder.uid for v in run(w.sweeper.once()).victims}
    assert {uid for uid, r in risk.items() if r == 1.0} <= victims
    assert victims <= {uid for uid, r in risk.items() if r > 0}


def test_a_warning_before_the_guarantee_ends_says_when_it_ends() -> None:
    """Issue 27, case 1: the warning said "past its runtime guarantee" three minutes
    before the guarantee ended."""
    w = World(lead=5 * MIN, warning_lead=30 * MIN)
    w.book(1, "bob", NOW - H, NOW + 3 * MIN, 2)
    w.pod("b1", "bob", "res-1", "n1")
    w.pod("b2", "bob", "res-1", "n1")
    w.nodes = [node("n1")]
    w.book(3, "dave", BOUNDARY, BOUNDARY + H, 1)
    run(w.sweeper.once())
    notes = w.kube.read(PODS, "b1", "bob")["metadata"]["annotations"]
    text = notes[vocab.TERMINATION_WARNING_MESSAGE]
    assert "past its runtime guarantee" not in text
    assert "runtime guarantee ends 2026-01-05 11:03 UTC; after that it may be" in text
    assert notes[vocab.TERMINATION_WARNING_AT] == format_utc(BOUNDARY - 5 * MIN)
