"""Time in the emulated app: UTC instants, site-local wall clock, scenario offsets.

The emulator keeps reservation bounds as aware UTC instants and derives the local
naive fields (``start_dt``, ``date`` …) through the site's IANA zone on output — the
real app does the reverse, which differs only for wall-clock times inside a DST gap
or fold (a simplification named in docs/developer/reservation-app.md). Instants are second
precision.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from shared.clock import format_utc

_OFFSET = re.compile(r"^([+-])(\d+)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def whole_second(instant: datetime) -> datetime:
    return instant.astimezone(UTC).replace(microsecond=0)


def utc_text(instant: datetime | None) -> str | None:
    """``YYYY-MM-DDTHH:MM:SSZ`` or None."""
    return None if instant is None else format_utc(instant)


def local(instant: datetime, zone: ZoneInfo) -> datetime:
    """The site wall-clock reading of ``instant`` (naive)."""
    return instant.astimezone(zone).replace(tzinfo=None)


def local_text(instant: datetime | None, zone: ZoneInfo) -> str | None:
    """``YYYY-MM-DDTHH:MM:SS`` wall clock, no suffix, or None."""
    return None if instant is None else local(instant, zone).isoformat(timespec="seconds")


def local_date(instant: datetime, zone: ZoneInfo) -> date:
    return local(instant, zone).date()


def day_start(day: date, zone: ZoneInfo) -> datetime:
    """The UTC instant of local midnight starting ``day``."""
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)


def midnights_between(start: datetime, end: datetime, zone: ZoneInfo) -> list[datetime]:
    """Local midnights strictly inside ``(start, end)``, as UTC instants."""
    result = []
    day = local_date(start, zone) + timedelta(days=1)
    while (instant := day_start(day, zone)) < end:
        if instant > start:
            result.append(instant)
        day += timedelta(days=1)
    return result


def parse_when(text: object, now: datetime) -> datetime:
    """An offset from ``now`` (``+90s``, ``-10m``, ``+2h``, ``+1d``) or an ISO-8601 UTC
    instant (``Z`` or an offset required). Raises ``ValueError`` otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"expected an offset like '+90s' or an ISO-8601 instant, got {text!r}")
    match = _OFFSET.match(text.strip())
    if match:
        sign, amount, unit = match.groups()
        seconds = int(amount) * _UNIT_SECONDS[unit] * (-1 if sign == "-" else 1)
        return whole_second(now + timedelta(seconds=seconds))
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not an offset like '+90s' nor an ISO-8601 instant: {text!r}") from None
    if value.tzinfo is None:
        raise ValueError(f"instant without a zone (add Z): {text!r}")
    return whole_second(value)
