"""Wire models of the reservation app (reservation-api.md §3), read tolerantly.

Every model ignores unknown fields and accepts the older shapes the contract lists in
§5: a single ``su_cost`` instead of the three SU fields, ``full_name`` in user briefs,
a ``cancelled_by`` object, ``management_buffer`` on classes, groups without
``is_active``/``on_demand_auto_join``/``members``, group class entries that are briefs,
reservations of the retired ``reclaim`` kind with no user or group. Instants are
parsed from any ISO-8601 form and normalised to aware UTC (a value without an offset
is UTC, §1.6). Models are frozen: a parsed answer is a snapshot.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from shared.model import Kind, State


def _as_utc(value: datetime) -> datetime:
    """A naive instant is UTC; an offset one is converted to UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


#: An instant from a ``*_utc``/``*_at`` field, always aware UTC after parsing.
UtcInstant = Annotated[datetime, AfterValidator(_as_utc)]


#: Reservation kinds (§3.6): the cluster model's enum, one definition for both sides.
#: Unknown kinds are kept as strings and protected like bookings by the caller.
ReservationKind = Kind
#: Stored reservation statuses.
ReservationStatus = State


class StatusFilter(StrEnum):
    """The ``status`` query parameter of ``GET /api/reservations``."""

    ACTIVE = "active"
    CANCELLED = "cancelled"
    ALL = "all"
    RECENT = "recent"


class CancelReason(StrEnum):
    """Machine-readable reasons of ``POST /api/reservations/{id}/cancel`` (§2.9)."""

    NO_SHOW = "no-show"
    CONTROLLER_REVOKED = "controller-revoked"
    POD_TERMINATED = "pod-terminated"
    SUPERSEDED = "superseded"


class DenialCode(StrEnum):
    """Admission-gate codes of the denial envelope (§1.5.2); the set grows."""

    NOT_A_MEMBER = "not_a_member"
    GPU_CLASS_NOT_ATTACHED = "gpu_class_not_attached"
    GPU_COUNT_OVER_CLASS_CAP = "gpu_count_over_class_cap"
    DURATION_OVER_GROUP_CEILING = "duration_over_group_ceiling"
    GROUP_NOT_YET_VALID = "group_not_yet_valid"
    GROUP_VALIDITY_ENDED = "group_validity_ended"
    SU_BUDGET_MEMBER = "su_budget_member"
    SU_BUDGET_POOL = "su_budget_pool"
    CAPACITY_PHYSICAL = "capacity_physical"
    CAPACITY_COHORT = "capacity_cohort"
    CAPACITY_GROUP = "capacity_group"
    START_TOO_SOON = "start_too_soon"
    BOOKING_WINDOW_TOO_SOON = "booking_window_too_soon"
    BOOKING_WINDOW_TOO_FAR = "booking_window_too_far"
    DURATION_OVER_MEMBER_CAP = "duration_over_member_cap"
    GROUP_ON_DEMAND_ONLY = "group_on_demand_only"
    OUTRANKED = "outranked"


class KeyScope(StrEnum):
    """Service-key scopes (§1.3)."""

    READ_ONLY = "read_only"
    READ_WRITE = "read_write"


class WireModel(BaseModel):
    """Base of every wire model: unknown fields ignored, instances frozen."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class UserBrief(WireModel):
    id: int
    username: str


class GroupBrief(WireModel):
    id: int
    name: str


class GpuClassBrief(WireModel):
    id: int
    name: str
    label_value: str | None = None


class Reservation(WireModel):
    """``ReservationResponse`` (§3.1): required fields as the contract's client column."""

    id: int
    gpu_class_id: int
    gpu_class: GpuClassBrief
    date: date
    start_utc: UtcInstant
    end_utc: UtcInstant
    gpu_count: int
    kind: str
    status: str
    created_at: UtcInstant
    updated_at: UtcInstant
    user_id: int | None = None
    user: UserBrief | None = None
    group_id: int | None = None
    group: GroupBrief | None = None
    start_dt: datetime | None = None
    end_dt: datetime | None = None
    su_cost_user: float = 0
    su_cost_group: float = 0
    su_cost_original: float = 0
    notes: str | None = None
    submitted_by_id: int | None = None
    submitted_by: UserBrief | None = None
    cancelled_at: UtcInstant | None = None
    cancelled_at_local: datetime | None = None
    cancelled_by_id: int | None = None
    cancel_reason: str | None = None
    continued_from_id: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _older_su_cost(cls, data: Any) -> Any:
        """An older app sent one ``su_cost``; it stands for all three SU fields."""
        if isinstance(data, dict) and "su_cost" in data and "su_cost_user" not in data:
            cost = data["su_cost"]
            return {
                **data,
                "su_cost_user": cost,
                "su_cost_group": cost,
                "su_cost_original": cost,
            }
        return data

    @property
    def is_active(self) -> bool:
        return self.status == ReservationStatus.ACTIVE

    @property
    def username(self) -> str | None:
        return self.user.username if self.user else None

    @property
    def group_name(self) -> str | None:
        return self.group.name if self.group else None


class GpuClass(WireModel):
    """``GpuClassResponse`` (§3.3)."""

    id: int
    name: str
    label_value: str | None = None
    description: str | None = None
    total_gpus: int | None = None
    effective_gpus_today: int | None = None
    su_rate_per_hour: float | None = None
    max_gpus_per_reservation: int | None = None
    attach_all_groups: bool = False
    is_active: bool = True
    created_at: UtcInstant | None = None

    @property
    def capacity(self) -> int | None:
        """What the app admits against: today's effective count, else the total."""
        if self.effective_gpus_today is not None:
            return self.effective_gpus_today
        return self.total_gpus


class GroupMember(WireModel):
    username: str
    id: int | None = None
    role: str = "member"
    team_name: str | None = None


class Group(WireModel):
    """``GroupResponse`` (§3.4) with the defaults the contract gives older apps."""

    id: int
    name: str
    is_active: bool = True
    on_demand_auto_join: bool = False
    on_demand_only: bool = False
    members: tuple[GroupMember, ...] = ()
    gpu_classes: tuple[GpuClassBrief, ...] = ()
    description: str | None = None
    valid_from: date | None = None
    valid_until: date | None = None
    max_reservation_hours: int | None = None
    su_budget: float | None = None
    su_anchor_mode: str | None = None

    @property
    def member_usernames(self) -> frozenset[str]:
        """Membership is any role."""
        return frozenset(m.username for m in self.members)


class Overstay(WireModel):
    """``OverstayResponse`` (§3.5)."""

    id: int
    reservation_id: int
    pod_uid: str
    gpu_count: int
    start_utc: UtcInstant
    end_utc: UtcInstant
    gpu_class_id: int | None = None
    duration_seconds: int | None = None
    end_reason: str | None = None


class AdmissionCandidate(WireModel):
    """``OnDemandAdmissionCandidate`` (§2.7), as we send it."""

    pod_uid: str
    username: str
    group_name: str | None
    gpu_class_id: int
    gpu_count: int
    duration_seconds: int
    pod_created_at: UtcInstant | None = None
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    best_effort: bool = False


class PreemptionCandidate(WireModel):
    """``PreemptionCandidate`` (§2.8), as we send it."""

    pod_uid: str
    namespace: str
    pod_name: str
    gpu_class: str
    gpu_count: int
    reservation_id: int
