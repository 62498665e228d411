"""The machinery of the leader's pass loops: waiting for the caches, for a touch or the
timed pass (``Beat``), and what a loop looks at next (``Dirty``).

A leader loop driven by cache events runs a pass over what was touched whenever it is
woken, and a timed full pass on its tick and at instants of its own
(docs/developer/architecture.md, "When the timed pass comes").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from shared.clock import Clock

#: Seconds a pass woken by a change waits for more changes to share it, in a loop whose
#: work on a change is a walk over the booking's pods and whose result no other loop
#: reads (the usage keeper): pods created one after another on a booking each woke a
#: walk of their own. Set by the process (tests run the loop without it).
GATHER_S = 0.25
#: How long after an instant a loop names (a window start, a guarantee end) its timed
#: pass runs, so that the pass finds the instant reached.
JUST_AFTER = timedelta(milliseconds=1)


#: How often a leader loop looks whether the caches it reads have synced.
READY_POLL_S = 0.05


async def until_ready(ready: Callable[[], bool]) -> None:
    """Return once ``ready()`` holds (the caches a loop reads have done their LIST)."""
    while not ready():  # noqa: ASYNC110 - polls the caches' sync flags
        await asyncio.sleep(READY_POLL_S)


async def wait_either(first: Awaitable[object], second: Awaitable[object]) -> bool:
    """Wait for whichever finishes first (the other is cancelled); True if ``first``."""
    a, b = asyncio.ensure_future(first), asyncio.ensure_future(second)
    try:
        done, _ = await asyncio.wait({a, b}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (a, b):
            task.cancel()
        await asyncio.gather(a, b, return_exceptions=True)
    return a in done


async def sleep_unless(clock: Clock, wake: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` of ``clock``'s time unless ``wake`` is set first; True when the
    time passed (``wake`` is left as it is).

    A clock whose time the event loop keeps (``wall_seconds``: the system and scaled
    clocks) is waited on with one timer around the event: every leader loop waits like
    this after each pass, and two tasks raced and cancelled (``wait_either``) cost
    about four times the CPU per wake-up. Any other clock (a test's manual one) is
    waited on through its own ``sleep``."""
    to_wall: Callable[[float], float] | None = getattr(clock, "wall_seconds", None)
    if to_wall is None:
        return await wait_either(clock.sleep(seconds), wake.wait())
    try:
        async with asyncio.timeout(to_wall(seconds)):
            await wake.wait()
    except TimeoutError:
        return True
    return False


class Beat:
    """When a pass loop's timed pass is due: ``tick_s`` after the last timed pass, or
    sooner at an instant the loop names (a window start, a guarantee end).

    Between timed passes the loop runs a pass over what was touched whenever it is
    woken. The tick counts from the last timed pass, not from the last pass of any
    kind: pods that change more often than the tick would otherwise put the timed pass
    off for ever. An instant is named before the pass that precedes the wait, so a pass
    that runs past it still owes the timed pass (a loop looking only for instants still
    ahead would skip it)."""

    def __init__(self, clock: Clock, tick_s: float) -> None:
        self._clock = clock
        self._tick = timedelta(seconds=tick_s)
        self.next_tick = clock.now() + self._tick

    async def wait(self, wake: asyncio.Event, at: datetime | None = None) -> bool:
        """Until ``wake`` is set or the timed pass is due (the tick, or ``at`` when
        sooner); True when it is due, and the tick counts again from now. Returns
        without waiting when either holds already: touches that came during the pass
        cost no wait."""
        due = self.next_tick if at is None else min(self.next_tick, at)
        now = self._clock.now()
        timed = now >= due
        if not timed and not wake.is_set():
            timed = await sleep_unless(self._clock, wake, (due - now).total_seconds())
        if timed:
            self.next_tick = self._clock.now() + self._tick
        return timed


class Dirty:
    """What a leader pass driven by cache events looks at next: the keys (pods) touched
    since its last pass, or everything. Touches coalesce — however many arrive before
    the pass runs, one pass drains them all — and a pass over the touched keys costs
    what changed, not every pod in the cache (a window opening for 500 pods is 500 pod
    events: a full pass for each was quadratic)."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        #: The next pass looks at everything (at start, on the tick, a reservation change).
        self.everything = True
        self.wake = asyncio.Event()

    def touch(self, key: str | None = None) -> None:
        """Look at ``key`` soon (None: at everything)."""
        if key is None:
            self.everything = True
        else:
            self.keys.add(key)
        self.wake.set()

    def take(self) -> set[str] | None:
        """The keys the next pass looks at (None: all), collecting afresh from now."""
        keys = None if self.everything else self.keys
        self.keys = set()
        self.everything = False
        self.wake.clear()
        return keys


async def passes(
    ready: Callable[[], bool],
    dirty: Dirty,
    once: Callable[[set[str] | None], Awaitable[object]],
    clock: Clock,
    tick_s: float,
) -> None:
    """Run ``once`` over everything as soon as the caches are ready, then over the keys
    touched whenever ``dirty`` wakes, and over everything every ``tick_s`` (the loop of
    a leader pass driven by cache events)."""
    await until_ready(ready)
    beat = Beat(clock, tick_s)
    while True:
        await once(dirty.take())
        if await beat.wait(dirty.wake):
            dirty.touch()
