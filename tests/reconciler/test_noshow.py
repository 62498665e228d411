"""The no-show loop: declare durably, re-verify against a fresh LIST, cancel once."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest

from reconciler.base.caches import Caches
from reconciler.base.metrics import Metrics
from reconciler.base.pods import project_pod
from reconciler.base.settings import load
from reconciler.capacity.noshow import Holding, NoShows
from shared import model
from shared.appclient import Cancelled, CancelReason, CancelResult, Transient, TransientReason
from shared.clock import ManualClock, format_utc
from shared.logs import fields_of
from shared.policy import noshow
from shared.policy.matching import MatchRules
from shared.resources import GPU_RESERVATIONS, PODS
from tests.fakekube import FakeKube
from tests.reconciler.builders import END, NS, START, pod, relisting, reservation

ENV = {
    "RESERVATION_API_URL": "http://app",
    "RESERVATION_API_KEY": "k",
    "POD_NAMESPACE": NS,
    "NOSHOW_TIMEOUT_MINUTES": "15",
    "NOSHOW_GRACE_MINUTES": "30",
}
DUE = START + timedelta(minutes=15)


class FakeApp:
    """Counts cancel calls; ``fail`` answers them with a 503."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, CancelReason]] = []
        self.fail = False

    async def cancel(self, reservation_id: int, reason: CancelReason) -> CancelResult:
        self.calls.append((reservation_id, reason))
        if self.fail:
            return Transient(TransientReason.SERVER_ERROR, "503 from app", 503)
        return Cancelled(None)


def booking(rid: int = 1, state: model.State = model.State.ACTIVE) -> model.ReservationFacts:
    return model.ReservationFacts(
        rid, "alice", "a100", "A100", 2, model.Kind.BOOKING, START, END, state, START
    )


class World:
    def __init__(self, now: Any = START - timedelta(minutes=10)) -> None:
        self.kube = FakeKube()
        self.clock = ManualClock(now)
        self.app = FakeApp()
        self.settings, _ = load(ENV)
        self.caches = Caches(relisting(self.kube), self.settings, self.clock)
        self.noshows = self.leader()

    def leader(self) -> NoShows:
        """A fresh loop over the same caches (a new leader term's memory)."""
        c = self.caches
        return NoShows(
            self.kube, self.app, self.settings, self.clock, Metrics(),
            lambda: c.pods.items, c.by_name, c.ready,
        )  # fmt: skip

    def book(self, facts: model.ReservationFacts, record: noshow.Record | None = None) -> None:
        res = noshow.with_record(model.GPUReservation(facts), record)
        self.kube.add(GPU_RESERVATIONS, model.to_object(res, NS, self.clock.now()), NS)

    def record(self, rid: int = 1) -> dict[str, Any] | None:
        obj = self.kube.objects[(GPU_RESERVATIONS.plural, NS, model.reference(rid))]
        got: dict[str, Any] | None = obj.get("status", {}).get(noshow.STATUS_KEY)
        return got


async def advance_to(w: World, when: Any) -> list[str]:
    await w.clock.advance((when - w.clock.now()).total_seconds())
    await w.caches.pods.relist()
    await w.caches.reservations.relist()
    return await w.noshows.once()


def test_an_unused_booking_is_declared_then_cancelled_once_at_its_deadline() -> None:
    async def scenario() -> None:
        w = World()
        w.book(booking())
        assert await advance_to(w, w.clock.now()) == []
        assert await advance_to(w, DUE - timedelta(seconds=1)) == []
        assert w.app.calls == []
        assert w.record() is None
        assert await advance_to(w, DUE) == ["res-1"]
        assert w.app.calls == [(1, CancelReason.NO_SHOW)]
        rec = w.record()
        assert rec is not None
        assert (rec["declaredAt"], rec["deadline"], rec["cancelledAt"], rec["attempts"]) == (
            format_utc(DUE), format_utc(DUE), format_utc(DUE), 1,
        )  # fmt: skip
        assert await advance_to(w, DUE + timedelta(minutes=5)) == []
        assert len(w.app.calls) == 1

    asyncio.run(scenario())


def test_a_held_booking_is_never_declared() -> None:
    async def scenario() -> None:
        w = World()
        w.book(booking())
        w.kube.add(PODS, pod("nb", "res-1", phase="Pending"), "alice")
        await advance_to(w, w.clock.now())
        await advance_to(w, DUE + timedelta(hours=1))
        assert w.app.calls == []
        assert w.record() is None

    asyncio.run(scenario())


def test_a_pod_created_one_second_before_the_deadline_keeps_the_booking() -> None:
    """Issue 11 acceptance 3's edge, on the manual clock (the sandbox scenario creates
    its late pod seconds earlier: a loaded machine cannot promise one second there)."""

    async def scenario() -> None:
        w = World()
        w.book(booking())
        assert await advance_to(w, w.clock.now()) == []
        assert await advance_to(w, DUE - timedelta(seconds=1)) == []
        w.kube.add(PODS, pod("late", "res-1"), "alice")
        assert await advance_to(w, DUE) == []
        assert await advance_to(w, DUE + timedelta(hours=1)) == []
        assert w.app.calls == []
        assert w.record() is None

    asyncio.run(scenario())


def test_a_pod_that_raced_in_wins_and_the_declaration_is_withdrawn() -> None:
    async def scenario() -> None:
        w = World()
        w.book(booking())
        await advance_to(w, w.clock.now())
        await w.clock.advance((DUE - w.clock.now()).total_seconds())
        await w.caches.reservations.relist()
        await w.caches.pods.relist()
        # The pod exists in the API but the cache has not seen it yet.
        w.kube.add(PODS, pod("late", "res-1"), "alice")
        assert await w.noshows.once() == []
        assert w.app.calls == []
        assert w.record() is None

    asyncio.run(scenario())


def test_finished_or_terminating_pods_do_not_hold_a_booking() -> None:
    async def scenario() -> None:
        w = World()
        w.book(booking())
        w.kube.add(PODS, pod("done", "res-1", phase="Succeeded"), "alice")
        leaving = pod("leaving", "res-1")
        leaving["metadata"]["deletionTimestamp"] = format_utc(START)
        w.kube.add(PODS, leaving, "alice")
        await advance_to(w, w.clock.now())
        assert await advance_to(w, DUE) == ["res-1"]

    asyncio.run(scenario())


def test_a_failed_cancel_is_recorded_and_retried_until_it_lands() -> None:
    async def scenario() -> None:
        w = World()
        w.book(booking())
        w.app.fail = True
        await advance_to(w, w.clock.now())
        assert await advance_to(w, DUE) == []
        rec = w.record()
        assert rec is not None
        assert rec["attempts"] == 1
        assert "cancelledAt" not in rec
        assert "503" in rec["lastError"]
        w.app.fail = False
        assert await advance_to(w, DUE + timedelta(minutes=5)) == ["res-1"]
        rec = w.record()
        assert rec is not None
        assert rec["attempts"] == 2
        assert "cancelledAt" in rec
        assert len(w.app.calls) == 2

    asyncio.run(scenario())


def test_a_new_leader_finishes_a_pending_cancel_once_and_never_repeats_a_landed_one() -> None:
    async def scenario() -> None:
        w = World(now=DUE + timedelta(minutes=1))
        w.book(booking(1), noshow.Record(DUE, DUE))  # declared by a leader that died
        landed = noshow.Record(DUE, DUE, cancelled_at=DUE, attempts=1)
        w.book(booking(2), landed)
        assert await advance_to(w, w.clock.now()) == ["res-1"]
        assert w.app.calls == [(1, CancelReason.NO_SHOW)]
        w.noshows = w.leader()  # and yet another leader
        assert await advance_to(w, w.clock.now() + timedelta(minutes=1)) == []
        assert w.app.calls == [(1, CancelReason.NO_SHOW)]

    asyncio.run(scenario())


def test_a_booking_the_mirror_shows_cancelled_is_recorded_without_a_call() -> None:
    async def scenario() -> None:
        w = World(now=DUE)
        w.book(booking(state=model.State.CANCELLED), noshow.Record(DUE, DUE))
        assert await advance_to(w, w.clock.now()) == ["res-1"]
        assert w.app.calls == []
        rec = w.record()
        assert rec is not None
        assert "cancelledAt" in rec

    asyncio.run(scenario())


def test_a_booking_open_when_the_leader_starts_gets_the_grace() -> None:
    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=20))
        w.book(booking())
        assert await advance_to(w, w.clock.now()) == []
        assert await advance_to(w, START + timedelta(minutes=49)) == []
        assert await advance_to(w, START + timedelta(minutes=50)) == ["res-1"]

    asyncio.run(scenario())


def test_a_malformed_record_is_logged_once_and_treated_as_undeclared(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=20))
        w.book(booking())
        obj = w.kube.objects[(GPU_RESERVATIONS.plural, NS, "res-1")]
        obj["status"][noshow.STATUS_KEY] = {"declaredAt": "whenever"}
        await advance_to(w, w.clock.now())
        await advance_to(w, w.clock.now() + timedelta(minutes=1))
        # Declared afresh after the grace: the malformed record is replaced.
        assert await advance_to(w, START + timedelta(minutes=50)) == ["res-1"]
        rec = w.record()
        assert rec is not None
        assert "cancelledAt" in rec

    with caplog.at_level(logging.WARNING, logger="reconciler.capacity.noshow"):
        asyncio.run(scenario())
    bad = [fields_of(r) for r in caplog.records if r.getMessage() == "noshow.record_malformed"]
    assert len(bad) == 1
    assert bad[0]["reservation"] == "res-1"


def test_leases_and_best_effort_stubs_are_never_cancelled() -> None:
    async def scenario() -> None:
        w = World()
        for rid, kind in ((1, model.Kind.ON_DEMAND), (2, model.Kind.BEST_EFFORT)):
            facts = model.ReservationFacts(
                rid, "alice", "a100", "A100", 1, kind, START, END, model.State.ACTIVE, START
            )
            w.book(facts)
        await advance_to(w, w.clock.now())
        await advance_to(w, END - timedelta(minutes=1))
        assert w.app.calls == []

    asyncio.run(scenario())


def test_a_cache_that_still_shows_the_declaration_pending_never_repeats_the_cancel() -> None:
    async def scenario() -> None:
        w = World(now=DUE)
        w.book(booking(), noshow.Record(DUE, DUE))
        await w.caches.pods.relist()
        await w.caches.reservations.relist()
        assert await w.noshows.once() == ["res-1"]
        # The watch has not delivered the cancelledAt write yet: the cache says pending.
        assert await w.noshows.once() == []
        assert w.app.calls == [(1, CancelReason.NO_SHOW)]

    asyncio.run(scenario())


def test_the_cancelled_row_the_app_answers_with_is_mirrored_at_once() -> None:
    async def scenario() -> None:
        w = World(now=DUE)
        w.book(booking(), noshow.Record(DUE, DUE))
        row = reservation(1, status="cancelled", cancel_reason="no-show")
        mirrored: list[Any] = []

        async def mirror(got: Any) -> None:
            mirrored.append(got)

        async def cancel(reservation_id: int, reason: CancelReason) -> CancelResult:
            w.app.calls.append((reservation_id, reason))
            return Cancelled(row)

        w.app.cancel = cancel  # type: ignore[method-assign]
        c = w.caches
        w.noshows = NoShows(
            w.kube, w.app, w.settings, w.clock, Metrics(),
            lambda: c.pods.items, c.by_name, c.ready, mirror=mirror,
        )  # fmt: skip
        await advance_to(w, w.clock.now())
        assert mirrored == [row]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("env", "timeout", "grace", "audit_s", "notices"),
    [
        pytest.param({}, 15, 30, 3600, [], id="defaults"),
        pytest.param(
            {"NOSHOW_TIMEOUT_MINUTES": "0", "NOSHOW_GRACE_MINUTES": "5",
             "CAPACITY_CHECK_INTERVAL": "1"},
            0, 5, 1, [], id="the smallest allowed",
        ),
        pytest.param(
            {"NOSHOW_TIMEOUT_MINUTES": "-1", "NOSHOW_GRACE_MINUTES": "soon",
             "CAPACITY_CHECK_INTERVAL": "0"},
            15, 30, 3600,
            [("NOSHOW_TIMEOUT_MINUTES", "out_of_range"), ("NOSHOW_GRACE_MINUTES", "not_an_integer"),
             ("CAPACITY_CHECK_INTERVAL", "out_of_range")],
            id="invalid values fall back to the defaults with a notice, as the seed did",
        ),
    ],
)  # fmt: skip
def test_settings(
    env: dict[str, str], timeout: int, grace: int, audit_s: int, notices: list[Any]
) -> None:
    settings, reader = load(
        {**ENV, "NOSHOW_TIMEOUT_MINUTES": "", "NOSHOW_GRACE_MINUTES": "", **env}
    )
    assert settings.noshow_timeout == timedelta(minutes=timeout)
    assert settings.noshow_grace == timedelta(minutes=grace)
    assert settings.capacity_check_s == audit_s
    assert [(n.variable, n.reason) for n in reader.notices] == notices


def test_a_booking_vacated_mid_window_is_re_armed_with_the_grace() -> None:
    async def scenario() -> None:
        w = World()
        w.book(booking())
        w.kube.add(PODS, pod("nb", "res-1"), "alice")
        await advance_to(w, w.clock.now())
        await advance_to(w, DUE + timedelta(minutes=10))
        assert w.app.calls == []
        left = DUE + timedelta(minutes=20)
        w.kube.objects[(PODS.plural, "alice", "nb")]["status"]["phase"] = "Succeeded"
        await advance_to(w, left)
        assert await advance_to(w, left + timedelta(minutes=29)) == []
        assert await advance_to(w, left + timedelta(minutes=30)) == ["res-1"]
        rec = w.record()
        assert rec is not None
        assert rec["deadline"] == format_utc(left + timedelta(minutes=30))

    asyncio.run(scenario())


def test_a_failing_cancel_is_not_retried_before_the_next_tick_however_often_woken() -> None:
    async def scenario() -> None:
        w = World(now=DUE)
        w.book(booking(), noshow.Record(DUE, DUE))
        w.app.fail = True
        await advance_to(w, w.clock.now())
        for _ in range(3):  # pod and reservation changes wake the loop again at once
            await w.noshows.once()
        assert len(w.app.calls) == 1
        await advance_to(w, DUE + timedelta(seconds=299))
        assert len(w.app.calls) == 1
        w.app.fail = False
        assert await advance_to(w, DUE + timedelta(seconds=300)) == ["res-1"]
        assert len(w.app.calls) == 2

    asyncio.run(scenario())


def test_the_no_show_loop_wakes_when_a_booking_gains_its_first_or_loses_its_last_holder() -> None:
    """Ten pods admitted under one booking wake the loop once; it wakes again only when
    the last of them stops holding it (finished, leaving or gone)."""
    woken: list[int] = []
    holding = Holding(lambda: woken.append(1))

    def view(name: str, phase: str = "Running") -> Any:
        raw = pod(name, "res-1", phase=phase)
        raw["metadata"]["uid"] = f"uid-{name}"
        return project_pod(raw, MatchRules())

    for i in range(10):
        holding.changed(f"alice/p{i}", None, view(f"p{i}"))
    assert len(woken) == 1
    for i in range(9):
        holding.changed(f"alice/p{i}", view(f"p{i}"), view(f"p{i}", "Succeeded"))
    assert len(woken) == 1
    holding.changed("alice/p9", view("p9"), None)
    assert len(woken) == 2
    holding.changed("alice/unadmitted", None, project_pod(pod("u", None), MatchRules()))
    assert len(woken) == 2


def test_a_declaration_at_a_sub_second_instant_is_logged_and_counted_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The stored record keeps whole seconds: a declaration made at DUE + 0.4 s reads
    back unequal to the in-memory one, and was neither logged nor counted."""

    async def scenario() -> None:
        w = World()
        metrics = Metrics()
        c = w.caches
        w.noshows = NoShows(
            w.kube, w.app, w.settings, w.clock, metrics,
            lambda: c.pods.items, c.by_name, c.ready,
        )  # fmt: skip
        w.book(booking())
        await advance_to(w, w.clock.now())
        with caplog.at_level(logging.INFO, logger="reconciler.capacity.noshow"):
            assert await advance_to(w, DUE + timedelta(milliseconds=400)) == ["res-1"]
            await advance_to(w, DUE + timedelta(minutes=1))
        declared = [fields_of(r) for r in caplog.records if r.getMessage() == "noshow.declared"]
        assert [(d["reservation"], d["owner"]) for d in declared] == [("res-1", "alice")]
        assert metrics.noshow_declared._value.get() == 1

    asyncio.run(scenario())
