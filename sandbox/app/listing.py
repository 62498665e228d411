"""``GET /api/reservations``: query parsing, filters, ordering and paging (§2.1, §1.7).

Filters first, then the best-effort exclusion, then the ``(start_dt, id)`` sort, then
the ``offset``/``limit`` slice. Day filters are window overlaps on the site's local
calendar; a zero-length stub at instant T matches the day containing T. A bad
parameter is a 422 with FastAPI's error array. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sandbox.app.errors import AppError
from sandbox.app.state import AppState, Reservation
from sandbox.app.timeutil import day_start
from shared.appclient.models import ReservationKind, StatusFilter
from shared.appclient.reading import parse_instant

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
_RECENT = timedelta(hours=24)


@dataclass(frozen=True)
class ListQuery:
    status: StatusFilter = StatusFilter.ACTIVE
    date_start: date | None = None
    date_end: date | None = None
    gpu_class_id: int | None = None
    gpu_class_name: str | None = None
    user_id: int | None = None
    username: str | None = None
    group_id: int | None = None
    include_consumed_cancellations: bool = False
    include_best_effort: bool = False
    created_after: datetime | None = None
    created_before: datetime | None = None
    limit: int = 200
    offset: int = 0


def _bad(name: str, message: str) -> AppError:
    return AppError(422, [{"loc": ["query", name], "msg": message, "type": "value_error"}])


def _convert(name: str, raw: str, kind: str) -> Any:
    try:
        if kind == "int":
            return int(raw)
        if kind == "date":
            return date.fromisoformat(raw)
        if kind == "status":
            return StatusFilter(raw)
    except ValueError:
        raise _bad(name, f"invalid {kind}: {raw!r}") from None
    if kind == "bool":
        if raw.lower() in _TRUE | _FALSE:
            return raw.lower() in _TRUE
        raise _bad(name, f"invalid boolean: {raw!r}")
    if kind == "datetime":
        value = parse_instant(raw)
        if value is None:
            raise _bad(name, f"invalid datetime: {raw!r}")
        return value
    return raw


_KINDS = {
    "status": "status",
    "date_start": "date",
    "date_end": "date",
    "gpu_class_id": "int",
    "gpu_class_name": "str",
    "user_id": "int",
    "username": "str",
    "group_id": "int",
    "include_consumed_cancellations": "bool",
    "include_best_effort": "bool",
    "created_after": "datetime",
    "created_before": "datetime",
    "limit": "int",
    "offset": "int",
}


def parse_query(params: Mapping[str, str]) -> ListQuery:
    """The list query; unknown parameters are ignored (``include_teammates`` …)."""
    values = {
        name: _convert(name, params[name], kind) for name, kind in _KINDS.items() if name in params
    }
    query = ListQuery(**values)
    if not 1 <= query.limit <= 1000:
        raise _bad("limit", "must be between 1 and 1000")
    if query.offset < 0:
        raise _bad("offset", "must be >= 0")
    return query


def _overlaps_from(row: Reservation, start: datetime) -> bool:
    return row.end > start or (row.start == row.end and row.start >= start)


def _status_ok(row: Reservation, query: ListQuery, now: datetime) -> bool:
    if query.status is StatusFilter.ALL:
        return True
    if query.status is StatusFilter.CANCELLED:
        return not row.is_active
    if query.status is StatusFilter.RECENT:
        return (row.is_active and row.end > now) or (row.end > now - _RECENT and row.start <= now)
    consumed = query.include_consumed_cancellations and (
        (row.cancelled_at is not None and row.start < row.cancelled_at) or row.su_cost_user > 0
    )
    return row.is_active or consumed


def _day_ok(row: Reservation, query: ListQuery, zone: ZoneInfo) -> bool:
    if query.date_start is not None and not _overlaps_from(row, day_start(query.date_start, zone)):
        return False
    if query.date_end is None:
        return True
    return row.start < day_start(query.date_end + timedelta(days=1), zone)


def _created_ok(row: Reservation, query: ListQuery) -> bool:
    after, before = query.created_after, query.created_before
    return (after is None or row.created_at >= after) and (
        before is None or row.created_at <= before
    )


def _identity_ok(state: AppState, row: Reservation, query: ListQuery) -> bool:
    exact = (
        (query.gpu_class_id, row.gpu_class_id),
        (query.user_id, row.user_id),
        (query.group_id, row.group_id),
        (query.gpu_class_name, state.classes[row.gpu_class_id].name),
    )
    if any(wanted is not None and wanted != actual for wanted, actual in exact):
        return False
    if query.username is None:
        return True
    user = state.users.get(row.user_id) if row.user_id is not None else None
    return user is not None and user.username == query.username


def matches(state: AppState, query: ListQuery, now: datetime, row: Reservation) -> bool:
    """Whether ``row`` passes every filter of ``query``."""
    if row.kind == ReservationKind.BEST_EFFORT and not query.include_best_effort:
        return False
    return (
        _status_ok(row, query, now)
        and _day_ok(row, query, state.zone)
        and _created_ok(row, query)
        and _identity_ok(state, row, query)
    )


def select(state: AppState, query: ListQuery, now: datetime) -> list[Reservation]:
    """The page of rows the query asks for."""
    rows: Iterable[Reservation] = (r for r in state.reservations.values() if r.id > 0)
    kept = [r for r in rows if matches(state, query, now, r)]
    kept.sort(key=lambda r: (r.start, r.id))
    return kept[query.offset : query.offset + query.limit]
