"""The risk ahead: which surviving pods may be preempted at which upcoming boundary
(R33 termination warnings, R34 headroom notice, R41 forecast); no side effects.

For each future boundary ``S`` (ascending) and class: ``demand`` is the bookings'
unclaimed GPUs at ``S`` (``preemption.demands_at``), ``free`` the room carried from
the previous boundary, ``shortfall = max(0, demand - free)``, and the *pool* the pods
that would be eligible at ``S`` (on an included node, guarantee absent or ending at or
before ``S``). Every pod of a short class's pool is at risk
``min(1, shortfall / pool GPUs)``; it may be killed from
``max(S - lead, guarantee end)`` on. The room carried to the next boundary assumes
the shortfall is reclaimed as far as the pool allows: ``free - demand + reclaimed``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.model import ReservationFacts
from shared.policy.preemption import Holder, Room, claimed, demands_at, is_booking


@dataclass(frozen=True)
class ClassOutlook:
    """One class at one boundary."""

    demand: int
    free: int
    shortfall: int
    pool: tuple[Holder, ...]

    @functools.cached_property
    def uids(self) -> frozenset[str]:
        """The pool's pod uids (membership in O(1))."""
        return frozenset(h.uid for h in self.pool)

    @functools.cached_property
    def pool_gpus(self) -> int:
        return sum(h.gpus for h in self.pool)

    @property
    def risk(self) -> float:
        """``min(1, shortfall / pool GPUs)``; 0 without a shortfall or a pool."""
        if not self.shortfall or not self.pool_gpus:
            return 0.0
        return min(1.0, self.shortfall / self.pool_gpus)


@dataclass(frozen=True)
class Stop:
    """Every class with demand at one boundary."""

    boundary: datetime
    classes: Mapping[str, ClassOutlook]


@dataclass(frozen=True)
class Risk:
    """One pod's warning: the soonest boundary it is at risk at."""

    boundary: datetime
    at: datetime
    risk: float

    @property
    def risk_text(self) -> str:
        """Two decimals, as the annotation carries it."""
        return f"{self.risk:.2f}"


def future_starts(
    bookings: Iterable[ReservationFacts], after: datetime, until: datetime
) -> list[datetime]:
    """Distinct booking starts in ``(after, until]``, ascending."""
    return sorted({b.start for b in bookings if is_booking(b) and after < b.start <= until})


def stops(
    starts: Sequence[datetime],
    bookings: Sequence[ReservationFacts],
    holders: Sequence[Holder],
    rooms: Mapping[str, Room],
) -> list[Stop]:
    """The outlook at each start, carrying the room forward."""
    covered = claimed(holders)
    free = {c: r.free for c, r in rooms.items()}
    found = []
    for start in starts:
        classes: dict[str, ClassOutlook] = {}
        for cls, parts in demands_at(start, bookings, covered).items():
            demand = sum(parts)
            room = rooms.get(cls)
            have = free.get(cls, 0)
            pool = _pool(holders, cls, room, start)
            out = ClassOutlook(demand, have, max(0, demand - have), pool)
            classes[cls] = out
            free[cls] = have - demand + min(out.shortfall, out.pool_gpus)
        found.append(Stop(start, classes))
    return found


def _pool(
    holders: Iterable[Holder], cls: str, room: Room | None, at: datetime
) -> tuple[Holder, ...]:
    if room is None:
        return ()
    return tuple(
        h
        for h in holders
        if h.gpu_class == cls and h.gpus > 0 and h.node in room.node_gpus and h.past_guarantee(at)
    )


def kill_from(holder: Holder, boundary: datetime, lead: timedelta) -> datetime:
    """The earliest instant the pod may be killed for ``boundary``."""
    start = boundary - lead
    end = holder.guarantee_end
    return start if end is None else max(start, end)


def warnings(found: Sequence[Stop], lead: timedelta) -> dict[str, Risk]:
    """Per pod uid, its soonest risk (R33): the whole pool of every short class."""
    risks: dict[str, Risk] = {}
    for stop in found:
        for out in stop.classes.values():
            if not out.risk:
                continue
            for h in out.pool:
                if h.uid not in risks:
                    risks[h.uid] = Risk(stop.boundary, kill_from(h, stop.boundary, lead), out.risk)
    return risks


# --- headroom (R34) ---------------------------------------------------------------


def headroom_target(total: int, percent: int) -> int:
    """GPUs of a class kept free for on-demand work: ``ceil(total * pct / 100)``."""
    return math.ceil(total * percent / 100) if percent > 0 else 0


def headroom_short(room: Room, percent: int) -> int:
    """GPUs to reclaim to reach the headroom target (0 when it is met or off)."""
    return max(0, headroom_target(room.total, percent) - room.free)
