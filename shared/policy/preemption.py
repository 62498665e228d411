"""Demand-driven preemption planning (R30–R32), node-aware; no side effects.

Terms:

- *boundary* — the start ``S`` of an active booking (kind ``booking``; leases and
  stubs never create one) with ``now - lead < S <= now + lead``. Phase ``A`` while
  ``S > now`` (reclaim ahead of the start), phase ``B`` once ``S <= now`` (catches
  pods whose own window or guarantee ended exactly at ``S``). The shell evaluates
  each (boundary, phase) at most once.
- *holder* — a live GPU pod admitted under a reservation, bound to a node, not
  terminating (``Holder``). Its *claims* are the reservation names it covers: the one
  it was admitted under plus every link of its guarantee chain.
- *demand* of a booking ``r`` at its start — ``gpu_count(r)`` minus the GPUs of the
  holders claiming ``r`` (own id or chain). Counted once: R31's seed subtracted pods
  admitted under ``r`` twice (through the ledger's "available" and again through the
  chain sum); here the pods are the only measure, so a pod is subtracted once.
- *room* — per class the inventory's figures (``Room``): ``free = total - used``
  (negative when overcommitted) and the per-node free GPUs of the included nodes.
- *eligible* — a holder of the class, on an included node, with more than 0 GPUs and
  past its guarantee (none, or ending at or before ``now``). Never a pod inside its
  guarantee: a shortfall it cannot cover stays unmet.

Planning a boundary consumes room for every booking starting there, largest demand
first. A booking needing ``d >= 2`` GPUs that fits on one node needs a *block* of ``d``
free GPUs on one node: the best-fitting node with room is taken; otherwise the node
whose block is freed by killing the fewest GPUs (then fewest pods) is chosen and a
``Need`` names it. Other demand is counted class-wide (one ``Need`` per class). A
``Need`` is met by victims the app chooses (delegation, §2.8) or by ``local_pick``;
``Tally.kill`` returns their GPUs to the room.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from shared.model import Kind, ReservationFacts, State


class Phase(StrEnum):
    """Before the boundary (``A``) or at/after it (``B``)."""

    AHEAD = "A"
    AT = "B"


@dataclass(frozen=True)
class Holder:
    """A live admitted GPU pod as preemption sees it."""

    uid: str
    namespace: str
    name: str
    gpu_class: str
    gpus: int
    node: str
    reservation_id: int
    #: The live guarantee end (R9); None when there is none (R10: overstay).
    guarantee_end: datetime | None
    #: Reservation names (``res-<id>``) this pod covers: its own and its chain's.
    claims: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def past_guarantee(self, at: datetime) -> bool:
        """No guarantee, or one ending at or before ``at``."""
        return self.guarantee_end is None or self.guarantee_end <= at


@dataclass(frozen=True)
class Room:
    """One class's physical figures, taken from the node inventory."""

    total: int
    used: int
    #: Included node → its GPUs, and → its free GPUs (``max(0, gpus - used)``).
    node_gpus: Mapping[str, int] = field(default_factory=dict)
    node_free: Mapping[str, int] = field(default_factory=dict)

    @property
    def free(self) -> int:
        """``total - used``: negative when the class is overcommitted."""
        return self.total - self.used


@dataclass(frozen=True)
class Need:
    """GPUs to reclaim in one class for one boundary, and from whom."""

    gpu_class: str
    gpus: int
    pool: tuple[Holder, ...]
    boundary: datetime
    #: The node whose block must be freed (None: anywhere in the class).
    node: str | None = None
    #: The planner's own choice for a block (fewest GPUs); empty for class-wide needs.
    chosen: tuple[Holder, ...] = ()


def without(rooms: Mapping[str, Room], gone: Iterable[Holder]) -> dict[str, Room]:
    """``rooms`` once the pods ``gone`` have left: their GPUs free again, class-wide and
    on their nodes."""
    freed: dict[str, int] = {}
    on_node: dict[tuple[str, str], int] = {}
    for h in gone:
        freed[h.gpu_class] = freed.get(h.gpu_class, 0) + h.gpus
        on_node[h.gpu_class, h.node] = on_node.get((h.gpu_class, h.node), 0) + h.gpus
    return {
        c: Room(
            r.total,
            r.used - freed.get(c, 0),
            r.node_gpus,
            {n: free + on_node.get((c, n), 0) for n, free in r.node_free.items()},
        )
        for c, r in rooms.items()
    }


# --- boundaries and demand --------------------------------------------------------


def is_booking(facts: ReservationFacts) -> bool:
    """Only active bookings create boundaries and demand."""
    return facts.kind is Kind.BOOKING and facts.state is State.ACTIVE and bool(facts.owner)


def boundaries(
    bookings: Iterable[ReservationFacts], now: datetime, lead: timedelta
) -> list[datetime]:
    """Distinct booking starts ``S`` with ``now - lead < S <= now + lead``, ascending."""
    return sorted(
        {b.start for b in bookings if is_booking(b) and now - lead < b.start <= now + lead}
    )


def phase_of(boundary: datetime, now: datetime) -> Phase:
    """``A`` while the boundary is ahead, ``B`` from it on."""
    return Phase.AHEAD if boundary > now else Phase.AT


def claimed(holders: Iterable[Holder]) -> dict[str, int]:
    """GPUs of live pods per reservation name they cover (own id and chain)."""
    total: dict[str, int] = {}
    for h in holders:
        for name in h.claims:
            total[name] = total.get(name, 0) + h.gpus
    return total


def demands_at(
    boundary: datetime, bookings: Iterable[ReservationFacts], covered: Mapping[str, int]
) -> dict[str, list[int]]:
    """Per class, the unmet GPUs of each booking starting exactly at ``boundary``."""
    found: dict[str, list[int]] = {}
    for b in bookings:
        if is_booking(b) and b.start == boundary:
            need = max(0, b.gpu_count - covered.get(b.name, 0))
            if need:
                found.setdefault(b.gpu_class, []).append(need)
    return found


def eligible(holders: Iterable[Holder], room: Room | None, now: datetime) -> list[Holder]:
    """Pods that may be preempted at ``now`` (on an included node, past guarantee)."""
    if room is None:
        return []
    return [h for h in holders if h.gpus > 0 and h.node in room.node_gpus and h.past_guarantee(now)]


# --- the working tally of one sweep ----------------------------------------------------


class Tally:
    """The room of every class while one sweep plans: consumed by demand, refilled by
    kills. ``doomed`` holds the uids chosen to die this sweep."""

    def __init__(self, rooms: Mapping[str, Room]) -> None:
        self.free = {c: r.free for c, r in rooms.items()}
        self.node_free = {c: dict(r.node_free) for c, r in rooms.items()}
        self.node_gpus = {c: dict(r.node_gpus) for c, r in rooms.items()}
        self.doomed: set[str] = set()

    def kill(self, victims: Iterable[Holder]) -> int:
        """Mark victims doomed and return their GPUs to the room; GPUs freed."""
        freed = 0
        for v in victims:
            if v.uid in self.doomed:
                continue
            self.doomed.add(v.uid)
            freed += v.gpus
            if v.gpu_class in self.free:
                self.free[v.gpu_class] += v.gpus
                nodes = self.node_free[v.gpu_class]
                if v.node in nodes:
                    nodes[v.node] += v.gpus
        return freed

    def settle(self) -> None:
        """Forgive every deficit (after a boundary evaluated in an earlier sweep: its
        unmet need is not carried into the next boundary's kills)."""
        for cls, free in self.free.items():
            self.free[cls] = max(0, free)
            nodes = self.node_free[cls]
            for node, room in nodes.items():
                nodes[node] = max(0, room)

    def alive(self, pool: Iterable[Holder]) -> list[Holder]:
        return [h for h in pool if h.uid not in self.doomed]


def plan_boundary(
    boundary: datetime,
    demands: Mapping[str, Sequence[int]],
    pools: Mapping[str, Sequence[Holder]],
    tally: Tally,
) -> list[Need]:
    """The needs of one boundary; consumes the tally's room for every demand.

    ``pools`` holds each class's eligible pods. A class unknown to the inventory has
    no room: its demand is planned against zero and its pool is empty (unmet).
    """
    needs: list[Need] = []
    for cls in sorted(demands):
        if cls not in tally.free:
            total = sum(demands[cls])
            needs.append(Need(cls, total, (), boundary))
            continue
        pool = tally.alive(pools.get(cls, ()))
        blocks = 0
        for d in sorted(demands[cls], reverse=True):
            block = _block(cls, d, pool, tally, boundary)
            if block is None:
                tally.free[cls] -= d
            elif block.gpus > 0:
                needs.append(block)
                blocks += block.gpus
                pool = [h for h in pool if h.node != block.node]
        # What the blocks' kills will return does not need a second, class-wide kill.
        deficit = -(tally.free[cls] + blocks)
        if deficit > 0:
            needs.append(Need(cls, deficit, tuple(pool), boundary))
    return needs


def _block(cls: str, d: int, pool: list[Holder], tally: Tally, boundary: datetime) -> Need | None:
    """A one-node block of ``d`` GPUs (consumed); None when ``d`` is counted class-wide."""
    gpus = tally.node_gpus[cls]
    if d < 2 or not gpus or d > max(gpus.values()):
        return None
    free = tally.node_free[cls]
    fits = [n for n in free if free[n] >= d]
    if fits:
        node = min(fits, key=lambda n: (free[n], n))
        _consume(tally, cls, node, d)
        return Need(cls, 0, (), boundary, node)
    best: tuple[int, int, str, tuple[Holder, ...]] | None = None
    for node in sorted(gpus):
        on_node = [h for h in pool if h.node == node]
        chosen = fewest_gpus(on_node, d - free.get(node, 0))
        if chosen is None:
            continue
        rank = (sum(h.gpus for h in chosen), len(chosen), node, chosen)
        if best is None or rank[:3] < best[:3]:
            best = rank
    if best is None:
        return None
    _, _, node, chosen = best
    deficit = d - free.get(node, 0)
    _consume(tally, cls, node, d)
    here = tuple(h for h in pool if h.node == node)
    return Need(cls, deficit, here, boundary, node, chosen)


def _consume(tally: Tally, cls: str, node: str, d: int) -> None:
    tally.node_free[cls][node] = tally.node_free[cls].get(node, 0) - d
    tally.free[cls] -= d


def fewest_gpus(pool: Sequence[Holder], target: int) -> tuple[Holder, ...] | None:
    """The subset of ``pool`` reaching ``target`` GPUs with the fewest GPUs (then the
    fewest pods); None when the whole pool falls short. Exact (a small knapsack over
    GPU sums: one node holds few pods)."""
    if target <= 0:
        return ()
    if sum(h.gpus for h in pool) < target:
        return None
    # best[s] = the smallest-pod subset summing exactly to s (sums capped at the pool's).
    best: dict[int, tuple[Holder, ...]] = {0: ()}
    for h in sorted(pool, key=lambda p: p.uid):
        for s, subset in list(best.items()):
            t = s + h.gpus
            if t not in best or len(best[t]) > len(subset) + 1:
                best[t] = (*subset, h)
    reach = min(s for s in best if s >= target)
    return best[reach]


# --- victim selection -------------------------------------------------------------


def local_pick(need: Need, alive: Sequence[Holder], rng: random.Random) -> list[Holder]:
    """Uniform-random greedy (R32): shuffle the pool, take until the need is reached
    (the last pick may overshoot). A block uses the planner's fewest-GPU choice."""
    if need.chosen:
        return [h for h in need.chosen if h in alive] or []
    pool = [h for h in need.pool if h in alive]
    rng.shuffle(pool)
    picked: list[Holder] = []
    got = 0
    for h in pool:
        if got >= need.gpus:
            break
        picked.append(h)
        got += h.gpus
    return picked


def accept(need: Need, answer: Iterable[str]) -> list[Holder]:
    """The app's victims for ``need``: only pods it was offered, each once."""
    offered = {h.uid: h for h in need.pool}
    seen: dict[str, Holder] = {}
    for uid in answer:
        if uid in offered and uid not in seen:
            seen[uid] = offered[uid]
    return list(seen.values())


def unmet(need: Need, victims: Iterable[Holder]) -> int:
    """GPUs of ``need`` the victims leave uncovered."""
    return max(0, need.gpus - sum(v.gpus for v in victims))
