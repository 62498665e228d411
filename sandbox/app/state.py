"""The emulated app's data: users, groups, GPU classes, reservations, keys.

Plain mutable records in one ``AppState``; every mutation goes through
``sandbox.app.operations`` so the rules live in one place. Reservations are never
deleted; the idempotency map and the overstay records are permanent (Appendix A).
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass, field
from datetime import date, datetime
from zoneinfo import ZoneInfo

from shared.appclient.models import KeyScope, ReservationKind, ReservationStatus

MEMBER = "member"
MANAGER = "manager"


@dataclass
class User:
    id: int
    username: str
    created_at: datetime
    is_active: bool = True


@dataclass
class CapacityOverride:
    """From ``first`` to ``last`` (local dates, inclusive) the class offers ``gpus``."""

    first: date
    last: date
    gpus: int


@dataclass
class GpuClass:
    id: int
    name: str
    label_value: str | None
    total_gpus: int
    created_at: datetime
    max_gpus_per_reservation: int | None = None
    su_rate_per_hour: float = 1.0
    description: str | None = None
    attach_all_groups: bool = False
    is_active: bool = True
    overrides: list[CapacityOverride] = field(default_factory=list)

    def capacity_on(self, day: date) -> int:
        """GPUs offered on a local day (the latest matching override wins)."""
        gpus = self.total_gpus
        for override in self.overrides:
            if override.first <= day <= override.last:
                gpus = override.gpus
        return gpus


@dataclass
class Group:
    id: int
    name: str
    created_at: datetime
    #: username → role (``member`` or ``manager``).
    members: dict[str, str] = field(default_factory=dict)
    class_ids: set[int] = field(default_factory=set)
    description: str | None = None
    valid_from: date | None = None
    valid_until: date | None = None
    max_reservation_hours: int = 168
    su_budget: float | None = None
    su_anchor_mode: str = "weekly"
    #: Shared SU pool per window (the scheduling docs' ``pool_su_budget``).
    pool_su_budget: float | None = None
    #: Concurrent GPUs the group may hold per class (``capacity_group``); None = no ceiling.
    gpu_ceiling: int | None = None
    on_demand_auto_join: bool = False
    on_demand_only: bool = False
    researcher_mode: bool = False
    is_active: bool = True


@dataclass
class Reservation:
    id: int
    user_id: int | None
    group_id: int | None
    gpu_class_id: int
    start: datetime
    end: datetime
    gpu_count: int
    kind: str
    created_at: datetime
    updated_at: datetime
    su_cost_user: float = 0.0
    su_cost_group: float = 0.0
    su_cost_original: float = 0.0
    status: str = ReservationStatus.ACTIVE
    notes: str | None = None
    submitted_by_id: int | None = None
    cancelled_at: datetime | None = None
    cancelled_by_id: int | None = None
    cancel_reason: str | None = None
    continued_from_id: int | None = None

    @property
    def is_active(self) -> bool:
        return self.status == ReservationStatus.ACTIVE

    @property
    def holds_capacity(self) -> bool:
        """Active bookings and leases count against capacity; stubs never do."""
        return self.is_active and self.kind != ReservationKind.BEST_EFFORT


@dataclass
class ServiceKey:
    key: str
    scope: KeyScope
    revoked: bool = False

    @property
    def prefix(self) -> str:
        return self.key[:15]


@dataclass
class OverstayRecord:
    id: int
    reservation_id: int
    pod_uid: str
    gpu_count: int
    start: datetime
    end: datetime
    end_reason: str | None
    created_at: datetime


@dataclass
class AppState:
    """Everything the app knows. ``zone`` is the site's IANA zone (``TIMEZONE``)."""

    zone: ZoneInfo
    #: Minutes of the best-effort capacity probe (site setting; 0 disables it).
    probe_minutes: int = 10
    users: dict[int, User] = field(default_factory=dict)
    groups: dict[int, Group] = field(default_factory=dict)
    classes: dict[int, GpuClass] = field(default_factory=dict)
    reservations: dict[int, Reservation] = field(default_factory=dict)
    keys: dict[str, ServiceKey] = field(default_factory=dict)
    idempotency: dict[str, int] = field(default_factory=dict)
    overstays: dict[str, OverstayRecord] = field(default_factory=dict)
    _ids: dict[str, itertools.count[int]] = field(default_factory=dict)

    def next_id(self, table: str) -> int:
        counter = self._ids.setdefault(table, itertools.count(1))
        return next(counter)

    def user_named(self, username: str) -> User | None:
        return next((u for u in self.users.values() if u.username == username), None)

    def group_named(self, name: str) -> Group | None:
        return next((g for g in self.groups.values() if g.name == name), None)

    def class_labelled(self, label: str) -> GpuClass | None:
        return next((c for c in self.classes.values() if c.label_value == label), None)

    def add_user(self, username: str, now: datetime) -> User:
        user = User(self.next_id("users"), username, now)
        self.users[user.id] = user
        return user

    def mint_key(self, scope: KeyScope) -> ServiceKey:
        """A new ``gpures_<64 hex>`` key."""
        key = ServiceKey("gpures_" + secrets.token_hex(32), scope)
        self.keys[key.key] = key
        return key
