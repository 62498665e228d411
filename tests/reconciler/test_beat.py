"""The timed pass of the leader's pass loops (``reconciler.base.loops.Beat``): pods that
change more often than the tick must not put it off, and an instant a pass runs past
is still owed its pass. On a manual clock: the instants are exact, nothing is timed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from reconciler.base.loops import Beat, Dirty, passes, sleep_unless
from shared.clock import ManualClock, ScaledClock, SystemClock
from tests.reconciler.builders import START


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def touched_every(
    clock: ManualClock, touch: Callable[[], None], step_s: float, times: int
) -> None:
    """Advance the clock ``times`` steps of ``step_s``, touching before each."""
    for _ in range(times):
        touch()
        await settle()
        await clock.advance(step_s)
        await settle()


def test_touches_more_often_than_the_tick_do_not_put_off_the_timed_pass() -> None:
    async def scenario() -> None:
        clock = ManualClock(START)
        dirty = Dirty()
        dirty.take()
        seen: list[set[str] | None] = []

        async def once(keys: set[str] | None) -> None:
            seen.append(keys)

        task = asyncio.create_task(passes(lambda: True, dirty, once, clock, 10.0))
        try:
            await settle()
            seen.clear()
            # A pod changes every second for 25 s: the tick of 10 s still comes twice.
            await touched_every(clock, lambda: dirty.touch("ns/p"), 1.0, 25)
            assert seen.count(None) == 2
            assert seen.count({"ns/p"}) >= 20
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


def test_the_tick_counts_from_the_last_timed_pass() -> None:
    async def scenario() -> None:
        clock = ManualClock(START)
        beat = Beat(clock, 10.0)
        wake = asyncio.Event()
        wake.set()
        await clock.advance(6.0)
        assert await beat.wait(wake) is False  # touched, the tick 4 s away
        wake.clear()
        waiting = asyncio.create_task(beat.wait(wake))
        await settle()
        await clock.advance(4.0)
        assert await waiting is True
        assert beat.next_tick == START + timedelta(seconds=20)

    asyncio.run(scenario())


def test_an_instant_the_pass_ran_past_is_due_at_once() -> None:
    async def scenario() -> None:
        clock = ManualClock(START)
        beat = Beat(clock, 3600.0)
        wake = asyncio.Event()
        wake.set()  # touched during the pass as well
        opens = clock.now() + timedelta(seconds=1)
        await clock.advance(2.0)  # the pass ran past the instant named before it
        assert await beat.wait(wake, opens) is True
        assert clock.pending_sleepers() == 0

    asyncio.run(scenario())


def test_a_touch_during_the_pass_costs_no_wait() -> None:
    async def scenario() -> None:
        clock = ManualClock(START)
        beat = Beat(clock, 60.0)
        wake = asyncio.Event()
        wake.set()
        waiting = asyncio.ensure_future(beat.wait(wake, clock.now() + timedelta(seconds=5)))
        await asyncio.sleep(0)
        assert waiting.done()
        assert waiting.result() is False
        assert clock.pending_sleepers() == 0

    asyncio.run(scenario())


def test_an_untouched_loop_waits_for_the_sooner_of_the_tick_and_the_instant() -> None:
    async def scenario() -> None:
        clock = ManualClock(START)
        beat = Beat(clock, 60.0)
        wake = asyncio.Event()
        waiting = asyncio.create_task(beat.wait(wake, clock.now() + timedelta(seconds=5)))
        await settle()
        await clock.advance(4.0)
        assert not waiting.done()
        await clock.advance(1.0)
        assert await waiting is True
        woken = asyncio.create_task(beat.wait(wake))
        await settle()
        wake.set()
        assert await woken is False

    asyncio.run(scenario())


def test_sleep_unless_on_a_clock_the_loop_keeps_ends_on_the_wake_or_the_time() -> None:
    """The system and scaled clocks are waited on with one timer: a wake ends the wait
    at once (False) and stays set; an unset wake lets the time pass (True), scaled by
    the clock's factor; a cancelled waiter is cancelled, not timed out."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        loop.call_later(0.01, wake.set)
        started = loop.time()
        assert await sleep_unless(SystemClock(), wake, 30.0) is False
        assert loop.time() - started < 5.0
        assert wake.is_set()
        assert await sleep_unless(SystemClock(), wake, 30.0) is False  # set already

        idle = asyncio.Event()
        started = loop.time()
        assert await sleep_unless(ScaledClock(factor=100.0), idle, 2.0) is True
        assert 0.015 <= loop.time() - started < 1.5  # 2 s of a 100× clock: 20 ms
        assert await sleep_unless(SystemClock(), idle, -1.0) is True

        waiter = asyncio.ensure_future(sleep_unless(SystemClock(), idle, 30.0))
        await settle()
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert waiter.cancelled()

    asyncio.run(scenario())


def test_sleep_unless_on_a_manual_clock_waits_for_its_time() -> None:
    async def scenario() -> None:
        clock, wake = ManualClock(START), asyncio.Event()
        waiter = asyncio.ensure_future(sleep_unless(clock, wake, 10.0))
        await settle()
        await clock.advance(9.0)
        await settle()
        assert not waiter.done()
        await clock.advance(1.0)
        await settle()
        assert waiter.result() is True

        waiter = asyncio.ensure_future(sleep_unless(clock, wake, 10.0))
        await settle()
        wake.set()
        await settle()
        assert waiter.result() is False

    asyncio.run(scenario())
