"""``kubectl gpures usage``: booked versus used GPU-hours per owner, group or class
(pure: reservations and an instant in, a table or JSON out).

A reservation counts when its accounted window (``shared.policy.usage.window_of``)
overlaps the period ``[now − since, now)``; only the part of it inside the period is
counted: booked GPU-seconds exactly, used ones from the record's hours (an hour cut by
the period's start counts pro rata). Upcoming reservations and best-effort stubs (no
window) count nothing.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shared.clock import format_utc
from shared.model import GPUReservation, Kind
from shared.policy import usage, usagerecord
from shared.policy.usage import HOUR, Window

#: ``--by`` choices.
BY = ("owner", "group", "class")
_SINCE = re.compile(r"(\d{1,5})([mhdw])")
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: The longest ``--since`` (the retention is at most a year).
MAX_SINCE = timedelta(days=366)


def parse_since(text: str) -> timedelta:
    """``30m``, ``12h``, ``7d``, ``2w``; ``ValueError`` for anything else (or > 366 d)."""
    found = _SINCE.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"not a period: {text!r} (use e.g. 30m, 12h, 7d, 2w)")
    span = timedelta(seconds=int(found.group(1)) * _UNITS[found.group(2)])
    if span <= timedelta(0) or span > MAX_SINCE:
        raise ValueError(f"period out of range: {text!r} (1m to 366d)")
    return span


@dataclass(frozen=True)
class Slice:
    """One reservation's part of the period."""

    key: str
    kind: str
    gpu_class: str
    group: str
    booked: int
    used: int
    no_show: bool
    to_first_use: int | None
    #: (hour start, booked GPU-seconds, used GPU-seconds) of each window hour in the period.
    hours: tuple[tuple[datetime, int, int], ...] = ()


def key_of(res: GPUReservation, by: str) -> str:
    facts = res.facts
    if by == "group":
        return facts.group or "-"
    if by == "class":
        return facts.gpu_class
    return facts.owner


def slice_of(res: GPUReservation, by: str, start: datetime, now: datetime) -> Slice | None:
    """``res``'s part of ``[start, now)``; None when it has none."""
    if res.facts.kind is Kind.BEST_EFFORT:
        return None
    window = usage.window_of(res)
    lo, hi = max(window.start, start), min(window.stop, now)
    if hi <= lo:
        return None
    try:
        record = usagerecord.record_from_status(res.status_extra)
    except ValueError:
        record = usage.Record()
    by_hour = usage.used_by_hour(record, window, now)
    hours = []
    used = 0
    booked = 0
    for index in range(max(len(by_hour), _hours_in(window))):
        h0 = window.start + timedelta(seconds=index * HOUR)
        h1 = min(h0 + timedelta(seconds=HOUR), window.stop)
        part = usage.seconds(max(h0, lo), min(h1, hi))
        if part <= 0:
            continue
        length = usage.seconds(h0, min(h1, now)) or 1
        hour_used = by_hour[index] if index < len(by_hour) else 0
        in_period = hour_used if part >= length else hour_used * part // length
        hour_booked = window.gpus * part
        used += in_period
        booked += hour_booked
        hours.append((h0, hour_booked, in_period))
    fig = usage.figures(record, window, now)
    first = fig.to_first_use if start <= window.start else None
    return Slice(
        key=key_of(res, by),
        kind=res.facts.kind.value,
        gpu_class=res.facts.gpu_class,
        group=res.facts.group or "-",
        booked=booked,
        used=min(used, booked),
        no_show=usage.no_show(res),
        to_first_use=first,
        hours=tuple(hours),
    )


def _hours_in(window: Window) -> int:
    return -(-usage.seconds(window.start, window.stop) // HOUR)


@dataclass
class Row:
    """Figures of one owner / group / class and kind."""

    key: str
    kind: str
    bookings: int = 0
    booked: int = 0
    used: int = 0
    no_shows: int = 0
    firsts: list[int] = field(default_factory=list)

    def add(self, s: Slice) -> None:
        self.bookings += 1
        self.booked += s.booked
        self.used += s.used
        self.no_shows += int(s.no_show)
        if s.to_first_use is not None:
            self.firsts.append(s.to_first_use)

    @property
    def idle(self) -> int:
        return max(0, self.booked - self.used)

    @property
    def utilisation(self) -> float | None:
        return None if self.booked == 0 else 100.0 * self.used / self.booked

    @property
    def first_use(self) -> float | None:
        """Median seconds from window start to first use, over bookings used at all."""
        return statistics.median(self.firsts) if self.firsts else None

    def as_json(self) -> dict[str, Any]:
        util = self.utilisation
        first = self.first_use
        return {
            "key": self.key,
            "kind": self.kind,
            "bookings": self.bookings,
            "bookedGpuHours": round(self.booked / HOUR, 4),
            "usedGpuHours": round(self.used / HOUR, 4),
            "idleGpuHours": round(self.idle / HOUR, 4),
            "utilisationPercent": None if util is None else round(util, 2),
            "medianSecondsToFirstUse": None if first is None else round(first),
            "noShows": self.no_shows,
        }


@dataclass
class Report:
    since: datetime
    now: datetime
    by: str
    rows: list[Row]
    total: Row
    slices: list[Slice]


def summarise(
    reservations: Iterable[GPUReservation], now: datetime, since: timedelta, by: str
) -> Report:
    """The report of ``reservations`` over ``[now − since, now)``, grouped ``by``."""
    start = now - since
    rows: dict[tuple[str, str], Row] = {}
    total = Row("TOTAL", "")
    slices = []
    for res in reservations:
        found = slice_of(res, by, start, now)
        if found is None:
            continue
        slices.append(found)
        rows.setdefault((found.key, found.kind), Row(found.key, found.kind)).add(found)
        total.add(found)
    ordered = [rows[k] for k in sorted(rows)]
    return Report(start, now, by, ordered, total, slices)


def _hours(seconds: int) -> str:
    return f"{seconds / HOUR:.1f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes = int(seconds // 60)
    if minutes < 120:
        return f"{minutes}m"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def render(report: Report) -> str:
    """The table: one line per row, then the totals."""
    head: tuple[str, ...] = (
        report.by.upper(),
        "KIND",
        "BOOKINGS",
        "BOOKED-GPU-H",
        "USED-GPU-H",
        "IDLE-GPU-H",
    )
    head += ("UTIL%", "FIRST-USE", "NO-SHOWS")
    lines: list[tuple[str, ...]] = [head]
    for row in [*report.rows, report.total]:
        util = row.utilisation
        lines.append(
            (
                row.key,
                row.kind or "",
                str(row.bookings),
                _hours(row.booked),
                _hours(row.used),
                _hours(row.idle),
                "-" if util is None else f"{util:.1f}",
                _duration(row.first_use),
                str(row.no_shows),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
    period = f"{format_utc(report.since)} to {format_utc(report.now)}"
    if not report.rows:
        return f"No reservation had GPUs booked from {period}."
    return f"Booked versus used GPU-hours, {period}:\n" + "\n".join(out)


def to_json(report: Report) -> str:
    return json.dumps(
        {
            "since": format_utc(report.since),
            "until": format_utc(report.now),
            "by": report.by,
            "rows": [r.as_json() for r in report.rows],
            "totals": report.total.as_json(),
        },
        indent=2,
    )
