"""Where a pod that is not yet admitted goes (R4, R6): admit, queue, JIT or nothing.

The order is the seed's:

1. *Admittable*: a matching booking open now, or opening within the horizon, with
   budget for the pod. The soonest-starting one wins (ties: more spare GPUs, then the
   lower id). If it is open the pod is admitted under it — the caller tries the open
   candidates in order, because a concurrent claim may take the budget first — and
   otherwise the pod is queued for it.
2. *JIT*: else a JIT-eligible pod will ask for an on-demand lease.
3. *Any match*: else the pod waits for a matching live booking anyway — the
   soonest-starting one big enough for it, else the soonest overall — with the reason
   it cannot go now (opens later, full, too small).
4. *Nothing*: else the reasons no reservation matches.

A reservation's budget is its GPU count minus its ledger holds. Pure functions only.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from shared.model import GPUReservation
from shared.policy.matching import MatchRules, Miss, PodProfile, jit_eligible, mismatch
from shared.policy.windows import is_open, within_horizon


class Path(StrEnum):
    """The route a pod takes."""

    ADMIT = "admit"
    QUEUE = "queue"
    JIT = "jit"
    NONE = "unmatched"


class Wait(StrEnum):
    """Why a queued pod cannot be admitted now."""

    OPENS_LATER = "opens_later"
    FULL = "full"
    TOO_SMALL = "too_small"


@dataclass(frozen=True, slots=True)
class Route:
    """The outcome of ``route``.

    ``candidates`` are, for ADMIT, the open reservations to try in order; for QUEUE,
    the one reservation waited for. ``misses`` are, for NONE, the distinct reasons the
    owner's reservations (or all, when the owner has none) do not match.
    """

    path: Path
    candidates: tuple[GPUReservation, ...] = ()
    wait: Wait | None = None
    misses: tuple[Miss, ...] = field(default=())

    @property
    def reservation(self) -> GPUReservation | None:
        """The first candidate, if any."""
        return self.candidates[0] if self.candidates else None


def free_gpus(res: GPUReservation) -> int:
    """GPUs of the budget no hold claims (negative when overrun)."""
    return res.facts.gpu_count - res.used_gpus


def _soonest(res: GPUReservation) -> tuple[object, ...]:
    return (res.facts.start, -free_gpus(res), res.facts.id)


def admittable(
    matches: Iterable[GPUReservation], gpus: int, now: datetime, rules: MatchRules
) -> list[GPUReservation]:
    """Matching reservations open now or within the horizon with room for ``gpus``."""
    found = [
        r for r in matches if within_horizon(r.facts, now, rules.horizon) and free_gpus(r) >= gpus
    ]
    return sorted(found, key=_soonest)


def fallback(matches: Iterable[GPUReservation], gpus: int) -> GPUReservation | None:
    """R4.3: the soonest match big enough for ``gpus``, else the soonest overall."""
    ordered = sorted(matches, key=_soonest)
    big_enough = [r for r in ordered if r.facts.gpu_count >= gpus]
    chosen = big_enough or ordered
    return chosen[0] if chosen else None


def wait_reason(res: GPUReservation, gpus: int, now: datetime) -> Wait:
    """Why a pod queued for ``res`` waits (R12's order: too small, opens later, full)."""
    if gpus > res.facts.gpu_count:
        return Wait.TOO_SMALL
    if not is_open(res.facts, now):
        return Wait.OPENS_LATER
    return Wait.FULL


#: Every miss in the order the checks run (the order reasons are told in).
MISS_ORDER = tuple(Miss)
#: Misses that say what is wrong with the pod, whichever reservation it was checked on.
POD_MISSES = frozenset({Miss.UNREADABLE_GPUS, Miss.NO_CLASS_LABEL, Miss.NO_GROUP})


def _misses(
    reservations: list[GPUReservation],
    pod: PodProfile,
    now: datetime,
    rules: MatchRules,
    no_shows: Set[int],
) -> tuple[Miss, ...]:
    """Every distinct reason, in ``Miss`` order (the order the checks run), so the
    message does not depend on the order the cache holds the reservations in. The
    owner's own reservations speak for themselves. When the owner has none, the pod is
    told so and what is wrong with the pod itself, never a fact about another user's
    reservation ("your booking was cancelled" would be false, and not the pod's to
    know)."""

    def miss(res: GPUReservation) -> Miss | None:
        return mismatch(res.facts, pod, now, rules, no_shows)

    mine = [miss(r) for r in reservations if r.facts.owner == pod.owner]
    if mine:
        chosen = {m for m in mine if m is not None}
    else:
        others = {miss(r) for r in reservations}
        chosen = {Miss.OTHER_OWNER} | {m for m in others if m in POD_MISSES}
    return tuple(m for m in MISS_ORDER if m in chosen)


#: The routes over no reservations at all (a namespace without bookings): JIT for an
#: eligible pod, else nothing, told as "no booking of yours" — what the general path
#: below gives over an empty pool, without building its lists and sets.
_JIT = Route(Path.JIT)
_NOTHING = Route(Path.NONE, misses=(Miss.OTHER_OWNER,))


def route(
    pod: PodProfile,
    reservations: Iterable[GPUReservation],
    now: datetime,
    rules: MatchRules,
    *,
    no_shows: Set[int] = frozenset(),
    exclude: Set[str] = frozenset(),
) -> Route:
    """The route of ``pod`` (see the module docstring); no side effects.

    ``exclude`` names reservations to treat as full, e.g. ones whose claim was just
    refused. A pod whose GPU count is unreadable matches nothing.
    """
    pool = list(reservations)
    if not pool:
        return _JIT if jit_eligible(pod, rules) else _NOTHING
    matches = [r for r in pool if mismatch(r.facts, pod, now, rules, no_shows) is None]
    gpus = pod.gpus.count
    ready = admittable(matches, gpus, now, rules)
    if exclude:  # most routes exclude nothing: no reference built per reservation
        ready = [r for r in ready if r.name not in exclude]
    if ready and is_open(ready[0].facts, now):
        return Route(Path.ADMIT, tuple(r for r in ready if is_open(r.facts, now)))
    if ready:
        return Route(Path.QUEUE, (ready[0],), Wait.OPENS_LATER)
    if jit_eligible(pod, rules):
        return Route(Path.JIT)
    waited = fallback(matches, gpus)
    if waited is not None:
        return Route(Path.QUEUE, (waited,), wait_reason(waited, gpus, now))
    return Route(Path.NONE, misses=_misses(pool, pod, now, rules, no_shows))


class Pool:
    """One snapshot of reservations indexed by owner, to route many pods over it.

    ``route`` looks at every reservation for every pod, and a pass routes every waiting
    pod: pods × reservations (2,000 × 2,000 at cluster scale, most of a pass's CPU).
    Only the pod's owner's reservations can match (``Miss.OTHER_OWNER`` otherwise), so
    ``route_in`` gives the same ``Route`` from the owner's share.
    """

    def __init__(self, reservations: Iterable[GPUReservation]) -> None:
        self.all = list(reservations)
        self.by_owner: dict[str, list[GPUReservation]] = {}
        for res in self.all:
            self.by_owner.setdefault(res.facts.owner, []).append(res)


def route_in(
    pod: PodProfile,
    pool: Pool,
    now: datetime,
    rules: MatchRules,
    *,
    no_shows: Set[int] = frozenset(),
    exclude: Set[str] = frozenset(),
) -> Route:
    """``route(pod, pool.all, …)``, reading only the owner's reservations (no side effects).

    The one case that reads the others is a pod whose owner holds none and that goes
    nowhere: its near-miss reasons are taken over the whole pool, as ``route`` does.
    """
    own = pool.by_owner.get(pod.owner, [])
    found = route(pod, own, now, rules, no_shows=no_shows, exclude=exclude)
    if found.path is Path.NONE and not own:
        return route(pod, pool.all, now, rules, no_shows=no_shows, exclude=exclude)
    return found
