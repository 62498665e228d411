"""Physical capacity over time: how many GPUs of a class are booked at each instant.

Only active bookings and leases hold capacity (best-effort stubs never do). A span
fits when, at every instant of ``[start, end)``, booked GPUs plus the ask stay within
the capacity offered that local day (date-span overrides included). Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from sandbox.app.state import GpuClass, Reservation
from sandbox.app.timeutil import local_date, midnights_between


@dataclass(frozen=True)
class Squeeze:
    """The tightest instant of a span: when, how many GPUs were booked, and offered."""

    at: datetime
    booked: int
    offered: int


def booked_at(rows: Iterable[Reservation], instant: datetime) -> int:
    """GPUs held at ``instant`` by ``rows`` (half-open windows)."""
    return sum(r.gpu_count for r in rows if r.start <= instant < r.end)


def holders(
    rows: Iterable[Reservation], class_id: int, start: datetime, end: datetime
) -> list[Reservation]:
    """Rows of the class holding capacity somewhere in ``[start, end)``."""
    return [
        r
        for r in rows
        if r.gpu_class_id == class_id and r.holds_capacity and r.start < end and r.end > start
    ]


def first_overflow(
    rows: Iterable[Reservation],
    klass: GpuClass,
    start: datetime,
    end: datetime,
    ask: int,
    zone: ZoneInfo,
) -> Squeeze | None:
    """The first instant in ``[start, end)`` where ``ask`` more GPUs would not fit."""
    busy = holders(rows, klass.id, start, end)
    points = {start, *midnights_between(start, end, zone)}
    points.update(t for r in busy for t in (r.start, r.end) if start < t < end)
    for instant in sorted(points):
        booked = booked_at(busy, instant)
        offered = klass.capacity_on(local_date(instant, zone))
        if booked + ask > offered:
            return Squeeze(instant, booked, offered)
    return None


def peak(rows: Iterable[Reservation], start: datetime, end: datetime) -> int:
    """Largest number of GPUs ``rows`` hold at once within ``[start, end)``."""
    window = [r for r in rows if r.start < end and r.end > start]
    points = {start} | {r.start for r in window if start < r.start < end}
    return max((booked_at(window, t) for t in points), default=0)
