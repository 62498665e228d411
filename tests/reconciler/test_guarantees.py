"""Guarantees kept live (R9, R10, R35) on the manual clock; issue 7 acceptance 3 (unit)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.admission.guarantees import differing, next_end, patch_ops, wanted_notes
from shared import model, vocab
from shared.clock import format_utc, parse_utc
from shared.pointer import annotation as pointer
from tests.reconciler.builders import START
from tests.reconciler.upholdkit import H, World, facts, raw_pod, run

IN_FIRST = START + timedelta(minutes=10)


def chained_world() -> World:
    w = World(IN_FIRST)
    w.book(facts(1, START, START + H))
    w.book(facts(2, START + H, START + 2 * H))
    w.add_pod(raw_pod("job", "res-1"), hold_on="res-1")
    return w


def test_two_abutting_bookings_guarantee_until_the_end_of_the_second() -> None:
    w = chained_world()
    assert run(w.keeper.once()) == 1
    notes = w.notes("job")
    assert notes[vocab.GUARANTEED_UNTIL] == format_utc(START + 2 * H)
    assert notes[vocab.GUARANTEE_STATUS] == vocab.GUARANTEE_STATUS_GUARANTEED
    assert notes[vocab.RESERVATION_END] == format_utc(START + H)  # its own window


def test_after_both_end_status_is_overstay_and_until_stays_frozen() -> None:
    w = chained_world()
    run(w.keeper.once())
    w.clock._now = START + 2 * H
    assert run(w.keeper.once()) == 1
    notes = w.notes("job")
    assert notes[vocab.GUARANTEE_STATUS] == vocab.GUARANTEE_STATUS_OVERSTAY
    assert notes[vocab.GUARANTEED_UNTIL] == format_utc(START + 2 * H)


def test_patches_are_written_only_when_something_differs() -> None:
    w = chained_world()
    run(w.keeper.once())
    before = w.patches()
    assert run(w.keeper.once()) == 0
    assert run(w.keeper.once()) == 0
    assert w.patches() == before


def test_the_guarantee_grows_when_an_abutting_booking_appears() -> None:
    w = World(IN_FIRST)
    w.book(facts(1, START, START + H))
    w.add_pod(raw_pod("job", "res-1"))
    run(w.keeper.once())
    assert w.notes("job")[vocab.GUARANTEED_UNTIL] == format_utc(START + H)
    w.book(facts(2, START + H, START + 3 * H))
    run(w.keeper.once())
    assert w.notes("job")[vocab.GUARANTEED_UNTIL] == format_utc(START + 3 * H)


def test_reservation_facts_are_restamped_when_they_change() -> None:
    w = chained_world()
    run(w.keeper.once())
    w.book(facts(1, START, START + H, gpus=4))
    run(w.keeper.once())
    assert w.notes("job")[vocab.RESERVATION_GPU_COUNT] == "4"


def test_runtime_limit_and_admitted_at_are_never_touched() -> None:
    w = World(IN_FIRST)
    w.book(facts(1))
    kept = {vocab.POD_RUNTIME_LIMIT_SECONDS: "17", vocab.ADMITTED_AT: "2026-01-01T00:00:00Z"}
    w.add_pod(raw_pod("job", "res-1", notes=kept))
    run(w.keeper.once())
    notes = w.notes("job")
    assert {k: notes[k] for k in kept} == kept


def test_a_cancelled_or_missing_reservation_means_overstay_with_frozen_facts() -> None:
    w = World(IN_FIRST)
    w.book(facts(1, state=model.State.CANCELLED, gpus=5))
    w.add_pod(raw_pod("a", "res-1", notes={vocab.RESERVATION_GPU_COUNT: "2"}))
    w.add_pod(raw_pod("b", "res-9"))
    run(w.keeper.once())
    assert w.notes("a")[vocab.GUARANTEE_STATUS] == vocab.GUARANTEE_STATUS_OVERSTAY
    assert w.notes("a")[vocab.RESERVATION_GPU_COUNT] == "2"
    assert w.notes("b")[vocab.GUARANTEE_STATUS] == vocab.GUARANTEE_STATUS_OVERSTAY


def test_the_patch_tests_the_booking_reference_first() -> None:
    ops = patch_ops("res-1", {vocab.GUARANTEE_STATUS: vocab.GUARANTEE_STATUS_OVERSTAY})
    assert ops[0] == {"op": "test", "path": pointer(vocab.BOOKING_REFERENCE), "value": "res-1"}
    assert pointer(vocab.GUARANTEE_STATUS) == "/metadata/annotations/galends~1guarantee-status"


def test_a_relinked_pod_is_not_stamped_with_the_old_facts() -> None:
    w = chained_world()
    stale = w.pods()["alice/job"]
    w.kube.objects[("pods", "alice", "job")]["metadata"]["annotations"][vocab.BOOKING_REFERENCE] = (
        "res-2"
    )
    res = w.reservations()
    pool = [r.facts for r in res.values()]
    wanted = wanted_notes(res["res-1"], pool, IN_FIRST, use_group=False)
    changes = differing(stale, wanted, IN_FIRST)
    assert not run(w.keeper._patch(stale, "res-1", changes))


def test_finished_and_terminating_pods_are_left_alone() -> None:
    w = World(IN_FIRST)
    w.book(facts(1))
    done = raw_pod("done", "res-1")
    done["status"]["phase"] = "Succeeded"
    leaving = raw_pod("leaving", "res-1")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-05T09:00:00Z"
    w.add_pod(done)
    w.add_pod(leaving)
    assert run(w.keeper.once()) == 0


def test_the_timer_flips_overstay_at_the_guarantee_end_without_waiting_for_the_tick() -> None:
    w = chained_world()

    async def go() -> None:
        task = asyncio.create_task(w.keeper.run(tick_s=3600 * 24))
        for _ in range(10):
            await asyncio.sleep(0)
        assert w.notes("job")[vocab.GUARANTEE_STATUS] == vocab.GUARANTEE_STATUS_GUARANTEED
        await w.clock.advance((START + 2 * H - IN_FIRST).total_seconds() + 1)
        for _ in range(10):
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(go())
    assert w.notes("job")[vocab.GUARANTEE_STATUS] == vocab.GUARANTEE_STATUS_OVERSTAY


def test_next_end_is_the_soonest_future_guarantee_end() -> None:
    w = chained_world()
    w.book(facts(3, START, START + H / 2, owner="bob"))
    w.add_pod(raw_pod("b", "res-3", ns="bob"))
    assert next_end(w.pods().values(), w.reservations(), IN_FIRST, use_group=False) == (
        START + H / 2
    )


def test_a_pod_event_before_the_guarantee_end_keeps_the_timer_and_looks_at_that_pod() -> None:
    """The pass a pod event causes looks at that pod alone, and the timer the full pass
    set (the first chain's end) still flips the first pod at its end, not at the tick."""
    w = chained_world()
    w.book(facts(3, START, START + 3 * H, owner="bob"))

    async def go() -> None:
        task = asyncio.create_task(w.keeper.run(tick_s=3600 * 24))
        for _ in range(10):
            await asyncio.sleep(0)
        assert w.keeper.passes == 1
        w.add_pod(raw_pod("late", "res-3", ns="bob"))
        w.keeper.touch_pod("bob/late")
        for _ in range(10):
            await asyncio.sleep(0)
        assert w.keeper.passes == 2
        assert w.notes("late", "bob")[vocab.GUARANTEED_UNTIL] == format_utc(START + 3 * H)
        await w.clock.advance((START + 2 * H - IN_FIRST).total_seconds() + 1)
        for _ in range(10):
            await asyncio.sleep(0)
        assert w.notes("job")[vocab.GUARANTEE_STATUS] == vocab.GUARANTEE_STATUS_OVERSTAY
        assert w.notes("late", "bob")[vocab.GUARANTEE_STATUS] != vocab.GUARANTEE_STATUS_OVERSTAY
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(go())


def test_a_booking_moved_into_the_past_brings_guaranteed_until_back_with_it() -> None:
    """Frozen at overstay means "not moved on": an until still ahead while the status
    says overstay is a contradiction (issue 27, case 4), so it is set to the end."""
    w = World(IN_FIRST)
    w.book(facts(1, START, START + H))
    w.add_pod(raw_pod("job", "res-1"), hold_on="res-1")
    run(w.keeper.once())
    assert w.notes("job")[vocab.GUARANTEED_UNTIL] == format_utc(START + H)
    w.book(facts(1, START - 2 * H, START - H))  # the booking is moved into the past
    run(w.keeper.once())
    notes = w.notes("job")
    assert notes[vocab.GUARANTEE_STATUS] == vocab.GUARANTEE_STATUS_OVERSTAY
    assert notes[vocab.GUARANTEED_UNTIL] == format_utc(START - H)


def test_a_cancelled_booking_ends_a_future_guarantee_now() -> None:
    w = World(IN_FIRST)
    w.book(facts(1, START, START + H))
    w.add_pod(raw_pod("job", "res-1"), hold_on="res-1")
    run(w.keeper.once())
    w.book(facts(1, START, START + H, state=model.State.CANCELLED))
    run(w.keeper.once())
    notes = w.notes("job")
    assert notes[vocab.GUARANTEE_STATUS] == vocab.GUARANTEE_STATUS_OVERSTAY
    assert notes[vocab.GUARANTEED_UNTIL] == format_utc(IN_FIRST)


# Each step: advance the clock by minutes, or move / cancel / restore booking 1 or 2.
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.integers(0, 150)),
        st.tuples(st.just("move"), st.integers(1, 2), st.integers(-180, 180)),
        st.tuples(st.just("cancel"), st.integers(1, 2), st.just(0)),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(_steps)
def test_guarantee_annotations_never_contradict_each_other(steps: list[tuple[Any, ...]]) -> None:
    """Over any history of clock moves and booking edits, after every pass:
    guaranteed ⇒ until ahead of now; overstay ⇒ until not ahead of now."""
    w = chained_world()
    run(w.keeper.once())
    for step in steps:
        if step[0] == "advance":
            w.clock._now += timedelta(minutes=step[1])
        elif step[0] == "move":
            rid, by = step[1], timedelta(minutes=step[2])
            start = START + (rid - 1) * H + by
            w.book(facts(rid, start, start + H))
        else:
            w.book(facts(step[1], START, START + H, state=model.State.CANCELLED))
        run(w.keeper.once())
        notes = w.notes("job")
        until = parse_utc(notes[vocab.GUARANTEED_UNTIL])
        now = w.clock.now()
        if notes[vocab.GUARANTEE_STATUS] == vocab.GUARANTEE_STATUS_OVERSTAY:
            assert until <= now, (notes, now)
        else:
            assert until > now, (notes, now)
