"""Evictions when a booking is cancelled or reassigned mid-window (R27, R28).

Detection is a pure function of the caches (``evictions``), not of a change seen once,
so it is the same on the push path and the poll path (both only write the
GPUReservation object; the leader reacts to its cache), the same after a restart,
and idempotent by construction: a live, not-terminating pod carrying
``galends/booking-reference: res-<id>`` while ``res-<id>``'s window is open and

- the reservation is cancelled → ``ReservationCancelled``: first re-linked onto
  another open booking of the owner with budget when adoption is on
  (``reconciler.admission.relink``, Event ``ReservationRelinked``), else evicted;
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
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from reconciler.admission.adoption import Cause
from reconciler.admission.evicting import (
    EvictingPass,
    HoldIndex,
    PassContext,
    eviction_reason,
    hold_index,
    remove,
)
from reconciler.admission.guarantees import GuaranteeKeeper
from reconciler.admission.relink import Relinker, frees_room
from reconciler.base.caches import Caches, ledger_only
from reconciler.base.component import Ground
from reconciler.base.events import Emit
from reconciler.base.kube import KubeWriter
from reconciler.base.pods import PodView
from reconciler.base.settings import ReconcilerSettings
from shared import vocab
from shared.clock import Clock
from shared.errors import KubeError
from shared.logs import log
from shared.model import GPUReservation
from shared.policy.wording import clip, quoted, window

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Eviction:
    """One pod to evict, and why."""

    pod: PodView
    reason: str
    reservation: GPUReservation


def evictions(
    pods: Iterable[PodView], reservations: Mapping[str, GPUReservation], now: datetime
) -> list[Eviction]:
    """Every pod the caches say must go (no side effects), in a stable order."""
    found = []
    indexes: dict[str, HoldIndex] = {}  # each reservation's holds, indexed once
    for pod in pods:
        res = reservations.get(pod.reference) if pod.reference else None
        if res is None:
            continue
        index = indexes.get(res.name)
        if index is None:
            index = indexes[res.name] = hold_index(res)
        reason = eviction_reason(pod, res, now, index)
        if reason is not None:
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
        if not await remove(
            self._gateway, self._emit, ev.pod, ev.reason, text, now, grace_s=self._grace_s
        ):
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


# --- wiring ---------------------------------------------------------------------------

GUARANTEES_TASK = "guarantees"
RELINK_TASK = "relink"
EVICT_TASK = "evictions"


class Upholders:
    """The guarantee keeper, the re-linker and the evictor of one leader term, fed by
    the caches: a reservation change wakes all three for a pass over every pod — when
    only its ledger moved, the keeper and the evictor not (they decide on facts), the
    re-linker only when GPUs were freed (``frees_room``); a change of an admitted pod
    wakes all three for that pod."""

    def __init__(
        self,
        caches: Caches,
        gateway: KubeWriter,
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
        self.context = PassContext(
            gateway,
            clock,
            emit,
            self.relinker,
            pods,
            by_name,
            ready,
            settings.preemption.grace_s,
        )
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
        facts_moved = not ledger_only(old, new)
        if facts_moved or frees_room(old, new):
            self.relinker.touch()  # a ledger change matters to it only when it frees room
        if facts_moved:
            self.keeper.touch_all()
            self.evictor.touch()


def setup(ground: Ground) -> Upholders:
    """The guarantee keeper, the re-linker and the evictor of one leader term,
    subscribed to the pod and reservation caches."""
    evictions = ground.queue_metrics.evictions
    return Upholders(
        ground.caches,
        ground.gateway,
        ground.settings,
        ground.clock,
        ground.emit,
        on_evicted=lambda reason: evictions.labels(reason).inc(),
    )
