"""The reserved queue on the manual clock: route, queue, timer, admit; the patch; announce once."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import jsonpatch
import pytest
from prometheus_client import CollectorRegistry

from reconciler.admission import announce
from reconciler.admission.announce import Admitted
from reconciler.admission.pending import admission_patch, next_start
from reconciler.admission.step import ON_DEMAND_ATTEMPTS, Admission
from reconciler.admission.waiting import Knowledge
from reconciler.base.caches import Caches
from reconciler.base.metrics import QueueMetrics
from reconciler.base.pods import PodView, project_pod
from reconciler.base.settings import load
from reconciler.queue.admit import Admitter
from shared import ledger, model, vocab
from shared.clock import ManualClock, format_utc
from shared.errors import Invalid, ServerError
from shared.kubewire import WatchEvent
from shared.policy.matching import MatchRules
from shared.policy.tolerations import granted_toleration
from shared.resources import EVENTS, GPU_RESERVATIONS, PODS
from tests.fakekube import FakeKube
from tests.reconciler.builders import END, NS, START, relisting

GATE = vocab.SANDBOX_SCHEDULING_GATE
BEFORE = START - timedelta(minutes=5)


class Kube(FakeKube):
    """The fake with a look at the Events written."""

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        found = [o for (p, _, _), o in self.objects.items() if p == EVENTS.plural]
        return [e for e in found if reason is None or e["reason"] == reason]


def facts(rid: int = 1, gpus: int = 2, start=START, end=END) -> model.ReservationFacts:
    return model.ReservationFacts(
        rid, "alice", "a100", "A100", gpus, model.Kind.BOOKING, start, end,
        model.State.ACTIVE, START,
    )  # fmt: skip


def gpu_pod(name: str, gpus: int = 1, gated: bool = True, **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"limits": {vocab.GPU_RESOURCE: str(gpus)}}}]
    }
    if gated:
        spec["schedulingGates"] = [{"name": "other"}, {"name": GATE}]
    return {
        "metadata": {
            "name": name,
            "namespace": "alice",
            "uid": f"uid-{name}",
            "labels": {vocab.GPU_CLASS_LABEL: "a100"},
            **meta,
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


class World:
    def __init__(self, now=BEFORE, kube: Kube | None = None, **env: str) -> None:
        self.kube = kube or Kube()
        self.clock = ManualClock(now)
        base = {
            "RESERVATION_API_URL": "http://app",
            "RESERVATION_API_KEY": "k",
            "POD_NAMESPACE": NS,
            "POD_SCHEDULING_GATE_NAME": GATE,
            "EVENT_DISPLAY_TIMEZONE": "Europe/Berlin",
        }
        self.settings, _ = load({**base, **env})
        self.caches = Caches(relisting(self.kube), self.settings, self.clock)
        metrics = QueueMetrics(CollectorRegistry())
        admission = Admission(
            self.kube,
            self.caches,
            self.settings,
            self.clock,
            metrics,
            Knowledge(lambda: True, lambda: {"a100"}),
        )
        self.admitter = Admitter(admission, self.caches, self.settings, self.clock, metrics)

    def book(self, f: model.ReservationFacts, holds: tuple[model.Hold, ...] = ()) -> None:
        res = model.GPUReservation(f, holds)
        self.kube.add(GPU_RESERVATIONS, model.to_object(res, NS, self.clock.now()), NS)

    def ledger_of(self, rid: int = 1) -> model.GPUReservation:
        return model.from_object(
            self.kube.objects[(GPU_RESERVATIONS.plural, NS, model.reference(rid))]
        )

    def pod(self, name: str) -> dict[str, Any]:
        return self.kube.objects[(PODS.plural, "alice", name)]

    async def sync(self) -> None:
        await self.caches.pods.relist()
        await self.caches.reservations.relist()

    async def step(self) -> None:
        await self.sync()
        await self.admitter.once()
        await self.sync()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def view(raw: dict[str, Any]) -> PodView:
    got = project_pod(raw, MatchRules())
    assert got is not None
    return got


def test_patch_applies_to_the_original_pod() -> None:
    res = model.GPUReservation(facts())
    raw = gpu_pod("p", gated=True)
    raw["metadata"]["resourceVersion"] = "7"
    ops = admission_patch(view(raw), res, "c-1", END, START, GATE)
    assert ops[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": "uid-p"},
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
    ]
    out = jsonpatch.apply_patch(raw, ops)
    assert out["spec"]["tolerations"] == [granted_toleration("a100")]
    notes = out["metadata"]["annotations"]
    assert notes[vocab.BOOKING_REFERENCE] == "res-1"
    assert notes[vocab.ADMISSION_CLAIM] == "c-1"
    assert notes[vocab.ADMITTED_AT] == format_utc(START)
    assert notes[vocab.GUARANTEED_UNTIL] == format_utc(END)
    assert out["spec"]["schedulingGates"] == [{"name": "other"}]
    # Existing tolerations and annotations are kept (appended / added key by key).
    raw["spec"]["tolerations"] = [{"key": "x", "operator": "Exists"}]
    raw["metadata"]["annotations"] = {"keep": "me", "a/b~c": "1"}
    out = jsonpatch.apply_patch(raw, admission_patch(view(raw), res, "c-1", END, START, None))
    assert out["spec"]["tolerations"][0] == {"key": "x", "operator": "Exists"}
    assert out["metadata"]["annotations"]["keep"] == "me"
    assert out["spec"]["schedulingGates"] == raw["spec"]["schedulingGates"]
    raw["metadata"]["resourceVersion"] = "8"
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(raw, ops)  # the pod changed since the view was taken


def test_the_patch_removes_our_gate_by_its_position_among_all_gates() -> None:
    """The view keeps every gate's position, so the remove hits ours, not a neighbour."""
    res = model.GPUReservation(facts())
    raw = gpu_pod("p", gated=True)
    raw["metadata"]["resourceVersion"] = "7"
    raw["spec"]["schedulingGates"] = [{"name": "a"}, "junk", {"name": GATE}, {"name": "b"}]
    out = jsonpatch.apply_patch(raw, admission_patch(view(raw), res, "c-1", END, START, GATE))
    assert out["spec"]["schedulingGates"] == [{"name": "a"}, "junk", {"name": "b"}]


def test_queued_pod_waits_then_is_admitted_at_window_open_by_the_timer() -> None:
    async def scenario() -> None:
        w = World()
        w.book(facts())
        w.kube.add(PODS, gpu_pod("train"))
        await w.sync()
        assert next_start(w.caches.reservations.items.values(), w.clock.now()) == START
        task = asyncio.create_task(w.admitter.run(300.0))
        for _ in range(20):
            await asyncio.sleep(0)
        waiting = w.kube.events(vocab.REASON_WAITING_FOR_RESERVATION)
        assert len(waiting) == 1
        assert "res-1" in waiting[0]["message"]
        assert "2026-01-05 10:00 CET" in waiting[0]["message"]
        assert waiting[0]["involvedObject"]["uid"] == "uid-train"
        assert vocab.BOOKING_REFERENCE not in (w.pod("train")["metadata"].get("annotations") or {})
        await w.clock.advance(299)
        assert not w.ledger_of().holds
        await w.clock.advance(1)  # the window opens: the timer fires at START exactly
        for _ in range(50):
            await asyncio.sleep(0)
        notes = w.pod("train")["metadata"]["annotations"]
        assert notes[vocab.BOOKING_REFERENCE] == "res-1"
        assert notes[vocab.ADMITTED_AT] == format_utc(START)
        assert w.pod("train")["spec"]["schedulingGates"] == [{"name": "other"}]
        hold = w.ledger_of().holds[0]
        assert hold.claim == model.claim_key(notes[vocab.ADMISSION_CLAIM])
        assert hold.announced
        assert hold.pod_uid == "uid-train"
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 1
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(scenario())


def test_announce_once_also_for_webhook_admissions_and_after_restart() -> None:
    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        hold = model.Hold("c-9", 1, START, pod="web")
        w.book(facts(), (hold,))
        notes = {vocab.BOOKING_REFERENCE: "res-1", vocab.ADMISSION_CLAIM: "c-9"}
        w.kube.add(PODS, gpu_pod("web", gated=False, annotations=notes))
        await w.step()
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 1
        assert w.ledger_of().holds[0].announced
        await w.step()
        # A new process (fresh memory) reads the announced flag from the ledger.
        w2 = World(now=START + timedelta(minutes=2))
        w2.kube = w.kube
        w2.caches = Caches(relisting(w.kube), w2.settings, w2.clock)
        metrics = QueueMetrics(CollectorRegistry())
        admission = Admission(
            w.kube, w2.caches, w2.settings, w2.clock, metrics,
            Knowledge(lambda: True, lambda: None),
        )  # fmt: skip
        w2.admitter = Admitter(admission, w2.caches, w2.settings, w2.clock, metrics)
        await w2.step()
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 1

    run(scenario())


def webhook_admitted(w: World, name: str, claim: str, admitted: Any) -> None:
    """A pod the webhook admitted at ``admitted`` under res-1 with hold ``claim``."""
    w.book(facts(), (model.Hold(claim, 1, admitted, pod=name),))
    notes = {
        vocab.BOOKING_REFERENCE: "res-1",
        vocab.ADMISSION_CLAIM: claim,
        vocab.ADMITTED_AT: format_utc(admitted),
    }
    w.kube.add(PODS, gpu_pod(name, gated=False, annotations=notes))


def admitted_under_each(w: World, rids: tuple[int, ...]) -> None:
    """Under each booking ``rid``, a pod ``p<rid>`` the webhook admitted at START with
    hold ``c-<rid>``."""
    for rid in rids:
        w.book(facts(rid), (model.Hold(f"c-{rid}", 1, START, pod=f"p{rid}"),))
        notes = {
            vocab.BOOKING_REFERENCE: model.reference(rid),
            vocab.ADMISSION_CLAIM: f"c-{rid}",
            vocab.ADMITTED_AT: format_utc(START),
        }
        w.kube.add(PODS, gpu_pod(f"p{rid}", gated=False, annotations=notes))


def event_reads(kube: Kube) -> int:
    return kube.calls.count(("list", EVENTS.plural))


async def admitted_in_this_term() -> World:
    """A leader term whose first LIST of pods is in, and a pod the webhook admitted
    after it, seen by one queue pass."""
    w = World(now=START + timedelta(minutes=1))
    await w.sync()
    webhook_admitted(w, "web", "c-9", w.clock.now())
    await w.step()
    return w


def test_a_pod_admitted_in_this_leader_term_is_announced_without_a_read_back() -> None:
    """No earlier leader can have announced a pod admitted after this term began: its
    Event goes out without a LIST of its Events (one per admitted pod otherwise)."""

    async def scenario() -> None:
        w = await admitted_in_this_term()
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 1
        assert w.ledger_of().holds[0].announced
        assert event_reads(w.kube) == 0

    run(scenario())


@pytest.mark.parametrize("listed", [True, False], ids=["in-first-list", "term-not-listed-yet"])
def test_a_pod_an_earlier_leader_may_have_announced_is_read_back_first(listed: bool) -> None:
    """In the term's first LIST of pods (or that LIST not in yet): the Event an earlier
    leader sent before its mark was lost is found, and none is sent again."""

    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        if not listed:
            await w.sync()
            w.admitter.step.announcer.begin()  # a new term: its caches have not listed
        webhook_admitted(w, "web", "c-9", w.clock.now())
        w.kube.add(
            EVENTS,
            {
                "metadata": {"name": "web.earlier", "namespace": "alice"},
                "involvedObject": {"kind": "Pod", "name": "web", "uid": "uid-web"},
                "reason": vocab.REASON_RUNTIME_GUARANTEED,
                "message": "Admitted under res-1.",
                "reportingComponent": vocab.PRODUCT_NAME,
            },
            "alice",
        )
        await w.step()
        assert event_reads(w.kube) == 1
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 1
        assert w.ledger_of().holds[0].announced

    run(scenario())


def test_a_ledger_wiped_after_the_mark_does_not_announce_this_terms_pod_again() -> None:
    """The rebuilt hold of a pod admitted within the claim TTL comes back unannounced;
    this term remembers its announcement for the TTL, so it is not read back and not
    announced twice."""

    async def scenario() -> None:
        w = await admitted_in_this_term()
        await w.step()  # the cache shows the mark
        wiped = ledger.rebuild(
            model.GPUReservation(facts()), [view(w.pod("web")).use()], w.clock.now(), 120
        )
        assert not wiped.holds[0].announced
        w.book(facts(), wiped.holds)
        await w.step()
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 1

    run(scenario())


def ledger_writes(kube: Kube) -> int:
    writes = ("patch", "replace", "update")
    return sum(
        1 for verb, plural in kube.calls if plural == GPU_RESERVATIONS.plural and verb in writes
    )


async def gathering(w: World, monkeypatch: pytest.MonkeyPatch) -> asyncio.Task[None]:
    """The leader's mark loop running (gathering for 10 ms), the caches listed."""
    monkeypatch.setattr(announce, "MARK_GATHER_S", 0.01)
    task = asyncio.create_task(w.admitter.step.announcer.run_marks())
    await w.sync()
    await asyncio.sleep(0)
    return task


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_marks_of_passes_in_a_row_are_written_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two pods created one after the other, each seen by its own pass: each Event goes
    out in its pass, both holds are marked (and bound) in one ledger write."""

    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        task = await gathering(w, monkeypatch)
        try:
            w.book(
                facts(),
                (model.Hold("c-1", 1, START, pod="a"), model.Hold("c-2", 1, START, pod="b")),
            )
            written = ledger_writes(w.kube)
            for name, claim in (("a", "c-1"), ("b", "c-2")):
                w.kube.add(
                    PODS,
                    gpu_pod(
                        name,
                        gated=False,
                        annotations={
                            vocab.BOOKING_REFERENCE: "res-1",
                            vocab.ADMISSION_CLAIM: claim,
                            vocab.ADMITTED_AT: format_utc(START),
                        },
                    ),
                )
                await w.sync()
                await w.admitter.once(w.admitter.touched.take_all())
                assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == (
                    1 if name == "a" else 2
                )
            assert ledger_writes(w.kube) == written  # gathered, not written yet
            await asyncio.sleep(0.1)
            assert ledger_writes(w.kube) == written + 1
            holds = w.ledger_of().holds
            assert [(h.announced, h.pod_uid) for h in holds] == [(True, "uid-a"), (True, "uid-b")]
        finally:
            await stopped(task)

    run(scenario())


class Overlapping(Kube):
    """The fake counting the most ledger writes it had in flight at once (each call
    yields to the loop first, so writes sent together overlap)."""

    def __init__(self) -> None:
        super().__init__(yields=lambda: 3)
        self.in_flight = 0
        self.most = 0

    async def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            return await super().patch(*args, **kwargs)
        finally:
            self.in_flight -= 1


def test_gathered_marks_of_many_bookings_are_written_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three bookings, a pod admitted by the webhook under each: the mark loop writes
    the three marks one after another, never as a burst of writes at once (the API
    server would make the webhook's claims wait behind it)."""

    async def scenario() -> None:
        kube = Overlapping()
        w = World(now=START + timedelta(minutes=1), kube=kube)
        task = await gathering(w, monkeypatch)
        try:
            admitted_under_each(w, (1, 2, 3))
            await w.step()
            assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 3
            await asyncio.sleep(0.1)
            assert [w.ledger_of(rid).holds[0].announced for rid in (1, 2, 3)] == [True] * 3
            assert kube.most == 1
        finally:
            await stopped(task)

    run(scenario())


def test_each_gathered_mark_is_written_on_the_copy_as_it_stands_at_its_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the first booking's mark is written, the webhook claims on the second and
    the watch shows it: the second mark is written on that copy, so the ledger's
    ``usedGpus`` counts the new claim (a copy taken before the first write would set it
    from the ledger without it)."""

    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        task = await gathering(w, monkeypatch)
        try:
            admitted_under_each(w, (1, 2))

            def claim_on_the_second() -> None:
                holds = (*w.ledger_of(2).holds, model.Hold("c-new", 1, START))
                w.book(facts(2), holds)
                stored = w.kube.read(GPU_RESERVATIONS, model.reference(2), NS)
                w.caches.reservations.apply(WatchEvent("MODIFIED", stored))

            w.kube.before["patch"] = claim_on_the_second
            await w.step()
            await asyncio.sleep(0.1)
            second = w.kube.read(GPU_RESERVATIONS, model.reference(2), NS)
            assert [h.announced for h in w.ledger_of(2).holds] == [True, False]
            assert second["status"]["usedGpus"] == 2
        finally:
            await stopped(task)

    run(scenario())


def test_marks_left_when_the_term_ends_are_announced_by_a_later_term(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mark loop stops with a mark not written: the announcement is forgotten with it,
    so the next pass finds the hold unannounced, reads the pod's Events back and marks it
    without a second Event."""

    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        monkeypatch.setattr(announce, "MARK_GATHER_S", 3600.0)
        task = asyncio.create_task(w.admitter.step.announcer.run_marks())
        await asyncio.sleep(0)
        webhook_admitted(w, "web", "c-9", START)
        await w.step()
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 1
        assert not w.ledger_of().holds[0].announced
        await stopped(task)
        assert w.admitter.step.announcer.announced == {}
        await w.step()  # no mark loop now: the pass writes its mark itself
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 1
        assert w.ledger_of().holds[0].announced

    run(scenario())


def test_marks_waiting_their_turn_when_the_term_ends_are_announced_by_a_later_term(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The term ends while the first of two gathered marks is being written: neither
    mark is remembered as done, so the next pass (no mark loop now) reads both pods'
    Events back and marks both holds without a second Event."""

    async def scenario() -> None:
        # calls yield to the loop: the end of the term reaches the first write
        w = World(now=START + timedelta(minutes=1), kube=Kube(yields=lambda: 2))
        monkeypatch.setattr(announce, "MARK_GATHER_S", 0.01)
        admitted_under_each(w, (1, 2))
        task = asyncio.create_task(w.admitter.step.announcer.run_marks())
        await asyncio.sleep(0)
        w.kube.before["patch"] = task.cancel  # the term ends during the first write
        await w.step()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 2
        assert w.admitter.step.announcer.announced == {}
        await w.step()
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 2
        assert [w.ledger_of(rid).holds[0].announced for rid in (1, 2)] == [True, True]

    run(scenario())


def test_a_mark_that_fails_leaves_the_mark_loop_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gathered write that fails is the ledger's to log (``ledger.amend_failed``); the
    loop goes on and writes the next marks."""

    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        task = await gathering(w, monkeypatch)
        try:
            webhook_admitted(w, "web", "c-9", START)
            w.kube.faults["patch"] = ServerError(500, "etcd is unwell")
            await w.step()
            await asyncio.sleep(0.1)
            assert not w.ledger_of().holds[0].announced
            del w.kube.faults["patch"]
            holds = (*w.ledger_of().holds, model.Hold("c-2", 1, START, pod="next"))
            w.book(facts(), holds)
            notes = {
                vocab.BOOKING_REFERENCE: "res-1",
                vocab.ADMISSION_CLAIM: "c-2",
                vocab.ADMITTED_AT: format_utc(START),
            }
            w.kube.add(PODS, gpu_pod("next", gated=False, annotations=notes))
            await w.step()
            await asyncio.sleep(0.1)
            assert not task.done()
            assert [h.announced for h in w.ledger_of().holds] == [False, True]
        finally:
            await stopped(task)

    run(scenario())


def test_a_hold_waiting_for_its_binding_does_not_hold_back_the_queue() -> None:
    """A webhook admission's hold not yet bound to its new pod (the announcer binds it
    with its mark; upkeep leaves it that write) counts its GPUs already: a queued pod of
    the same booking is admitted in the same pass, beside it, within the budget."""

    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        webhook_admitted(w, "web", "c-9", START)
        w.kube.add(PODS, gpu_pod("queued"))
        await w.step()
        notes = w.pod("queued")["metadata"].get("annotations") or {}
        assert notes.get(vocab.BOOKING_REFERENCE) == "res-1"
        holds = w.ledger_of().holds
        assert sorted(str(h.pod_uid) for h in holds) == ["uid-queued", "uid-web"]
        assert sum(h.gpus for h in holds) == 2

    run(scenario())


def test_full_reservation_names_the_holder_and_admits_when_it_leaves() -> None:
    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        w.book(facts(gpus=1))
        w.kube.add(PODS, gpu_pod("first", gated=False))
        await w.step()
        assert w.pod("first")["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == "res-1"
        w.kube.add(PODS, gpu_pod("second"))
        await w.step()
        full = w.kube.events(vocab.REASON_RESERVATION_FULL)
        assert len(full) == 1
        assert "first" in full[0]["message"]
        assert full[0]["type"] == "Warning"
        await w.step()  # unchanged: throttled
        assert len(w.kube.events(vocab.REASON_RESERVATION_FULL)) == 1
        del w.kube.objects[(PODS.plural, "alice", "first")]
        await w.sync()
        await w.caches.keeper.once()  # upkeep drops the holder's hold
        await w.step()
        assert w.pod("second")["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == "res-1"

    run(scenario())


def test_too_small_and_no_reservation_and_switches() -> None:
    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1), SUPPORT_CONTACT="help@example.org")
        w.book(facts(gpus=2))
        w.kube.add(PODS, gpu_pod("big", gpus=3))
        other = gpu_pod("h", gated=False)
        other["metadata"]["labels"][vocab.GPU_CLASS_LABEL] = "h100x"
        w.kube.add(PODS, other)
        await w.step()
        small = w.kube.events(vocab.REASON_RESERVATION_TOO_SMALL)
        assert len(small) == 1
        assert "requests 3" in small[0]["message"]
        unknown = w.kube.events(vocab.REASON_UNKNOWN_GPU_CLASS)
        assert len(unknown) == 1
        assert unknown[0]["message"].endswith("contact support: help@example.org")
        quiet = World(
            now=START, RESERVATION_WAIT_EVENT_ENABLED="false", POD_PROBLEM_EVENT_ENABLED="false"
        )
        quiet.book(facts(gpus=2))
        quiet.kube.add(PODS, gpu_pod("big", gpus=3))
        await quiet.step()
        assert quiet.kube.events() == []

    run(scenario())


def test_patch_failure_drops_the_claim_again() -> None:
    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        w.book(facts())
        w.kube.add(PODS, gpu_pod("p"))
        w.kube.faults["patch pods"] = Invalid(422, "refused", "Invalid")
        await w.step()
        assert w.ledger_of().holds == ()
        del w.kube.faults["patch pods"]
        await w.step()  # the pod is unchanged: no retry before the backstop tick
        assert w.ledger_of().holds == ()
        await w.clock.advance(w.settings.queue_interval_s)
        await w.step()
        assert len(w.ledger_of().holds) == 1

    run(scenario())


def test_rebuild_keeps_announcements_of_old_admissions() -> None:
    res = model.GPUReservation(facts())
    now = START + timedelta(hours=1)
    old = ledger.PodUse("a", "ua", 1, "c-a", START)
    new = ledger.PodUse("b", "ub", 1, "c-b", now - timedelta(seconds=5))
    rebuilt = ledger.rebuild(res, [old, new], now, 120)
    assert [h.announced for h in rebuilt.holds] == [True, False]


def test_a_queued_pod_already_running_in_the_ordinary_pool_is_not_admitted() -> None:
    """Known limitation decided: a pod the scheduler placed on an ordinary node before
    its booking had room keeps running there; admitting it would charge the booking for
    GPUs it does not take from it and keep the owner's next pod out."""

    async def scenario() -> None:
        w = World(now=START)
        w.book(facts())
        placed = gpu_pod("placed", gated=False)
        placed["spec"]["nodeName"] = "cpu-node-1"
        placed["status"]["phase"] = "Running"
        w.kube.add(PODS, placed)
        w.kube.add(PODS, gpu_pod("queued"))
        await w.step()
        assert vocab.BOOKING_REFERENCE not in (w.pod("placed")["metadata"].get("annotations") or {})
        assert w.pod("queued")["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == "res-1"
        assert [h.pod_uid for h in w.ledger_of().holds] == ["uid-queued"]

    run(scenario())


def test_a_booking_declared_a_no_show_admits_no_queued_pod() -> None:
    from shared.policy import noshow

    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=20))
        res = noshow.with_record(model.GPUReservation(facts()), noshow.Record(START, START))
        w.kube.add(GPU_RESERVATIONS, model.to_object(res, NS, w.clock.now()), NS)
        w.kube.add(PODS, gpu_pod("late"))
        await w.step()
        assert vocab.BOOKING_REFERENCE not in (w.pod("late")["metadata"].get("annotations") or {})
        assert not w.ledger_of().holds

    run(scenario())


def test_a_pod_changed_since_the_caches_view_is_not_patched_and_decided_again() -> None:
    """R11 without a re-read: the patch is built from the cache's view and tests its
    resourceVersion, so a pod that finished after the cache saw it is never admitted
    (its claim is dropped again), and a pod changed in some other way is admitted as
    soon as the cache shows the change."""

    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        w.book(facts(gpus=2))
        w.kube.add(PODS, gpu_pod("done"))
        w.kube.add(PODS, gpu_pod("edited"))
        await w.sync()
        finished = w.pod("done")
        finished["status"] = {"phase": "Succeeded"}
        w.kube.add(PODS, finished)  # the cache has not seen either change yet
        edited = w.pod("edited")
        edited["metadata"]["labels"]["team"] = "vision"
        w.kube.add(PODS, edited)
        assert await w.admitter.once() == []
        assert w.ledger_of().holds == ()
        for name in ("done", "edited"):
            assert vocab.BOOKING_REFERENCE not in (w.pod(name)["metadata"].get("annotations") or {})
        await w.step()  # the cache shows both changes: only the live pod is admitted
        notes = w.pod("edited")["metadata"]["annotations"]
        assert notes[vocab.BOOKING_REFERENCE] == "res-1"
        assert [h.pod for h in w.ledger_of().holds] == ["edited"]
        assert "annotations" not in w.pod("done")["metadata"]

    run(scenario())


async def lease_world(gpus: int = 1) -> World:
    """An open booking of ``gpus`` GPUs (the just-granted lease) and the ungated pod ``p``
    that asked for it, both in the caches."""
    w = World(now=START + timedelta(minutes=1))
    w.book(facts(gpus=gpus))
    w.kube.add(PODS, gpu_pod("p", gated=False))
    await w.sync()
    return w


async def admit_lease(w: World) -> Admitted | None:
    """The on-demand path's admission of ``p`` under the lease, announced by the caller."""
    return await w.admitter.step.admit_under(
        view(w.pod("p")), w.ledger_of(), w.clock.now(), announce=False
    )


def test_a_lease_pod_the_scheduler_rewrites_between_read_and_patch_is_still_admitted() -> None:
    """The on-demand path reads its pod, claims, and patches with a ``test`` on the
    resourceVersion; a scheduler status write in between refuses the patch. The pod is
    read again and admitted on the next attempt — the granted lease is not given up —
    and the ledger holds exactly the one claim the pod carries."""

    async def scenario() -> None:
        w = await lease_world()

        def scheduler_writes() -> None:
            raw = w.pod("p")
            raw["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
            ]
            w.kube.add(PODS, raw)

        w.kube.before["patch pods"] = scheduler_writes
        got = await admit_lease(w)
        assert got is not None
        notes = w.pod("p")["metadata"]["annotations"]
        assert notes[vocab.BOOKING_REFERENCE] == "res-1"
        assert [h.claim for h in w.ledger_of().holds] == [
            model.claim_key(notes[vocab.ADMISSION_CLAIM])
        ]

    run(scenario())


def test_a_lease_pod_whose_patch_is_always_refused_is_tried_a_bounded_number_of_times() -> None:
    async def scenario() -> None:
        w = await lease_world()
        w.kube.faults["patch pods"] = Invalid(422, "refused", "Invalid")
        got = await admit_lease(w)
        assert got is None
        assert w.ledger_of().holds == ()  # every refused attempt's claim dropped again
        assert w.kube.calls.count(("patch", PODS.plural)) == ON_DEMAND_ATTEMPTS

    run(scenario())


def test_a_lease_pod_whose_patch_answer_was_lost_is_not_tried_again() -> None:
    """A lost answer (5xx) on a pod that has not changed: the patch may still land, so
    the hold is kept and no second claim is made — a retry would hold the GPU twice."""

    async def scenario() -> None:
        w = await lease_world(gpus=2)
        w.kube.faults["patch pods"] = ServerError(503, "the answer was lost")
        got = await admit_lease(w)
        assert got is None
        assert w.kube.calls.count(("patch", PODS.plural)) == 1
        assert len(w.ledger_of().holds) == 1

    run(scenario())


def test_an_on_demand_admission_keeps_the_queues_backoff_for_its_pod() -> None:
    """The reserved queue's patch for a pod was refused, so the queue waits for the pod
    to change or the backstop tick. An on-demand admission of the same pod whose claim
    fails must not lift that backoff: the next pass leaves the pod alone."""

    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        w.book(facts(gpus=2))
        w.book(facts(rid=2, gpus=1))
        w.kube.add(PODS, gpu_pod("p", gpus=2))
        w.kube.faults["patch pods"] = Invalid(422, "refused", "Invalid")
        await w.step()
        del w.kube.faults["patch pods"]
        too_small = w.ledger_of(2)
        got = await w.admitter.step.admit_under(view(w.pod("p")), too_small, w.clock.now())
        assert got is None
        await w.step()  # the pod is unchanged: no retry before the backstop tick
        assert w.ledger_of().holds == ()
        await w.clock.advance(w.settings.queue_interval_s)
        await w.step()
        assert [h.pod for h in w.ledger_of().holds] == ["p"]

    run(scenario())


def test_a_queue_pass_between_a_lease_admission_and_its_announcement_says_nothing() -> None:
    """The on-demand path announces a batch's admissions once its asks are done. A queue
    pass that sees such a pod admitted first must not take its unannounced hold for a
    webhook admission and announce it too: one RuntimeGuaranteed, none counted as the
    webhook's."""

    async def scenario() -> None:
        w = await lease_world()
        got = await admit_lease(w)
        assert got is not None
        await w.step()  # the queue's pass sees the admitted pod and its unannounced hold
        assert w.kube.events(vocab.REASON_RUNTIME_GUARANTEED) == []
        await w.admitter.step.announce([got], w.clock.now())
        await w.step()
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 1
        assert w.ledger_of().holds[0].announced
        assert w.admitter.step.announcer.expected == set()

    run(scenario())


def test_a_failed_lease_admission_leaves_its_pod_to_the_queues_announcer() -> None:
    """When the on-demand admission fails, nothing is expected of the caller: a hold that
    may still land (a lost answer) is announced by a queue pass once its pod shows it."""

    async def scenario() -> None:
        w = await lease_world()
        w.kube.faults["patch pods"] = Invalid(422, "refused", "Invalid")
        got = await admit_lease(w)
        assert got is None
        assert w.admitter.step.announcer.expected == set()

    run(scenario())


def test_a_lease_admission_given_the_pods_read_uses_it_first_and_reads_again_after_a_refusal() -> (
    None
):
    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        w.book(facts(gpus=1))
        w.kube.add(PODS, gpu_pod("p", gated=False))
        await w.sync()
        read = await w.admitter.step.reread(view(w.pod("p")))
        assert read is not None
        gets = w.kube.calls.count(("get", PODS.plural))
        w.kube.faults["patch pods"] = Invalid(422, "refused", "Invalid")
        got = await w.admitter.step.admit_under(
            view(w.pod("p")), w.ledger_of(), w.clock.now(), announce=False, fresh=read
        )
        assert got is None
        # the first attempt used the caller's read; each retry read the pod again
        assert w.kube.calls.count(("get", PODS.plural)) - gets == ON_DEMAND_ATTEMPTS - 1

    run(scenario())


def test_a_full_pass_admits_the_oldest_waiting_pod_first_whatever_the_list_order() -> None:
    """After a relist the cache holds pods in LIST order (by name); a booking with room
    for one admits the pod created first, not the first name."""

    async def scenario() -> None:
        w = World()
        w.book(facts(gpus=1))
        w.kube.add(PODS, gpu_pod("a-forged", creationTimestamp="2026-01-05T09:02:00Z"))
        w.kube.add(PODS, gpu_pod("b-later", creationTimestamp="2026-01-05T09:01:00Z"))
        w.kube.add(PODS, gpu_pod("z-training", creationTimestamp="2026-01-05T08:57:00Z"))
        await w.clock.advance((START - w.clock.now()).total_seconds())
        await w.step()
        [hold] = w.ledger_of().holds
        assert hold.pod == "z-training"
        admitted = [
            name
            for name in ("a-forged", "b-later", "z-training")
            if vocab.BOOKING_REFERENCE in (w.pod(name)["metadata"].get("annotations") or {})
        ]
        assert admitted == ["z-training"]

    run(scenario())


def test_the_announcer_binds_an_unbound_claim_to_the_first_persisted_carrier() -> None:
    """A copy of a webhook admission's claim listed first by the cache (a relist) is
    not bound: the hold goes to the pod persisted first, as upkeep and the backstop
    decide; the copy is never announced."""

    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        w.book(facts(), (model.Hold("c-9", 1, START),))
        notes = {vocab.BOOKING_REFERENCE: "res-1", vocab.ADMISSION_CLAIM: "c-9"}
        for name, second in (("copy", 5), ("orig", 2)):  # the copy listed first
            raw = gpu_pod(name, gated=False, annotations=notes)
            raw["metadata"]["creationTimestamp"] = format_utc(START + timedelta(seconds=second))
            w.kube.add(PODS, raw)
        await w.step()
        [hold] = w.ledger_of().holds
        assert (hold.pod, hold.pod_uid, hold.announced) == ("orig", "uid-orig", True)
        [event] = w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)
        assert event["involvedObject"]["name"] == "orig"

    run(scenario())


class Stalled:
    """A monotonic clock that jumps a minute at every reading: any deadline taken from it
    is already past when the ledger looks again."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def monotonic(self) -> float:
        self.seconds += 60.0
        return self.seconds


def test_the_admission_deadline_is_measured_on_the_injected_monotonic_clock() -> None:
    """The claim's deadline comes from the step's monotonic clock, not the system's: with
    one that has run past it, the claim stops (reason ``deadline``), nothing is held and
    the pod is not patched."""

    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        w.book(facts(gpus=2))
        w.kube.add(PODS, gpu_pod("p", gpus=1))
        await w.sync()
        step = Admission(
            w.kube,
            w.caches,
            w.settings,
            w.clock,
            QueueMetrics(CollectorRegistry()),
            Knowledge(lambda: True, lambda: {"a100"}),
            mono=Stalled(),
        )
        got = await step.admit_under(view(w.pod("p")), w.ledger_of(), w.clock.now())
        assert got is None
        assert w.ledger_of().holds == ()
        assert vocab.ADMISSION_CLAIM not in (w.pod("p")["metadata"].get("annotations") or {})

    run(scenario())


@pytest.mark.parametrize(
    "holds",
    [
        (("c-1", None), ("c-2", "uid-web")),
        (("c-9", None), ("c-9", None)),
        (("c-9", "uid-other"), ("c-9", None)),
        (("c-1", "uid-web"), ("c-2", "uid-web")),
        (("c-9", ""), ("c-3", None)),
        (),
    ],
)
def test_the_hold_index_finds_what_a_scan_of_the_holds_finds(
    holds: tuple[tuple[str, str | None], ...],
) -> None:
    """``HoldsOf`` (one pass over a booking's holds for all its pods) gives each pod
    the hold the rule names: the first bound to its uid, else the first unbound one of
    its claim."""
    ledger_holds = tuple(model.Hold(c, 1, START, pod_uid=u) for c, u in holds)
    res = model.GPUReservation(facts(), ledger_holds)
    pod = view(gpu_pod("web", annotations={vocab.ADMISSION_CLAIM: "c-9"}))

    def scanned() -> model.Hold | None:
        by_uid = next((h for h in ledger_holds if h.pod_uid and h.pod_uid == pod.uid), None)
        if by_uid is not None or pod.claim is None:
            return by_uid
        return next((h for h in ledger_holds if h.claim == pod.claim and not h.bound), None)

    assert announce.HoldsOf(res).of(pod) is scanned()


def test_a_ledger_change_looks_again_only_at_the_holds_still_to_announce() -> None:
    """The queue's pass over a reservation whose holds moved looks at its owner's waiting
    pods and the pods whose hold is still to announce, not at every pod it holds."""

    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        holds = (
            model.Hold("c-1", 1, START, pod="said", pod_uid="uid-said", announced=True),
            model.Hold("c-2", 1, START, pod="new"),
        )
        w.book(facts(), holds)
        for name, claim in (("said", "c-1"), ("new", "c-2")):
            notes = {vocab.BOOKING_REFERENCE: "res-1", vocab.ADMISSION_CLAIM: claim}
            w.kube.add(PODS, gpu_pod(name, gated=False, annotations=notes))
        w.kube.add(PODS, gpu_pod("queued"))
        await w.sync()
        looked = w.admitter._concerned(set(), {f"{NS}/res-1"})
        assert sorted(p.name for p in looked) == ["new", "queued"]

    run(scenario())
