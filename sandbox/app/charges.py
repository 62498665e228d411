"""SU arithmetic of the emulated app: prices, budget windows, the retained charge.

- price = GPUs × hours × the class's ``su_rate_per_hour`` (no discount schedules);
- budget windows follow the group's ``su_anchor_mode`` on the site's local calendar:
  ``weekly`` (Monday 00:00), ``monthly``, ``quarterly``; ``since_creation`` and ``open``
  are one window from the group's creation with no end;
- a reservation's charge falls in the window containing its start;
- the retained charge on a cancel follows §2.9 (used time in full, a penalty for
  unused time in the next 24 h beyond an exemption, a 2-hour grace for leases, no
  penalty for ``superseded``). All functions are pure.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from sandbox.app.state import GpuClass, Group, Reservation
from sandbox.app.timeutil import day_start, local_date
from shared.appclient.models import CancelReason, ReservationKind

OPEN_ENDED_MODES = frozenset({"since_creation", "open"})
_LEASE_GRACE = timedelta(hours=2)
_PENALTY_HORIZON = timedelta(hours=24)
_MAX_EXEMPTION_HOURS = 8.0


def _hours(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds() / 3600)


def price(klass: GpuClass, gpu_count: int, start: datetime, end: datetime) -> float:
    """SU cost of ``gpu_count`` GPUs of ``klass`` over ``[start, end)``."""
    return round(gpu_count * _hours(start, end) * klass.su_rate_per_hour, 4)


def _first_of_next_month(day: date) -> date:
    return date(day.year + day.month // 12, day.month % 12 + 1, 1)


def budget_window(
    group: Group, instant: datetime, zone: ZoneInfo
) -> tuple[datetime, datetime | None]:
    """The budget window containing ``instant``: ``[start, end)`` in UTC, end None if open."""
    mode = group.su_anchor_mode
    if mode in OPEN_ENDED_MODES:
        return group.created_at, None
    day = local_date(instant, zone)
    if mode == "monthly":
        first = day.replace(day=1)
        return day_start(first, zone), day_start(_first_of_next_month(first), zone)
    if mode == "quarterly":
        first = date(day.year, 3 * ((day.month - 1) // 3) + 1, 1)
        after = _first_of_next_month(_first_of_next_month(_first_of_next_month(first)))
        return day_start(first, zone), day_start(after, zone)
    monday = day - timedelta(days=day.weekday())
    return day_start(monday, zone), day_start(monday + timedelta(days=7), zone)


def in_window(row: Reservation, window: tuple[datetime, datetime | None]) -> bool:
    start, end = window
    return row.start >= start and (end is None or row.start < end)


def retained_charge(row: Reservation, klass: GpuClass, now: datetime, reason: str | None) -> float:
    """What a cancel at ``now`` leaves charged (§2.9)."""
    used_end = min(now, row.end)
    used = price(klass, row.gpu_count, row.start, used_end) if used_end > row.start else 0.0
    if reason == CancelReason.SUPERSEDED:
        return used
    pen_start = max(row.start, now)
    if row.kind == ReservationKind.ON_DEMAND:
        pen_start = max(pen_start, row.start + _LEASE_GRACE)
    pen_end = min(row.end, now + _PENALTY_HORIZON)
    pen = _hours(pen_start, pen_end)
    exemption = min((_hours(row.start, used_end) + pen) / 2, _MAX_EXEMPTION_HOURS)
    if pen <= exemption:
        return used
    penalty = price(klass, row.gpu_count, pen_start, pen_end) * (pen - exemption) / pen
    return round(used + penalty, 4)
