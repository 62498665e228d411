"""The app's admission gates (reservation-api.md §1.5.2, §2.5, §2.6), run in a fixed order.

``judge(state, ask, now)`` returns the first failing gate's ``Refusal`` or None. Order:
membership → class attachment → per-class GPU cap → member duration cap (bookings)
→ group duration ceiling → group validity → member SU budget → group SU pool →
physical capacity → group ceiling. Managers of the group get the ±90-day validity
grace and skip the budget gates. Best-effort stubs skip the span gates and run
capacity only as a probe over the next ``probe_minutes``. Pure: reads ``state``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sandbox.app import charges
from sandbox.app.capacity import first_overflow, holders, peak
from sandbox.app.state import MANAGER, AppState, GpuClass, Group, Reservation, User
from sandbox.app.timeutil import day_start, local_date
from shared.appclient.models import DenialCode, ReservationKind

_GRACE = timedelta(days=90)
_MEMBER_CAP = timedelta(hours=48)


@dataclass(frozen=True)
class Ask:
    """A reservation someone wants."""

    user: User
    group: Group
    klass: GpuClass
    gpu_count: int
    start: datetime
    end: datetime
    kind: str

    @property
    def role(self) -> str | None:
        return self.group.members.get(self.user.username)

    @property
    def privileged(self) -> bool:
        return self.role == MANAGER

    @property
    def is_stub(self) -> bool:
        return self.kind == ReservationKind.BEST_EFFORT


@dataclass(frozen=True)
class Refusal:
    """An admission denial: the envelope's fields."""

    code: str
    retryable: bool
    detail: str
    not_before: datetime | None = None


Gate = Callable[[AppState, Ask, datetime], Refusal | None]


def membership(state: AppState, ask: Ask, now: datetime) -> Refusal | None:
    if ask.role is None:
        text = f"User '{ask.user.username}' is not a member of group '{ask.group.name}'."
        return Refusal(DenialCode.NOT_A_MEMBER, False, text)
    return None


def attachment(state: AppState, ask: Ask, now: datetime) -> Refusal | None:
    if ask.klass.attach_all_groups or ask.klass.id in ask.group.class_ids:
        return None
    text = f"GPU class {ask.klass.name} is not bookable under group '{ask.group.name}'."
    return Refusal(DenialCode.GPU_CLASS_NOT_ATTACHED, False, text)


def class_cap(state: AppState, ask: Ask, now: datetime) -> Refusal | None:
    cap = ask.klass.max_gpus_per_reservation
    if cap is None or ask.gpu_count <= cap:
        return None
    text = f"{ask.gpu_count} GPU(s) requested; class {ask.klass.name} allows at most {cap}."
    return Refusal(DenialCode.GPU_COUNT_OVER_CLASS_CAP, False, text)


def member_duration(state: AppState, ask: Ask, now: datetime) -> Refusal | None:
    exempt = ask.privileged or ask.group.researcher_mode or ask.kind != ReservationKind.BOOKING
    if exempt or ask.end - ask.start <= _MEMBER_CAP:
        return None
    text = "Bookings of ordinary members are limited to 48 hours."
    return Refusal(DenialCode.DURATION_OVER_MEMBER_CAP, False, text)


def group_duration(state: AppState, ask: Ask, now: datetime) -> Refusal | None:
    ceiling = timedelta(hours=ask.group.max_reservation_hours)
    if ask.is_stub or ask.end - ask.start <= ceiling:
        return None
    text = f"Group '{ask.group.name}' allows at most {ask.group.max_reservation_hours} h."
    return Refusal(DenialCode.DURATION_OVER_GROUP_CEILING, False, text)


def validity(state: AppState, ask: Ask, now: datetime) -> Refusal | None:
    grace = _GRACE if ask.privileged else timedelta(0)
    day = local_date(ask.start, state.zone)
    group = ask.group
    if group.valid_from is not None and day < group.valid_from - grace:
        opens = day_start(group.valid_from - grace, state.zone)
        text = f"Group '{group.name}' is valid from {group.valid_from.isoformat()}."
        return Refusal(DenialCode.GROUP_NOT_YET_VALID, True, text, opens)
    if group.valid_until is not None and day > group.valid_until + grace:
        text = f"Group '{group.name}' was valid until {group.valid_until.isoformat()}."
        return Refusal(DenialCode.GROUP_VALIDITY_ENDED, False, text)
    return None


def _budget_refusal(
    state: AppState, ask: Ask, now: datetime, code: str, spent: float, budget: float
) -> Refusal | None:
    """None when the ask fits the budget; else the refusal with its retry rule."""
    cost = charges.price(ask.klass, ask.gpu_count, ask.start, ask.end)
    if spent + cost <= budget:
        return None
    left = max(0.0, budget - spent)
    text = f"This reservation would cost {cost:g} SU; {left:g} of {budget:g} SU left."
    if cost > budget or ask.group.su_anchor_mode in charges.OPEN_ENDED_MODES:
        return Refusal(code, False, text)
    start, end = charges.budget_window(ask.group, ask.start, state.zone)
    current = start <= now and (end is None or now < end)
    return Refusal(code, True, text, end if current else None)


def _charged_rows(state: AppState, ask: Ask) -> list[Reservation]:
    window = charges.budget_window(ask.group, ask.start, state.zone)
    return [
        r
        for r in state.reservations.values()
        if r.group_id == ask.group.id and charges.in_window(r, window)
    ]


def member_budget(state: AppState, ask: Ask, now: datetime) -> Refusal | None:
    budget = ask.group.su_budget
    if budget is None or ask.privileged or ask.is_stub:
        return None
    spent = sum(r.su_cost_user for r in _charged_rows(state, ask) if r.user_id == ask.user.id)
    return _budget_refusal(state, ask, now, DenialCode.SU_BUDGET_MEMBER, spent, budget)


def pool_budget(state: AppState, ask: Ask, now: datetime) -> Refusal | None:
    budget = ask.group.pool_su_budget
    if budget is None or ask.privileged or ask.is_stub:
        return None
    spent = sum(r.su_cost_group for r in _charged_rows(state, ask))
    return _budget_refusal(state, ask, now, DenialCode.SU_BUDGET_POOL, spent, budget)


def _span(ask: Ask, now: datetime, probe_minutes: int) -> tuple[datetime, datetime]:
    if ask.is_stub:
        return now, now + timedelta(minutes=probe_minutes)
    return ask.start, ask.end


def physical(state: AppState, ask: Ask, now: datetime) -> Refusal | None:
    start, end = _span(ask, now, state.probe_minutes)
    if ask.is_stub and state.probe_minutes <= 0:
        return None
    rows = state.reservations.values()
    squeeze = first_overflow(rows, ask.klass, start, end, ask.gpu_count, state.zone)
    if squeeze is None:
        return None
    outright = ask.gpu_count > ask.klass.total_gpus
    text = (
        f"{ask.gpu_count} {ask.klass.name} GPU(s) requested; at {squeeze.at:%Y-%m-%d %H:%M}Z "
        f"{squeeze.booked} of {squeeze.offered} are already booked."
    )
    return Refusal(DenialCode.CAPACITY_PHYSICAL, not outright, text)


def group_ceiling(state: AppState, ask: Ask, now: datetime) -> Refusal | None:
    ceiling = ask.group.gpu_ceiling
    if ceiling is None:
        return None
    start, end = _span(ask, now, state.probe_minutes)
    mine = [
        r
        for r in holders(state.reservations.values(), ask.klass.id, start, end)
        if r.group_id == ask.group.id
    ]
    held = peak(mine, start, end)
    if held + ask.gpu_count <= ceiling:
        return None
    text = f"Group '{ask.group.name}' may hold at most {ceiling} {ask.klass.name} GPU(s) at once."
    return Refusal(DenialCode.CAPACITY_GROUP, ask.gpu_count <= ceiling, text)


GATES: tuple[Gate, ...] = (
    membership,
    attachment,
    class_cap,
    member_duration,
    group_duration,
    validity,
    member_budget,
    pool_budget,
    physical,
    group_ceiling,
)


def judge(state: AppState, ask: Ask, now: datetime) -> Refusal | None:
    """The first gate that refuses ``ask`` at ``now``, or None when it is admissible."""
    for gate in GATES:
        refusal = gate(state, ask, now)
        if refusal is not None:
            return refusal
    return None
