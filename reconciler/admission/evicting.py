"""Removing a pod from its booking: the pass that the evictor (R27, R28) and the
proof-of-admission backstop (DESIGN §10) share.

``eviction_reason`` is the pure R27/R28 verdict for one admitted pod; ``EvictingPass``
is the template of an evicting loop (decide over the caches at one instant, re-read
each pod and decide again under the re-linker's lock, act once); ``remove`` sends the
Event (once: ``told`` reads the pod's Events first, so a restart never repeats it) and
deletes the pod with a uid precondition.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from reconciler.admission.relink import Relinker
from reconciler.base.events import Emit
from reconciler.base.kube import KubeWriter
from reconciler.base.loops import Dirty, passes
from reconciler.base.pods import PodView, project_pod
from shared import vocab
from shared.clock import Clock
from shared.errors import Conflict, KubeError, NotFound
from shared.logs import log
from shared.model import GPUReservation, Hold, State
from shared.policy.matching import MatchRules
from shared.resources import EVENTS, PODS

_log = logging.getLogger(__name__)


def eviction_reason(
    pod: PodView, res: GPUReservation, now: datetime, index: HoldIndex | None = None
) -> str | None:
    """R27/R28 for one admitted pod under ``res``; None when it stays. ``index``:
    ``res``'s ``HoldIndex``, for a pass that decides on many of its pods.

    Only a pod ``res``'s ledger holds (a hold bound to its uid, or one of its claim) ran
    under the booking: any other pod naming it never did, and is the backstop's
    (``UnadmittedToleration``) — told nothing of a booking that is not its own."""
    facts = res.facts
    if pod.finished or pod.deleting or not facts.start <= now < facts.end:
        return None
    if not held_by(pod, res, index):
        return None
    if facts.state is State.CANCELLED:
        return vocab.REASON_RESERVATION_CANCELLED
    if pod.namespace != facts.owner:
        return vocab.REASON_RESERVATION_REASSIGNED
    return None


@dataclass(frozen=True)
class HoldIndex:
    """One ledger's holds by what finds them (``hold_index``): a pass deciding on many
    pods of one reservation looks each up instead of scanning every hold per pod."""

    #: The uids holds are bound to.
    uids: frozenset[str]
    #: Claim key → its hold (the last, as ``shared.ledger.rebuild`` finds it).
    claims: Mapping[str, Hold]
    #: No two holds share a claim (every ledger the product writes).
    distinct: bool
    #: Uid → the claim of the first hold bound to it (the one ``rebuild`` keeps).
    bindings: Mapping[str, str]

    @property
    def bound(self) -> Set[str] | None:
        """The uids ``rebuild`` surely keeps held (``reconciler.backstop.rules.
        bound_uids``): every bound one when the claims are distinct, else None."""
        return self.bindings.keys() if self.distinct else None


#: The last two ``hold_index`` of each reservation name read (the last first), with the
#: objects they were made of: a cached reservation is one object until it changes, and
#: the passes of every pod event under it — and a change's listeners, reading the old
#: and the new object — read the same index (checked by identity, so never a stale
#: one). Emptied when it reaches ``_INDEXES_MAX`` names (reservations come and go).
_INDEXES: dict[str, list[tuple[GPUReservation, HoldIndex]]] = {}
_INDEXES_MAX = 10_000


def hold_index(res: GPUReservation) -> HoldIndex:
    """``res``'s holds indexed (remembered for the object; the last two of a name)."""
    kept = _INDEXES.get(res.name, [])
    for made_of, known in kept:
        if made_of is res:
            if kept[0][0] is not res:  # the one read last is kept first
                _INDEXES[res.name] = [(res, known), kept[0]]
            return known
    claims = {h.claim: h for h in res.holds}
    uids = frozenset(h.pod_uid for h in res.holds if h.pod_uid is not None)
    bindings = {h.pod_uid: h.claim for h in reversed(res.holds) if h.pod_uid}  # the first wins
    index = HoldIndex(uids, claims, len(claims) == len(res.holds), bindings)
    if len(_INDEXES) >= _INDEXES_MAX:
        _INDEXES.clear()
    _INDEXES[res.name] = [(res, index), *kept[:1]]
    return index


def held_by(pod: PodView, res: GPUReservation, index: HoldIndex | None = None) -> bool:
    """``res``'s ledger holds ``pod``: a hold bound to its uid, or — for a pod of the
    booking's owner, whose hold upkeep binds by claim — one of its claim. ``index``:
    ``hold_index(res)``, when the caller has it."""
    mine = pod.namespace == res.facts.owner and pod.claim is not None
    if index is not None:
        return pod.uid in index.uids or (mine and pod.claim in index.claims)
    return any(h.pod_uid == pod.uid or (mine and h.claim == pod.claim) for h in res.holds)


def event_selector(pod: PodView, reason: str) -> str:
    """The field selector of ``pod``'s Events of ``reason``."""
    return f"involvedObject.uid={pod.uid},reason={reason}"


class Due(Protocol):
    """A decision about one pod (an ``Eviction``, a backstop ``Finding``)."""

    @property
    def pod(self) -> PodView: ...


D = TypeVar("D", bound=Due)


@dataclass(frozen=True)
class PassContext:
    """What an evicting pass reads and acts through: the leader's caches and the
    re-linker whose lock it holds while it decides on one pod and acts."""

    gateway: KubeWriter
    clock: Clock
    emit: Emit
    relinker: Relinker
    pods: Callable[[], Mapping[str, PodView]]
    reservations: Callable[[], Mapping[str, GPUReservation]]
    ready: Callable[[], bool]
    #: EVICTION_GRACE_SECONDS: the longest grace a pod it deletes gets.
    grace_s: int


class EvictingPass(ABC, Generic[D]):
    """What the evictor (R27/R28) and the admission backstop share: the leader's
    caches, a wake-up on changes, the uids already handled, the count of evictions by
    reason, and the pass itself (a template): once the caches are ready, the subclass's
    pure decision ``_due`` over the pods at one instant, then ``_handle`` for each pod
    not already handled (a pod stays marked as handled while its deletion has not shown
    in the cache; a failed one is tried again on the next pass).

    A pod event touches that pod: the next pass decides on the pods touched since the
    last one (``reconciler.base.loops.Dirty``); a reservation change and the tick decide on
    every pod."""

    def __init__(
        self, ctx: PassContext, *, on_evicted: Callable[[str], None] | None = None
    ) -> None:
        self._gateway = ctx.gateway
        self._clock = ctx.clock
        self._emit = ctx.emit
        self._relinker = ctx.relinker
        self._pods = ctx.pods
        self._reservations = ctx.reservations
        self._ready = ctx.ready
        self._grace_s = ctx.grace_s
        self._on_evicted = on_evicted
        self.dirty = Dirty()
        #: uids handled by this process whose deletion the cache has not shown yet (→
        #: the pod's cache key).
        self._handled: dict[str, str] = {}
        self.evicted: dict[str, int] = {}
        #: Passes run, and the pods the last one decided on (what a pass cost).
        self.passes = 0
        self.looked = 0

    def touch(self, key: str | None = None) -> None:
        """Pod ``key`` changed (None: something every pod depends on): look again soon."""
        self.dirty.touch(key)

    async def run(self, tick_s: float) -> None:
        """Run the pass on changes, and every ``tick_s`` as a backstop."""
        await passes(self._ready, self.dirty, self.once, self._clock, tick_s)

    async def once(self, keys: set[str] | None = None) -> int:
        """One pass over the pods ``keys`` names (None: every pod); the number of pods
        acted on."""
        if not self._ready():
            return 0
        self.passes += 1
        now = self._clock.now()
        pods = self._pods()
        self._forget_gone(pods)
        chosen = pods if keys is None else {k: pods[k] for k in keys if k in pods}
        # GPUs this pass moved onto each reservation (the cache does not show them yet).
        taken: dict[str, int] = {}
        done = 0
        due = self._due(chosen, pods, now)
        self.looked = len(chosen)
        for item in due:
            uid = item.pod.uid
            if uid in self._handled:
                continue
            self._handled[uid] = item.pod.key
            if await self._handle(item, now, taken):
                done += 1
            else:
                self._handled.pop(uid, None)  # retried on the next pass
        return done

    @abstractmethod
    def _due(
        self, chosen: Mapping[str, PodView], pods: Mapping[str, PodView], now: datetime
    ) -> list[D]:
        """The decision: every pod of ``chosen`` (some or all of ``pods``, the whole
        cache) to act on, in a stable order (no side effects)."""

    async def _handle(self, item: D, now: datetime, taken: dict[str, int]) -> bool:
        """Decide on ``item`` again from fresh reads and act on what still holds, under
        the re-linker's lock (a lagging cache must never evict: the pod may have been
        re-linked, its reservation changed; a re-link and an eviction never act on one
        pod at once). True when the pod was evicted (or moved away)."""
        async with self._relinker.lock:
            fresh = await self._still_due(item, now)
            if fresh is None:
                return False  # moved, gone or changed since the cache saw it
            return await self._act(fresh, now, taken)

    async def _reread(self, namespace: str, name: str) -> PodView | None:
        """``reread`` with this pass's gateway and matching rules."""
        return await reread(self._gateway, namespace, name, self._relinker.rules)

    @abstractmethod
    async def _still_due(self, item: D, now: datetime) -> D | None:
        """``item`` decided again on fresh reads; None when it no longer holds or a
        read failed."""

    @abstractmethod
    async def _act(self, item: D, now: datetime, taken: dict[str, int]) -> bool:
        """Act on one pod the fresh reads confirmed (the lock is held)."""

    def _forget_gone(self, pods: Mapping[str, PodView]) -> None:
        """Drop handled uids the cache no longer shows alive (only the handled pods are
        looked up: a pass over a few touched pods must not walk the cache)."""
        for uid, key in list(self._handled.items()):
            pod = pods.get(key)
            if pod is None or pod.uid != uid or pod.deleting:
                del self._handled[uid]

    def _count(self, reason: str) -> None:
        """One more eviction of ``reason``."""
        self.evicted[reason] = self.evicted.get(reason, 0) + 1
        if self._on_evicted is not None:
            self._on_evicted(reason)


async def remove(
    gateway: KubeWriter,
    emit: Emit,
    pod: PodView,
    reason: str,
    text: str,
    now: datetime,
    *,
    grace_s: int,
) -> bool:
    """Evict ``pod``: the Event of ``reason`` (unless one exists already: a restart
    between the Event and the delete sends no second one), then a delete with a uid
    precondition (a new pod reusing the name is never hit) and a grace of at most
    ``grace_s`` (a pod's own grace, hours long, would keep it running — and its GPUs
    taken — that long). False when the delete failed and must be retried; a pod already
    gone counts as removed."""
    if not await told(gateway, pod, reason):
        await emit(gateway, pod, reason, text, now=now)
    try:
        grace = pod.stop_grace(grace_s)
        await gateway.delete(PODS, pod.name, pod.namespace, grace_period_s=grace, uid=pod.uid)
    except (NotFound, Conflict):
        pass  # gone already, or the name now belongs to another pod
    except KubeError as exc:
        log(_log, logging.WARNING, "evict.delete_failed", pod=pod.key, error=str(exc))
        return False
    return True


async def reread(
    gateway: KubeWriter, namespace: str, name: str, rules: MatchRules
) -> PodView | None:
    """The pod as the API holds it now (the fresh read a pass decides on again before
    acting); None when it is gone or no longer one the reconciler watches
    (``project_pod``). Other read failures raise."""
    try:
        raw = await gateway.get(PODS, name, namespace)
    except NotFound:
        return None
    return project_pod(raw, rules)


async def told(gateway: KubeWriter, pod: PodView, reason: str) -> bool:
    """Whether an Event of ``reason`` already exists on this pod (a restart)."""
    try:
        found = await gateway.list_all(
            EVENTS, pod.namespace, field_selector=event_selector(pod, reason)
        )
    except KubeError as exc:
        log(_log, logging.INFO, "evict.events_unreadable", pod=pod.key, error=str(exc))
        return False
    return bool(found.items)
