"""What changes the emulated app's reservations, with the contract's rules.

Service-key paths (leases, stubs, cancels, overstay reports) and the owner/admin
paths of the control API (bookings, owner cancels, reassignments, window moves,
``/continue``). Each function validates natural keys (404), runs the gates (409 with
the envelope) and mutates ``state``; errors are raised as ``AppError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from sandbox.app import charges
from sandbox.app.bodies import ContinueBody, LeaseBody, OverstayBody, StubBody
from sandbox.app.errors import AppError, refused
from sandbox.app.gates import Ask, Refusal, judge
from sandbox.app.state import MEMBER, AppState, GpuClass, Group, OverstayRecord, Reservation, User
from shared.appclient.models import CancelReason, ReservationKind, ReservationStatus

_ACCOUNT_NAME = re.compile(r"^[a-z][a-z0-9._-]{2,31}$")


@dataclass(frozen=True)
class Created:
    """A create's answer: the row, and whether it is new (201) or a replay (200)."""

    reservation: Reservation
    new: bool


def _class(state: AppState, class_id: int) -> GpuClass:
    klass = state.classes.get(class_id)
    if klass is None or not klass.is_active:
        raise AppError(404, "GPU class not found")
    return klass


def _group(state: AppState, name: str) -> Group:
    group = state.group_named(name)
    if group is None or not group.is_active:
        raise AppError(404, f"Group '{name}' not found")
    return group


def _user(state: AppState, username: str, group: Group | None, now: datetime) -> User:
    """The user; on an auto-join group an unknown name is provisioned and enrolled."""
    user = state.user_named(username)
    auto_join = group is not None and group.on_demand_auto_join
    if user is None and auto_join and _ACCOUNT_NAME.match(username):
        user = state.add_user(username, now)
    if user is None or not user.is_active:
        raise AppError(404, f"User '{username}' not found")
    if group is not None and auto_join and username not in group.members:
        group.members[username] = MEMBER
    return user


def _admit(state: AppState, ask: Ask, now: datetime, forced: list[Refusal] | None) -> None:
    refusal = forced.pop(0) if forced else judge(state, ask, now)
    if refusal is not None:
        raise refused(refusal)


def _insert(state: AppState, ask: Ask, now: datetime, notes: str | None) -> Reservation:
    cost = 0.0 if ask.is_stub else charges.price(ask.klass, ask.gpu_count, ask.start, ask.end)
    row = Reservation(
        id=state.next_id("reservations"),
        user_id=ask.user.id,
        group_id=ask.group.id,
        gpu_class_id=ask.klass.id,
        start=ask.start,
        end=ask.end,
        gpu_count=ask.gpu_count,
        kind=ask.kind,
        created_at=now,
        updated_at=now,
        su_cost_user=cost,
        su_cost_group=cost,
        su_cost_original=cost,
        notes=notes,
    )
    state.reservations[row.id] = row
    return row


def create_for_service(
    state: AppState, body: LeaseBody | StubBody, now: datetime, forced: list[Refusal]
) -> Created:
    """A lease or stub for a service key; a known idempotency key replays the original."""
    known = state.idempotency.get(body.idempotency_key)
    if known is not None:
        return Created(state.reservations[known], new=False)
    group = _group(state, body.group_name)
    klass = _class(state, body.gpu_class_id)
    user = _user(state, body.username, group, now)
    if isinstance(body, LeaseBody):
        end, kind = now + timedelta(seconds=body.duration_seconds), ReservationKind.ON_DEMAND
    else:
        end, kind = now, ReservationKind.BEST_EFFORT
    ask = Ask(user, group, klass, body.gpu_count, now, end, kind)
    _admit(state, ask, now, forced)
    row = _insert(state, ask, now, body.notes)
    state.idempotency[body.idempotency_key] = row.id
    return Created(row, new=True)


def reservation(state: AppState, reservation_id: int) -> Reservation:
    row = state.reservations.get(reservation_id)
    if row is None:
        raise AppError(404, "Reservation not found")
    return row


def _mark_cancelled(
    state: AppState, row: Reservation, now: datetime, reason: str | None, by: int | None
) -> None:
    retained = 0.0
    if row.kind != ReservationKind.BEST_EFFORT:
        retained = charges.retained_charge(row, state.classes[row.gpu_class_id], now, reason)
    row.status = ReservationStatus.CANCELLED
    row.cancelled_at = now
    row.cancelled_by_id = by
    row.cancel_reason = reason
    row.updated_at = now
    row.su_cost_user = min(row.su_cost_user, retained)
    row.su_cost_group = min(row.su_cost_group, retained)


def cancel_for_service(
    state: AppState, reservation_id: int, reason: str, now: datetime
) -> Reservation:
    """§2.9: idempotent; a booking only once it has started (403 before)."""
    row = reservation(state, reservation_id)
    if not row.is_active:
        return row
    if row.kind == ReservationKind.BOOKING and row.start > now:
        raise AppError(
            403, "A booking that has not started cannot be cancelled with a service key."
        )
    _mark_cancelled(state, row, now, reason, None)
    return row


def cancel_by_owner(state: AppState, reservation_id: int, now: datetime) -> Reservation:
    """The owner cancels (any time, no machine reason); idempotent."""
    row = reservation(state, reservation_id)
    if row.is_active:
        _mark_cancelled(state, row, now, None, row.user_id)
    return row


def create_booking(
    state: AppState,
    names: tuple[str, str, str],
    gpu_count: int,
    window: tuple[datetime, datetime],
    now: datetime,
    notes: str | None = None,
) -> Reservation:
    """A booking made by its owner: ``names`` = (username, group, class label)."""
    username, group_name, label = names
    start, end = window
    if end <= start:
        raise AppError(422, "end must be after start")
    if gpu_count < 1:
        raise AppError(422, "gpu_count must be at least 1")
    group = _group(state, group_name)
    klass = state.class_labelled(label)
    if klass is None or not klass.is_active:
        raise AppError(404, f"GPU class '{label}' not found")
    user = _user(state, username, None, now)
    ask = Ask(user, group, klass, gpu_count, start, end, ReservationKind.BOOKING)
    _admit(state, ask, now, None)
    row = _insert(state, ask, now, notes)
    row.submitted_by_id = user.id
    return row


def reassign(state: AppState, reservation_id: int, username: str, now: datetime) -> Reservation:
    """An admin gives the reservation to another user; the id stays."""
    row = reservation(state, reservation_id)
    user = _user(state, username, None, now)
    row.user_id = user.id
    row.updated_at = now
    return row


def move(
    state: AppState, reservation_id: int, window: tuple[datetime, datetime], now: datetime
) -> Reservation:
    """An admin edits the window in place (content change under the same id)."""
    row = reservation(state, reservation_id)
    if window[1] < window[0]:
        raise AppError(422, "end must not be before start")
    row.start, row.end = window
    row.updated_at = now
    return row


def _check_continuable(source: Reservation, now: datetime) -> None:
    if not source.is_active:
        raise AppError(400, "Only an active reservation can be continued.")
    lease = source.kind == ReservationKind.ON_DEMAND and source.start <= now
    running = source.kind == ReservationKind.BOOKING and source.start <= now < source.end
    if not (lease or running):
        raise AppError(400, "This reservation cannot be continued now.")


def continue_reservation(
    state: AppState, reservation_id: int, body: ContinueBody, now: datetime
) -> tuple[Reservation, Reservation]:
    """``/continue`` as the owner: a new booking from now; the source superseded."""
    source = reservation(state, reservation_id)
    _check_continuable(source, now)
    end = now + timedelta(seconds=body.duration_seconds)
    supersede = source.end > now
    if supersede and end < source.end:
        raise AppError(400, "A continuation must not end before the reservation it replaces.")
    user, group = state.users[source.user_id or 0], state.groups[source.group_id or 0]
    klass = state.classes[source.gpu_class_id]
    count = body.gpu_count or source.gpu_count
    ask = Ask(user, group, klass, count, now, end, ReservationKind.BOOKING)
    source.status = ReservationStatus.CANCELLED if supersede else source.status
    refusal = judge(state, ask, now)
    source.status = ReservationStatus.ACTIVE
    if refusal is not None:
        raise refused(refusal, 409 if refusal.code.startswith("capacity") else 400)
    if supersede:
        _mark_cancelled(state, source, now, CancelReason.SUPERSEDED, user.id)
    row = _insert(state, ask, now, body.notes if body.notes is not None else source.notes)
    row.continued_from_id, row.submitted_by_id = source.id, user.id
    return row, source


def record_overstay(
    state: AppState, reservation_id: int, body: OverstayBody, now: datetime
) -> OverstayRecord:
    """§2.10: deduplicated by pod uid; the first record stands."""
    reservation(state, reservation_id)
    if body.end_utc <= body.start_utc:
        raise AppError(422, "end_utc must be after start_utc")
    known = state.overstays.get(body.pod_uid)
    if known is not None:
        return known
    record = OverstayRecord(
        id=state.next_id("overstays"),
        reservation_id=reservation_id,
        pod_uid=body.pod_uid,
        gpu_count=body.gpu_count,
        start=body.start_utc,
        end=body.end_utc,
        end_reason=body.end_reason,
        created_at=now,
    )
    state.overstays[body.pod_uid] = record
    return record
