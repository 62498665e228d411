"""Clocks: where every component gets "now" and waits, and how long work may take.

All instants are timezone-aware UTC ``datetime`` values. Components take a ``Clock``
so tests run on virtual time (``ManualClock``) and the sandbox can run scenarios
faster than real time (``ScaledClock``). Deadlines of work (how long one ledger write
may take) are measured on a ``MonotonicClock`` instead, which the wall clock's jumps
cannot move; components take it too, so a test can run out a deadline at will.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """A source of the current instant and a way to wait on it."""

    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time (negative or zero: yield once)."""
        ...


class MonotonicClock(Protocol):
    """Seconds that never go back: what deadlines of work are measured on (never an
    instant of the domain, which is ``Clock.now``)."""

    def monotonic(self) -> float:
        """Seconds since an arbitrary start; only differences mean anything."""
        ...


class SystemMonotonic:
    """The operating system's monotonic clock."""

    def monotonic(self) -> float:
        return time.monotonic()


class SystemClock:
    """Wall-clock time."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def wall_seconds(self, seconds: float) -> float:
        """The event loop's seconds in ``seconds`` of this clock's time (the same)."""
        return max(0.0, seconds)


class ScaledClock:
    """Time that runs ``factor`` times faster than the wall clock, from ``epoch``.

    ``now()`` is ``epoch + factor × (wall seconds since creation)``; ``sleep(s)`` waits
    ``s / factor`` wall seconds. With ``factor=1`` and no epoch it equals the system
    clock. Several processes built with the same epoch, factor and ``started_at`` (a
    monotonic-free wall instant) agree on the time.
    """

    def __init__(
        self,
        factor: float = 1.0,
        epoch: datetime | None = None,
        started_at: float | None = None,
    ) -> None:
        if factor <= 0:
            raise ValueError(f"clock factor must be > 0, got {factor}")
        self.factor = factor
        self.started_at = time.time() if started_at is None else started_at
        self.epoch = epoch if epoch is not None else datetime.fromtimestamp(self.started_at, UTC)
        if self.epoch.tzinfo is None:
            raise ValueError("clock epoch must be timezone-aware")

    def now(self) -> datetime:
        elapsed = time.time() - self.started_at
        return self.epoch + timedelta(seconds=elapsed * self.factor)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(self.wall_seconds(seconds))

    def wall_seconds(self, seconds: float) -> float:
        """The event loop's seconds in ``seconds`` of this clock's time."""
        return max(0.0, seconds) / self.factor


class ManualClock:
    """Virtual time that moves only when a test calls ``advance``.

    ``sleep`` suspends until the clock has been advanced past the sleeper's deadline,
    so a test can assert exactly which instant an action happened at.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start if start is not None else datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("clock start must be timezone-aware")
        self._sleepers: list[tuple[datetime, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> datetime:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        deadline = self._now + timedelta(seconds=seconds)
        heapq.heappush(self._sleepers, (deadline, next(self._seq), future))
        await future

    def pending_sleepers(self) -> int:
        """How many sleeps are waiting (cancelled ones excluded)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking every sleeper whose deadline passes, in order.

        Each woken task gets a chance to run (and to sleep again) before time moves on
        to the next deadline, so chains of sleeps fire at their exact instants.
        """
        target = self._now + timedelta(seconds=seconds)
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            if not future.done():
                future.set_result(None)
                for _ in range(5):
                    await asyncio.sleep(0)
        self._now = target
        await asyncio.sleep(0)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    """A UTC instant, for tests and scenarios."""
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def format_utc(instant: datetime) -> str:
    """Machine-facing form of an instant: ``YYYY-MM-DDTHH:MM:SSZ`` (DESIGN §6)."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_utc(text: str) -> datetime:
    """Parse an ISO-8601 instant with an explicit zone (``Z`` or an offset) into UTC.

    Raises ``ValueError`` for a naive or malformed value: an instant without a zone is
    ambiguous, and we never guess.
    """
    value = datetime.fromisoformat(text.strip().replace("z", "Z").replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"instant without a timezone: {text!r}")
    return value.astimezone(UTC)
