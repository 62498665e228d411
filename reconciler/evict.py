"""Evictions when a booking is cancelled or reassigned mid-window (R27, R28).

Detection is a pure function of the caches (``evictions``), not of a change seen once,
so it is the same on the push path and the poll path (both only write the
GPUReservation object; the leader reacts to its cache), the same after a restart,
and idempotent by construction: a live, not-terminating pod carrying
``galends/booking-reference: res-<id>`` while ``res-<id>``'s window is open and

- the reservation is cancelled → ``ReservationCancelled``: first re-linked onto
  another open booking of the owner with budget when adoption is on
  (``reconciler.relink``, Event ``ReservationRelinked``), else evicted;
- the reservation is active but its owner is no longer the pod's namespace (the app
  reassigned it; only the owner's pods are ever admitted under it) →
  ``ReservationReassigned``: evicted so the new owner can use the window.

An eviction sends the Event, then deletes the pod with a uid precondition (a new pod
reusing the name is never hit). Its ledger hold goes when the pod leaves the cache
(ledger upkeep; a terminating pod keeps counting, as in R7).

*Not twice.* A pod already terminating or gone is not evicted again (the cache says
so; in-process, a pod being handled is skipped until its deletion shows).

*Never a pod that moved.* Before acting, the pod is re-read and must still carry the
reservation's reference (the cache may lag behind a re-link), under the re-linker's
lock, so an overstay re-link and an eviction never act on one pod at once. The Event
is not sent twice for one eviction: before sending, the pod's Events are read
(``involvedObject.uid`` + reason) — the Event itself is the durable marker, so a
restart between the Event and the delete deletes without a second Event.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar
from zoneinfo import ZoneInfo

from reconciler.caches import Caches, ledger_only
from reconciler.guarantees import GuaranteeKeeper
from reconciler.pods import PodView, project_pod
from reconciler.relink import Cause, Emit, Relinker
from reconciler.settings import ReconcilerSettings
from reconciler.upkeep import Dirty, passes
from shared import vocab
from shared.clock import Clock
from shared.errors import Conflict, KubeError, NotFound
from shared.logs import log
from shared.model import GPUReservation, State
from shared.policy.matching import MatchRules
from shared.policy.wording import clip, quoted, window
from shared.resources import EVENTS, PODS

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Eviction:
    """One pod to evict, and why."""

    pod: PodView
    reason: str
    reservation: GPUReservation


def eviction_reason(pod: PodView, res: GPUReservation, now: datetime) -> str | None:
    """R27/R28 for one admitted pod under ``res``; None when it stays.

    Only a pod ``res``'s ledger holds (a hold bound to its uid, or one of its claim) ran
    under the booking: any other pod naming it never did, and is the backstop's
    (``UnadmittedToleration``) — told nothing of a booking that is not its own."""
    facts = res.facts
    if pod.finished or pod.deleting or not facts.start <= now < facts.end:
        return None
    if not held_by(pod, res):
        return None
    if facts.state is State.CANCELLED:
        return vocab.REASON_RESERVATION_CANCELLED
    if pod.namespace != facts.owner:
        return vocab.REASON_RESERVATION_REASSIGNED
    return None


def held_by(pod: PodView, res: GPUReservation) -> bool:
    """``res``'s ledger holds ``pod``: a hold bound to its uid, or — for a pod of the
    booking's owner, whose hold upkeep binds by claim — one of its claim."""
    mine = pod.namespace == res.facts.owner and pod.claim is not None
    return any(h.pod_uid == pod.uid or (mine and h.claim == pod.claim) for h in res.holds)


def evictions(
    pods: Iterable[PodView], reservations: Mapping[str, GPUReservation], now: datetime
) -> list[Eviction]:
    """Every pod the caches say must go (no side effects), in a stable order."""
    found = []
    for pod in pods:
        res = reservations.get(pod.reference) if pod.reference else None
        reason = eviction_reason(pod, res, now) if res is not None else None
        if res is not None and reason is not None:
            found.append(Eviction(pod, reason, res))
    return sorted(found, key=lambda e: e.pod.key)


def message(ev: Eviction, zone: ZoneInfo | None) -> str:
    """The Event text a pod's owner reads (never names the other user)."""
    facts = ev.reservation.facts
    span = window(facts, zone)
    if ev.reason == vocab.REASON_RESERVATION_REASSIGNED:
        return (
            f"Reservation {facts.name} ({span}) was reassigned to another user; "
            "this pod ran under it and is being deleted."
        )
    why = f" (reason: {quoted(facts.cancel_reason)})" if facts.cancel_reason else ""
    return clip(
        f"Reservation {facts.name} ({span}) was cancelled{why}; "
        "this pod ran under it and is being deleted."
    )


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

    gateway: Any
    clock: Clock
    emit: Emit
    relinker: Relinker
    pods: Callable[[], Mapping[str, PodView]]
    reservations: Callable[[], Mapping[str, GPUReservation]]
    ready: Callable[[], bool]


class EvictingPass(ABC, Generic[D]):
    """What the evictor (R27/R28) and the admission backstop share: the leader's
    caches, a wake-up on changes, the uids already handled, the count of evictions by
    reason, and the pass itself (a template): once the caches are ready, the subclass's
    pure decision ``_due`` over the pods at one instant, then ``_handle`` for each pod
    not already handled (a pod stays marked as handled while its deletion has not shown
    in the cache; a failed one is tried again on the next pass).

    A pod event touches that pod: the next pass decides on the pods touched since the
    last one (``reconciler.upkeep.Dirty``); a reservation change and the tick decide on
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


class Evictor(EvictingPass[Eviction]):
    """Runs R27/R28 over the leader's caches."""

    def __init__(
        self,
        ctx: PassContext,
        *,
        zone: ZoneInfo | None,
        on_evicted: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(ctx, on_evicted=on_evicted)
        self._zone = zone

    def _due(
        self, chosen: Mapping[str, PodView], pods: Mapping[str, PodView], now: datetime
    ) -> list[Eviction]:
        return evictions(chosen.values(), self._reservations(), now)

    async def _still_due(self, ev: Eviction, now: datetime) -> Eviction | None:
        """``ev`` for the pod as it is now (re-read), or None when it no longer applies:
        the cache may lag behind a re-link that just moved the pod elsewhere."""
        try:
            pod = await self._reread(ev.pod.namespace, ev.pod.name)
        except KubeError as exc:
            log(_log, logging.WARNING, "evict.read_failed", pod=ev.pod.key, error=str(exc))
            return None
        if pod is None or pod.uid != ev.pod.uid or pod.reference != ev.reservation.name:
            return None
        if eviction_reason(pod, ev.reservation, now) != ev.reason:
            return None
        return Eviction(pod, ev.reason, ev.reservation)

    async def _act(self, ev: Eviction, now: datetime, taken: dict[str, int]) -> bool:
        if ev.reason == vocab.REASON_RESERVATION_CANCELLED:
            goal = self._relinker.plan(ev.pod, now, taken)
            if goal is not None:
                if await self._relinker.move(ev.pod, goal, Cause.REPLACED, now):
                    taken[goal.name] = taken.get(goal.name, 0) + ev.pod.gpus
                    return True
                if await self._still_due(ev, now) is None:
                    return False  # the failed move may have moved it after all
        return await self.evict(ev, now)

    async def evict(self, ev: Eviction, now: datetime) -> bool:
        """Event (unless already sent), then delete with a uid precondition."""
        text = message(ev, self._zone)
        if not await remove(self._gateway, self._emit, ev.pod, ev.reason, text, now):
            return False
        self._count(ev.reason)
        log(
            _log,
            logging.INFO,
            "evict.deleted",
            pod=ev.pod.key,
            reservation=ev.reservation.name,
            reason=ev.reason,
        )
        return True


async def remove(
    gateway: Any, emit: Emit, pod: PodView, reason: str, text: str, now: datetime
) -> bool:
    """Evict ``pod``: the Event of ``reason`` (unless one exists already: a restart
    between the Event and the delete sends no second one), then a delete with a uid
    precondition (a new pod reusing the name is never hit). False when the delete
    failed and must be retried; a pod already gone counts as removed."""
    if not await told(gateway, pod, reason):
        await emit(gateway, pod, reason, text, now=now)
    try:
        await gateway.delete(PODS, pod.name, pod.namespace, uid=pod.uid)
    except (NotFound, Conflict):
        pass  # gone already, or the name now belongs to another pod
    except KubeError as exc:
        log(_log, logging.WARNING, "evict.delete_failed", pod=pod.key, error=str(exc))
        return False
    return True


async def reread(gateway: Any, namespace: str, name: str, rules: MatchRules) -> PodView | None:
    """The pod as the API holds it now (the fresh read a pass decides on again before
    acting); None when it is gone or no longer one the reconciler watches
    (``project_pod``). Other read failures raise."""
    try:
        raw = await gateway.get(PODS, name, namespace)
    except NotFound:
        return None
    return project_pod(raw, rules)


async def told(gateway: Any, pod: PodView, reason: str) -> bool:
    """Whether an Event of ``reason`` already exists on this pod (a restart)."""
    try:
        found = await gateway.list_all(
            EVENTS, pod.namespace, field_selector=event_selector(pod, reason)
        )
    except KubeError as exc:
        log(_log, logging.INFO, "evict.events_unreadable", pod=pod.key, error=str(exc))
        return False
    return bool(found.items)


# --- wiring ---------------------------------------------------------------------------

GUARANTEES_TASK = "guarantees"
RELINK_TASK = "relink"
EVICT_TASK = "evictions"


class Upholders:
    """The guarantee keeper, the re-linker and the evictor of one leader term, fed by
    the caches: a reservation change wakes all three for a pass over every pod (the
    keeper and the evictor not when only its ledger moved: they decide on facts); a
    change of an admitted pod wakes all three for that pod."""

    def __init__(
        self,
        caches: Caches,
        gateway: Any,
        settings: ReconcilerSettings,
        clock: Clock,
        emit: Emit,
        on_evicted: Callable[[str], None] | None = None,
    ) -> None:
        pods, by_name, ready = (lambda: caches.pods.items), caches.by_name, caches.ready
        rules, zone = settings.rules, settings.common.display_timezone
        self.keeper = GuaranteeKeeper(
            gateway, clock, pods, by_name, ready, use_group=rules.use_group
        )
        self.relinker = Relinker(
            gateway,
            settings.common.namespace,
            clock,
            emit,
            pods,
            by_name,
            ready,
            rules=rules,
            enabled=settings.adoption_enabled,
            zone=zone,
            retry_s=float(settings.queue_interval_s),
        )
        #: What the evictor and the admission backstop read and act through.
        self.context = PassContext(gateway, clock, emit, self.relinker, pods, by_name, ready)
        self.evictor = Evictor(self.context, zone=zone, on_evicted=on_evicted)
        self._tick_s = float(settings.queue_interval_s)
        caches.pods.listeners.append(self._pod_changed)
        caches.reservations.listeners.append(self._reservation_changed)

    def loops(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """The leader's loops."""
        tick = self._tick_s
        return [
            (GUARANTEES_TASK, lambda: self.keeper.run(tick)),
            (RELINK_TASK, lambda: self.relinker.run(tick)),
            (EVICT_TASK, lambda: self.evictor.run(tick)),
        ]

    def _pod_changed(self, key: str, old: PodView | None, new: PodView | None) -> None:
        if new is not None and new.reference is not None:
            self.keeper.touch_pod(key)
            self.relinker.touch(key)
            self.evictor.touch(key)

    def _reservation_changed(
        self, key: str, old: GPUReservation | None, new: GPUReservation | None
    ) -> None:
        self.relinker.touch()  # its room: a ledger change may make space for a re-link
        if not ledger_only(old, new):
            self.keeper.touch_all()
            self.evictor.touch()
