"""Cancellation and reassignment evictions (R27, R28), idempotent across restarts."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from reconciler.queue.evict import evictions, message
from shared import model, vocab
from shared.errors import ServerError
from tests.reconciler.builders import START
from tests.reconciler.upholdkit import H, World, facts, raw_pod, run

NOW = START + timedelta(minutes=10)
CANCELLED = model.State.CANCELLED


def cancelled_world(adoption: bool = True) -> World:
    w = World(NOW, adoption=adoption)
    w.book(facts(1, state=CANCELLED, cancel_reason="project\nover"))
    w.add_pod(raw_pod("job", "res-1"), hold_on="res-1")
    return w


def test_a_booking_cancelled_mid_window_evicts_its_pod_after_the_event() -> None:
    w = cancelled_world()
    assert run(w.evictor.once()) == 1
    assert not w.exists("job")
    [(pod, reason, text)] = w.emit.sent
    assert (pod, reason) == ("alice/job", vocab.REASON_RESERVATION_CANCELLED)
    assert "res-1" in text
    assert "was cancelled (reason: project over)" in text
    assert w.evictor.evicted == {vocab.REASON_RESERVATION_CANCELLED: 1}
    assert w.counted == [vocab.REASON_RESERVATION_CANCELLED]


def test_a_second_pass_evicts_nothing_and_says_nothing() -> None:
    w = cancelled_world()
    run(w.evictor.once())
    assert run(w.evictor.once()) == 0
    assert len(w.emit.sent) == 1


def test_a_restart_between_the_event_and_the_delete_deletes_without_a_second_event() -> None:
    w = cancelled_world()
    w.kube.down = True  # the first process sends the Event but cannot delete
    ev = evictions(w.pods().values(), w.reservations(), NOW)[0]
    run(w.emit(w.kube, ev.pod, ev.reason, message(ev, None), now=NOW))
    w.kube.down = False
    w.build()  # a restart: nothing in memory survives
    assert run(w.evictor.once()) == 1
    assert not w.exists("job")
    assert w.emit.reasons() == [vocab.REASON_RESERVATION_CANCELLED]


def test_a_terminating_pod_is_not_evicted_again() -> None:
    w = cancelled_world()
    w.kube.objects[("pods", "alice", "job")]["metadata"]["deletionTimestamp"] = "x"
    assert run(w.evictor.once()) == 0
    assert w.emit.sent == []


def test_a_failed_delete_is_retried_on_the_next_pass() -> None:
    w = cancelled_world()

    async def refuse(*args, **kwargs):
        raise ServerError(503, "unavailable")

    real = w.kube.delete
    w.kube.delete = refuse  # type: ignore[method-assign]
    assert run(w.evictor.once()) == 0
    w.kube.delete = real  # type: ignore[method-assign]
    assert run(w.evictor.once()) == 1
    assert w.emit.reasons() == [vocab.REASON_RESERVATION_CANCELLED]


def test_cancelled_before_or_after_the_window_evicts_nothing() -> None:
    w = World(NOW)
    w.book(facts(1, START + H, START + 2 * H, state=CANCELLED))
    w.book(facts(2, START - 2 * H, START - H, state=CANCELLED))
    w.add_pod(raw_pod("early", "res-1"))
    w.add_pod(raw_pod("late", "res-2"))
    assert run(w.evictor.once()) == 0
    assert w.exists("early")
    assert w.exists("late")


def test_an_owner_change_mid_window_evicts_the_previous_owners_pods() -> None:
    w = World(NOW)
    w.book(facts(1, owner="bob"))
    w.add_pod(raw_pod("old", "res-1", ns="alice"), hold_on="res-1")  # ran under it
    w.add_pod(raw_pod("new", "res-1", ns="bob"), hold_on="res-1")
    assert run(w.evictor.once()) == 1
    assert not w.exists("old")
    assert w.exists("new", "bob")
    [(pod, reason, text)] = w.emit.sent
    assert (pod, reason) == ("alice/old", vocab.REASON_RESERVATION_REASSIGNED)
    assert "bob" not in text  # never names the other user


def test_a_reassigned_pod_is_never_adopted_and_a_name_reused_is_never_hit() -> None:
    w = World(NOW)
    w.book(facts(1, owner="bob"))
    w.book(facts(2))  # alice's other open booking: reassignment does not re-link
    w.add_pod(raw_pod("old", "res-1"), hold_on="res-1")
    views = w.pods()
    w.kube.objects[("pods", "alice", "old")]["metadata"]["uid"] = "uid-reborn"
    ev = evictions(views.values(), w.reservations(), NOW)[0]
    assert run(w.evictor.evict(ev, NOW))  # the 409 counts as done: it is another pod
    assert w.exists("old")


def test_cancelled_pods_are_adopted_onto_another_open_booking_first() -> None:
    w = cancelled_world()
    w.book(facts(2, START, START + 2 * H))
    assert run(w.evictor.once()) == 1
    assert w.exists("job")
    assert w.notes("job")[vocab.BOOKING_REFERENCE] == "res-2"
    assert w.emit.reasons() == [
        vocab.REASON_RUNTIME_GUARANTEED,
        vocab.REASON_RESERVATION_RELINKED,
    ]


def test_with_adoption_off_cancelled_pods_are_evicted() -> None:
    w = cancelled_world(adoption=False)
    w.book(facts(2, START, START + 2 * H))
    run(w.evictor.once())
    assert not w.exists("job")


def test_a_pass_over_touched_pods_decides_on_those_pods_only() -> None:
    """A pod event touches one pod: the pass decides on it (a pod re-linked onto the
    cancelled booking is evicted) and on no other (left to a full pass)."""
    w = cancelled_world()
    w.add_pod(raw_pod("moved", "res-1"), hold_on="res-1")
    assert run(w.evictor.once({"alice/moved", "alice/gone"})) == 1
    assert not w.exists("moved")
    assert w.exists("job")
    assert w.evictor.looked == 1
    assert run(w.evictor.once()) == 1  # the full pass (tick, reservation change)
    assert not w.exists("job")


def test_a_burst_of_pod_events_costs_one_pass() -> None:
    """Pods admitted under an open booking while the evictor waits (a window opening):
    however many events, one pass over the pods they touched."""
    w = World(NOW)
    w.book(facts(1, START, START + 3 * H, gpus=50))

    async def scenario() -> None:
        task = asyncio.create_task(w.evictor.run(3600.0))
        for _ in range(20):
            await asyncio.sleep(0)
        assert (w.evictor.passes, w.evictor.looked) == (1, 0)
        for i in range(40):
            w.add_pod(raw_pod(f"p{i}", "res-1"), hold_on="res-1")
            w.evictor.touch(f"alice/p{i}")
        for _ in range(20):
            await asyncio.sleep(0)
        assert (w.evictor.passes, w.evictor.looked) == (2, 40)
        await w.clock.advance(3600)  # the tick: every pod
        for _ in range(20):
            await asyncio.sleep(0)
        assert (w.evictor.passes, w.evictor.looked) == (3, 40)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(scenario())


def test_a_pod_that_never_ran_under_a_booking_is_not_told_it_was_reassigned() -> None:
    """Issue 27, case 3: dave's pod naming alice's open booking (no hold of its own in
    its ledger) is not the evictor's — it is not told "reassigned", nor the booking's
    window; the backstop evicts it as unadmitted."""
    w = World(NOW)
    w.book(facts(1))  # alice's
    w.add_pod(raw_pod("forged2", "res-1", ns="dave"))
    assert evictions(w.pods().values(), w.reservations(), NOW) == []
    assert run(w.evictor.once()) == 0
    assert w.emit.sent == []
