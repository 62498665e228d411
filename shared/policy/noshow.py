"""No-show detection (R14): a booking nobody uses is given back to the app.

Terms
-----
- *candidate*: a GPUReservation of kind ``booking``, active, with an owner, whose
  window has not ended and that carries no no-show record yet. Leases and
  best-effort stubs are never candidates (their teardown is the lease path's).
- *claimed*: a live pod (not finished, not terminating) carries the reservation's
  booking reference — or carries the reference of a booking whose chained guarantee
  (``shared.policy.windows.chain``) runs through it. A claimed booking is never
  declared and its deadline is dropped.
- *deadline*: when an unclaimed candidate is declared. Before its window opens it is
  ``start + NOSHOW_TIMEOUT``; a candidate first seen with its window already open
  (the reconciler started or took over mid-window) or vacated mid-window (it was
  claimed and no longer is) gets ``now + NOSHOW_GRACE``. Deadlines live in the
  leader's memory (``Tracker``): a new leader re-arms them, with the grace.
- *declared*: ``now >= deadline``. The declaration is written durably into the
  GPUReservation status (``Record``) before the cancel is sent, so a restarted or
  newly elected leader finishes a pending cancel and never repeats a landed one.

Pure: no I/O; "now" is a parameter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from shared import fields
from shared.clock import format_utc
from shared.model import GPUReservation, Kind, ReservationFacts, State
from shared.policy.windows import chain, kin, kin_key

#: Key of the no-show record in a GPUReservation's status.
STATUS_KEY = "noShow"


@dataclass(frozen=True)
class Rules:
    """NOSHOW_TIMEOUT_MINUTES, NOSHOW_GRACE_MINUTES and the group rule of chaining."""

    timeout: timedelta
    grace: timedelta
    use_group: bool = False


@dataclass(frozen=True)
class Record:
    """The durable no-show record (``status.noShow``)."""

    declared_at: datetime
    deadline: datetime
    cancelled_at: datetime | None = None
    attempts: int = 0
    last_error: str | None = None

    @property
    def pending(self) -> bool:
        """Declared, and the cancel has not landed yet."""
        return self.cancelled_at is None


def record_to_status(record: Record) -> dict[str, Any]:
    """The record as written under ``status.noShow``."""
    out: dict[str, Any] = {
        "declaredAt": format_utc(record.declared_at),
        "deadline": format_utc(record.deadline),
        "attempts": record.attempts,
    }
    if record.cancelled_at is not None:
        out["cancelledAt"] = format_utc(record.cancelled_at)
    if record.last_error is not None:
        out["lastError"] = record.last_error[:200]
    return out


def record_of(res: GPUReservation) -> Record | None:
    """The reservation's no-show record; None when absent.

    Raises ``ValueError`` naming the bad field when the record is malformed (the
    caller logs it and treats the reservation as undeclared, so nothing is lost: a
    still-unused booking is declared again, a used one is left alone).
    """
    raw = res.status_extra.get(STATUS_KEY)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(f"status.{STATUS_KEY}: not an object")
    attempts = raw.get("attempts", 0)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        raise ValueError(f"status.{STATUS_KEY}.attempts: not a whole number >= 0")
    error = raw.get("lastError")
    return Record(
        declared_at=_instant(raw, "declaredAt"),
        deadline=_instant(raw, "deadline"),
        cancelled_at=_instant(raw, "cancelledAt") if raw.get("cancelledAt") is not None else None,
        attempts=attempts,
        last_error=str(error) if error is not None else None,
    )


def _instant(raw: Mapping[str, Any], key: str) -> datetime:
    return fields.instant(raw.get(key), f"status.{STATUS_KEY}.{key}")


def declared(reservations: Iterable[GPUReservation]) -> frozenset[int]:
    """Ids of the reservations carrying a no-show record (pending or landed).

    From its declaration on, a no-show is out of matching and guarantee chains (R14):
    a new pod is not admitted under a booking about to be cancelled. A malformed
    record counts as none (``record_of`` reports it elsewhere).
    """
    found = set()
    for res in reservations:
        try:
            if record_of(res) is not None:
                found.add(res.facts.id)
        except ValueError:
            continue
    return frozenset(found)


def with_record(res: GPUReservation, record: Record | None) -> GPUReservation:
    """``res`` with its no-show record set (or removed with None); ledger untouched."""
    extra = {k: v for k, v in res.status_extra.items() if k != STATUS_KEY}
    if record is not None:
        extra[STATUS_KEY] = record_to_status(record)
    return replace(res, status_extra=extra)


def is_booking_in_play(facts: ReservationFacts, now: datetime) -> bool:
    """An active booking with an owner whose window has not ended."""
    return (
        facts.kind is Kind.BOOKING
        and facts.state is State.ACTIVE
        and bool(facts.owner)
        and now < facts.end
    )


def claimed(
    held: Iterable[str],
    reservations: Mapping[str, ReservationFacts],
    now: datetime,
    *,
    use_group: bool,
) -> set[str]:
    """Reservation names live pods hold (``held``: their booking references), each
    with the bookings its chained guarantee runs through."""
    pools = kin(reservations.values())
    out: set[str] = set()
    for name in set(held):
        out.add(name)
        anchor = reservations.get(name)
        if anchor is not None and anchor.state is State.ACTIVE:
            pool = pools.get(kin_key(anchor), [])
            out.update(link.name for link in chain(anchor, pool, now, use_group=use_group))
    return out


@dataclass(frozen=True)
class Tracker:
    """One leader term's memory: the armed deadlines by reservation name."""

    deadlines: Mapping[str, datetime] = field(default_factory=dict)

    def next_deadline(self) -> datetime | None:
        return min(self.deadlines.values(), default=None)


def first_deadline(facts: ReservationFacts, now: datetime, rules: Rules) -> datetime:
    """Before the window: start + timeout; already open (or vacated): now + grace."""
    if now < facts.start:
        return facts.start + rules.timeout
    return now + rules.grace


def step(
    candidates: Mapping[str, ReservationFacts],
    held: set[str],
    tracker: Tracker,
    now: datetime,
    rules: Rules,
) -> tuple[Tracker, list[tuple[str, datetime]]]:
    """Arm, clear and fire deadlines; the new tracker and (name, deadline) to declare.

    ``candidates`` are the undeclared bookings in play (``is_booking_in_play``),
    ``held`` the claimed names (``claimed``). A claimed booking loses its deadline, so
    once vacated it is re-armed like a booking first seen: with the grace when its
    window is open, never with an older deadline.
    """
    deadlines: dict[str, datetime] = {}
    declare: list[tuple[str, datetime]] = []
    for name in sorted(candidates):
        if name in held:
            continue
        deadline = tracker.deadlines.get(name) or first_deadline(candidates[name], now, rules)
        if now >= deadline:
            declare.append((name, deadline))
        else:
            deadlines[name] = deadline
    return Tracker(deadlines), declare
