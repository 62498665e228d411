"""The scenario's ``app`` section: the world the emulated app starts with.

Shape (docs/developer/sandbox.md, "Reservation app emulator")::

    app:
      timezone: America/Los_Angeles   # the site's IANA zone
      seed: 7                         # RNG seed of victim selection
      best_effort_probe_minutes: 10
      classes:  [{id, name, label_value, total_gpus, max_gpus_per_reservation?,
                  su_rate_per_hour?, attach_all_groups?, is_active?,
                  overrides?: [{first, last, gpus}]}]
      users:    [alice, {username: bob, is_active: true}]
      groups:   [{name, members: [alice, {username: carol, role: manager}],
                  classes: [h100], valid_from?, valid_until?, max_reservation_hours?,
                  su_budget?, su_anchor_mode?, pool_su_budget?, gpu_ceiling?,
                  on_demand_auto_join?, on_demand_only?, researcher_mode?}]
      bookings: [{username, group, gpu_class, gpu_count, start: "-5m", end: "+2h"}]

Every problem is reported as ``ValueError`` naming the entry. Bookings are created
through the normal booking path, so a scenario cannot seed an over-booked world.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sandbox.app import operations
from sandbox.app.errors import AppError
from sandbox.app.state import MANAGER, MEMBER, AppState, CapacityOverride, GpuClass, Group
from sandbox.app.timeutil import parse_when


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OverrideSpec(Spec):
    first: date
    last: date
    gpus: int = Field(ge=0)


class ClassSpec(Spec):
    id: int = Field(ge=1)
    name: str
    label_value: str | None
    total_gpus: int = Field(ge=0)
    max_gpus_per_reservation: int | None = Field(default=None, ge=1)
    su_rate_per_hour: float = Field(default=1.0, ge=0)
    description: str | None = None
    attach_all_groups: bool = False
    is_active: bool = True
    overrides: list[OverrideSpec] = Field(default_factory=list)


class UserSpec(Spec):
    username: str = Field(min_length=1)
    is_active: bool = True


class MemberSpec(Spec):
    username: str
    role: str = MEMBER

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role not in (MEMBER, MANAGER):
            raise ValueError(f"role must be {MEMBER} or {MANAGER}")
        return role


class GroupSpec(Spec):
    name: str = Field(min_length=1)
    members: list[str | MemberSpec] = Field(default_factory=list)
    classes: list[str] = Field(default_factory=list)
    description: str | None = None
    valid_from: date | None = None
    valid_until: date | None = None
    max_reservation_hours: int = Field(default=168, ge=1)
    su_budget: float | None = Field(default=None, ge=0)
    su_anchor_mode: str = "weekly"
    pool_su_budget: float | None = Field(default=None, ge=0)
    gpu_ceiling: int | None = Field(default=None, ge=0)
    on_demand_auto_join: bool = False
    on_demand_only: bool = False
    researcher_mode: bool = False
    is_active: bool = True


class BookingSpec(Spec):
    username: str
    group: str
    gpu_class: str
    gpu_count: int = Field(ge=1)
    start: str
    end: str
    notes: str | None = None


class AppSection(Spec):
    timezone: str = "UTC"
    seed: int = 0
    best_effort_probe_minutes: int = Field(default=10, ge=0)
    classes: list[ClassSpec] = Field(default_factory=list)
    users: list[str | UserSpec] = Field(default_factory=list)
    groups: list[GroupSpec] = Field(default_factory=list)
    bookings: list[BookingSpec] = Field(default_factory=list)


def parse_section(raw: Any) -> AppSection:
    """Validate the ``app`` section (None or absent means an empty app)."""
    try:
        return AppSection.model_validate(raw or {})
    except ValidationError as exc:
        raise ValueError(f"scenario app section is invalid: {exc}") from None


def zone_of(section: AppSection) -> ZoneInfo:
    try:
        return ZoneInfo(section.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"scenario app.timezone {section.timezone!r} is not an IANA zone"
        ) from None


def make_class(spec: ClassSpec, now: datetime) -> GpuClass:
    fields = spec.model_dump(exclude={"overrides"})
    overrides = [CapacityOverride(o.first, o.last, o.gpus) for o in spec.overrides]
    return GpuClass(**fields, created_at=now, overrides=overrides)


def make_group(state: AppState, spec: GroupSpec, group_id: int, now: datetime) -> Group:
    """A group whose members and classes must already exist in ``state``."""
    members = {}
    for entry in spec.members:
        member = MemberSpec(username=entry) if isinstance(entry, str) else entry
        if state.user_named(member.username) is None:
            raise ValueError(f"group {spec.name!r}: unknown member {member.username!r}")
        members[member.username] = member.role
    class_ids = set()
    for label in spec.classes:
        klass = state.class_labelled(label)
        if klass is None:
            raise ValueError(f"group {spec.name!r}: unknown gpu class {label!r}")
        class_ids.add(klass.id)
    fields = spec.model_dump(exclude={"members", "classes"})
    return Group(id=group_id, created_at=now, members=members, class_ids=class_ids, **fields)


def build_state(section: AppSection, now: datetime) -> AppState:
    """Classes, users, groups and bookings of the section, at ``now``."""
    state = AppState(zone=zone_of(section), probe_minutes=section.best_effort_probe_minutes)
    for class_spec in section.classes:
        if class_spec.id in state.classes:
            raise ValueError(f"duplicate gpu class id {class_spec.id}")
        state.classes[class_spec.id] = make_class(class_spec, now)
    for entry in section.users:
        user_spec = UserSpec(username=entry) if isinstance(entry, str) else entry
        if state.user_named(user_spec.username) is not None:
            raise ValueError(f"duplicate user {user_spec.username!r}")
        state.add_user(user_spec.username, now).is_active = user_spec.is_active
    for group_spec in section.groups:
        group = make_group(state, group_spec, state.next_id("groups"), now)
        state.groups[group.id] = group
    for booking in section.bookings:
        seed_booking(state, booking, now)
    return state


def seed_booking(state: AppState, spec: BookingSpec, now: datetime) -> None:
    try:
        window = (parse_when(spec.start, now), parse_when(spec.end, now))
        names = (spec.username, spec.group, spec.gpu_class)
        operations.create_booking(state, names, spec.gpu_count, window, now, spec.notes)
    except (ValueError, AppError) as exc:
        raise ValueError(f"scenario booking for {spec.username!r} refused: {exc}") from None
