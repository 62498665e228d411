"""The risk ahead: which surviving pods may be preempted at which upcoming boundary
(R33 termination warnings, R34 headroom notice, R41 forecast); no side effects.

``ahead`` plans every boundary exactly as the sweep does — one ``Tally`` carried from
boundary to boundary, ``preemption.plan_boundary`` for each (node blocks included) — so
the risk a pod is shown is the risk the sweep acts on. Boundaries up to ``now`` (the
sweep's window reaches back ``lead``) are replayed as handled: their demand consumes
room (a booking that started unused still holds its GPUs), their deficits are
forgiven as the sweep's ``settle`` forgives them, and nobody is at risk from them.
For each later boundary ``S`` and class, every ``Need`` puts pods at risk:

- a one-node block the planner chose its victims for (``Need.chosen``) puts exactly
  those at risk 1 — the local choice takes them (with selection delegated to the app,
  the app chooses from the node's pool: each pod there at ``gpus / pool GPUs``);
- any other need puts every pod of its pool at ``min(1, gpus / pool GPUs)`` (the local
  choice is random).

A pod may be killed from ``max(S - lead, guarantee end)`` on. The room carried to the
next boundary assumes every need is met as far as its pool allows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shared.model import ReservationFacts
from shared.policy.preemption import (
    Holder,
    Need,
    Room,
    Tally,
    claimed,
    demands_at,
    is_booking,
    plan_boundary,
)


@dataclass(frozen=True)
class ClassOutlook:
    """One class at one boundary."""

    demand: int
    #: Room before this boundary's demand (negative when overcommitted).
    free: int
    #: GPUs the planner must reclaim (the needs' sum): what the sweep kills for.
    shortfall: int
    #: Per pod uid at risk, its risk (0 < risk <= 1).
    risks: Mapping[str, float] = field(default_factory=dict)

    @property
    def risk(self) -> float:
        """The highest risk of any pod (0 when nobody is at risk)."""
        return max(self.risks.values(), default=0.0)


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


def ahead(
    now: datetime,
    lead: timedelta,
    until: datetime,
    bookings: Sequence[ReservationFacts],
    holders: Sequence[Holder],
    rooms: Mapping[str, Room],
    *,
    delegated: bool = False,
) -> list[Stop]:
    """The outlook at each boundary in ``(now, until]``, planned from ``now - lead``
    on as the sweep plans (see the module docstring)."""
    tally = Tally(rooms)
    covered = claimed(holders)
    found = []
    for start in future_starts(bookings, now - lead, until):
        demands = demands_at(start, bookings, covered)
        pools = {cls: _pool(holders, cls, rooms.get(cls), max(now, start)) for cls in demands}
        before = dict(tally.free)
        needs = plan_boundary(start, demands, {c: tally.alive(p) for c, p in pools.items()}, tally)
        if start <= now:
            tally.settle()  # handled by the sweep already
            continue
        classes = {}
        for cls, parts in demands.items():
            mine = [n for n in needs if n.gpu_class == cls]
            risks: dict[str, float] = {}
            for need in mine:
                for uid, risk in _at_risk(need, tally, delegated).items():
                    risks[uid] = max(risk, risks.get(uid, 0.0))
                _reclaim(need, tally)
            shortfall = sum(n.gpus for n in mine)
            classes[cls] = ClassOutlook(sum(parts), before.get(cls, 0), shortfall, risks)
        found.append(Stop(start, classes))
    return found


def _at_risk(need: Need, tally: Tally, delegated: bool) -> dict[str, float]:
    """The pods ``need`` may take, each with its risk (see the module docstring)."""
    if need.gpus <= 0:
        return {}
    if need.chosen and not delegated:
        return {h.uid: 1.0 for h in need.chosen if h.uid not in tally.doomed}
    pool = tally.alive(need.pool)
    gpus = sum(h.gpus for h in pool)
    if not gpus:
        return {}
    risk = min(1.0, need.gpus / gpus)
    return {h.uid: risk for h in pool if h.gpus > 0}


def _reclaim(need: Need, tally: Tally) -> None:
    """Assume ``need`` met as far as its pool allows (the room carried forward)."""
    if need.chosen:
        tally.kill(need.chosen)
        return
    reclaimed = min(need.gpus, sum(h.gpus for h in tally.alive(need.pool)))
    tally.free[need.gpu_class] = tally.free.get(need.gpu_class, 0) + reclaimed


def _pool(
    holders: Iterable[Holder], cls: str, room: Room | None, at: datetime
) -> tuple[Holder, ...]:
    """Pods of ``cls`` on an included node past their guarantee at ``at``."""
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


def warnings(found: Sequence[Stop], lead: timedelta, holders: Iterable[Holder]) -> dict[str, Risk]:
    """Per pod uid, its soonest risk (R33) among ``holders``."""
    by_uid = {h.uid: h for h in holders}
    risks: dict[str, Risk] = {}
    for stop in found:
        for out in stop.classes.values():
            for uid, risk in out.risks.items():
                h = by_uid.get(uid)
                if h is not None and uid not in risks:
                    risks[uid] = Risk(stop.boundary, kill_from(h, stop.boundary, lead), risk)
    return risks


# --- headroom (R34) ---------------------------------------------------------------


def headroom_target(total: int, percent: int) -> int:
    """GPUs of a class kept free for on-demand work: ``ceil(total * pct / 100)``."""
    return math.ceil(total * percent / 100) if percent > 0 else 0


def headroom_short(room: Room, percent: int) -> int:
    """GPUs to reclaim to reach the headroom target (0 when it is met or off)."""
    return max(0, headroom_target(room.total, percent) - room.free)
