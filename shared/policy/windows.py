"""Window arithmetic and the chained runtime guarantee (R8–R10).

All instants are timezone-aware UTC. A reservation's window is half-open:
``[start, end)``.

The *guarantee* of a pod admitted under reservation A ends at A's end, extended by
each following booking that starts exactly at the previous link's end and shares A's
owner, class label, GPU count and — when the group feature is on — group. Each link
must still have time left, be active and not be a declared no-show. When several
bookings abut at the same instant the longest one is taken. The guarantee is computed
live and can grow when an abutting booking appears.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from datetime import datetime, timedelta

from shared.model import Kind, ReservationFacts, State


def is_open(facts: ReservationFacts, now: datetime) -> bool:
    """Active and ``start <= now < end``."""
    return facts.state is State.ACTIVE and facts.start <= now < facts.end


def has_time_left(facts: ReservationFacts, now: datetime) -> bool:
    """The window has not ended: ``end > now`` (R6)."""
    return facts.end > now


def expired(facts: ReservationFacts, now: datetime) -> bool:
    """A queue entry for this window is dropped: strictly ``now > end`` (R8)."""
    return now > facts.end


def within_horizon(facts: ReservationFacts, now: datetime, horizon: timedelta) -> bool:
    """Opens no later than ``now + horizon`` (a horizon of 0 means open now only)."""
    return facts.start <= now + horizon and has_time_left(facts, now)


Kin = tuple[str, str, int]


def kin_key(facts: ReservationFacts) -> Kin:
    """What every link of a chain shares with its anchor under any rules: owner, class
    label and GPU count (``_links`` compares the group too when the feature is on)."""
    return (facts.owner, facts.gpu_class, facts.gpu_count)


def kin(pool: Iterable[ReservationFacts]) -> dict[Kin, list[ReservationFacts]]:
    """``pool`` grouped by ``kin_key``. A chain walked over its anchor's group alone is
    the chain walked over the whole pool, so a pass computing many guarantees groups
    the pool once and each walk reads a few bookings, not every reservation (the walk
    over the whole pool, once per reservation in use, was O(reservations²))."""
    groups: dict[Kin, list[ReservationFacts]] = {}
    for facts in pool:
        groups.setdefault(kin_key(facts), []).append(facts)
    return groups


def _links(
    anchor: ReservationFacts,
    bookings: Iterable[ReservationFacts],
    now: datetime,
    use_group: bool,
    no_shows: Set[int],
) -> list[ReservationFacts]:
    """Bookings that may extend ``anchor``'s chain (same owner/class/count/group)."""
    return [
        b
        for b in bookings
        if b.kind is Kind.BOOKING
        and b.state is State.ACTIVE
        and b.id != anchor.id
        and b.id not in no_shows
        and b.owner == anchor.owner
        and b.gpu_class == anchor.gpu_class
        and b.gpu_count == anchor.gpu_count
        and (not use_group or b.group == anchor.group)
        and b.end > max(now, b.start)
    ]


def chain(
    anchor: ReservationFacts,
    bookings: Iterable[ReservationFacts],
    now: datetime,
    *,
    use_group: bool,
    no_shows: Set[int] = frozenset(),
) -> list[ReservationFacts]:
    """The links extending ``anchor``'s guarantee, in order (``anchor`` excluded).

    Follows abutting links (``link.start == previous end``), taking the longest when
    several start at the same instant. Every link ends after it starts, so the walk
    always terminates.
    """
    by_start: dict[datetime, ReservationFacts] = {}
    for link in _links(anchor, bookings, now, use_group, no_shows):
        best = by_start.get(link.start)
        if best is None or link.end > best.end:
            by_start[link.start] = link
    links: list[ReservationFacts] = []
    end = anchor.end
    while end in by_start:
        links.append(by_start[end])
        end = by_start[end].end
    return links


def guarantee_end(
    anchor: ReservationFacts,
    bookings: Iterable[ReservationFacts],
    now: datetime,
    *,
    use_group: bool,
    no_shows: Set[int] = frozenset(),
) -> datetime:
    """The end of ``anchor``'s guarantee chain (R9); no side effects."""
    links = chain(anchor, bookings, now, use_group=use_group, no_shows=no_shows)
    return links[-1].end if links else anchor.end


def runtime_limit_seconds(until: datetime, now: datetime, *, best_effort: bool = False) -> int:
    """``pod-runtime-limit-seconds``: whole seconds to ``until``, at least 1 (R10).

    A best-effort pod has no guarantee: 0.
    """
    if best_effort:
        return 0
    return max(1, int((until - now).total_seconds()))
