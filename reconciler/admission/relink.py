"""Re-linking an admitted pod onto another booking of its owner (R25–R26, R40).

*Adoption* (``POD_ADOPTION_ENABLED``): a pod past its guarantee (R10: no live
guarantee, or one that has ended) — but not one whose booking was cancelled mid-window,
which the eviction path re-links with its own Event —, bound to a node, not leaving,
with GPUs, whose owner
holds a *different* open booking of its class (and group, when groups are on) with
budget for it, is moved onto that booking. The same move carries the pods of a
booking cancelled mid-window forward (``reconciler.queue.evict`` tries it before evicting).

One move, in this order (each step only after the previous one succeeded):

1. ``ledger.claim`` on the new reservation — the one admission path, so the budget is
   never exceeded; the hold is written ``announced`` (this module sends the Events);
2. one pod JSON Patch: ``test`` the old booking reference, then the annotation writer's
   set (``admission_annotations``: booking-reference, claim, guarantee and re-stamped
   reservation facts; ``admitted-at`` untouched). A refused patch releases the new
   hold; one whose answer was lost is checked by re-reading the pod (applied: the move
   goes on; maybe still in flight: the new hold stays for upkeep to bind or expire);
   adoption tries a pod whose patch failed again only once it changed, or after the
   ``QUEUE_PROCESSOR_INTERVAL`` tick;
3. the old reservation's hold of the pod is released;
4. a fresh ``RuntimeGuaranteed``, then ``OverstayRelinked`` (cause overstay) or
   ``ReservationRelinked`` (cause: its booking was cancelled mid-window).

The choice of target is pure (``target``): among the matching open bookings with room
(minus what this pass already took), the one whose chained guarantee ends last, then
the lowest id. Only pods that already carry their class's toleration are moved (every
pod admitted under a reservation of its class does); tolerations are never edited.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from reconciler.admission.adoption import (
    Cause,
    cancelled_in_window,
    movable,
    overstaying,
    relink_reason,
    relinked_message,
    target,
)
from reconciler.admission.guarantees import patch_ops
from reconciler.base.events import Emit
from reconciler.base.kube import KubeWriter
from reconciler.base.loops import JUST_AFTER, Beat, Dirty, until_ready
from reconciler.base.pods import PodView
from shared import ledger, vocab
from shared.clock import Clock, MonotonicClock, SystemMonotonic
from shared.errors import KubeError, ServerError
from shared.logs import log
from shared.model import GPUReservation, Kind, claim_key
from shared.policy.annotations import admission_annotations
from shared.policy.matching import MatchRules
from shared.policy.windows import guarantee_end
from shared.policy.wording import runtime_guaranteed
from shared.resources import PODS

_log = logging.getLogger(__name__)
#: Seconds one ledger call of a re-link may take.
LEDGER_DEADLINE_S = 5.0


# --- pure rules -----------------------------------------------------------------------


def frees_room(old: GPUReservation | None, new: GPUReservation | None) -> bool:
    """Whether a change of a reservation's holds can make room for a re-link onto it:
    fewer GPUs held than before, or a hold gone. A re-link's target is chosen on facts
    and on the room left (``ledger.free``), so a claim, a binding or an announcement
    mark — the same GPUs held or more — can let no pod move that could not before."""
    if old is None or new is None:
        return False
    if new.used_gpus < old.used_gpus:
        return True
    return bool({h.claim for h in old.holds} - {h.claim for h in new.holds})


# --- the shell ------------------------------------------------------------------------


class Relinker:
    """Moves pods between reservations; runs the overstay adoption pass."""

    def __init__(
        self,
        gateway: KubeWriter,
        namespace: str,
        clock: Clock,
        emit: Emit,
        pods: Callable[[], Mapping[str, PodView]],
        reservations: Callable[[], Mapping[str, GPUReservation]],
        ready: Callable[[], bool],
        *,
        rules: MatchRules,
        enabled: bool,
        zone: ZoneInfo | None,
        retry_s: float = 300.0,
        mono: MonotonicClock | None = None,
    ) -> None:
        self._mono = mono or SystemMonotonic()
        self._gateway = gateway
        self._ns = namespace
        self._clock = clock
        self._emit = emit
        self._pods = pods
        self._reservations = reservations
        self._ready = ready
        self.rules = rules
        self.enabled = enabled
        self._zone = zone
        self.dirty = Dirty()
        self.moved = 0
        #: Adoption passes run.
        self.passes = 0
        #: Held while a pod's booking reference is decided on and changed (a re-link
        #: here, an eviction in ``reconciler.queue.evict``), so the two never act on one pod
        #: at once.
        self.lock = asyncio.Lock()
        #: uid → (resourceVersion, retry at) of pods whose move patch failed: adoption
        #: tries them again when they change or after ``retry_s``, not on the reservation
        #: change its own claim and release caused (that would loop on a lasting refusal).
        self._refused: dict[str, tuple[str, datetime]] = {}
        self._retry_s = retry_s

    def touch(self, key: str | None = None) -> None:
        """Pod ``key`` changed (None: a reservation, or anything every pod depends on):
        look again soon — at the pods touched since the last pass, or at every pod."""
        self.dirty.touch(key)

    async def run(self, tick_s: float) -> None:
        """The adoption pass on changes (over the pods touched), at the next window
        start / guarantee end and every ``tick_s`` (over every pod)."""
        await until_ready(self._ready)
        beat = Beat(self._clock, tick_s)
        while True:
            opens = self._next_start()  # before the pass: owed even if the pass runs past it
            await self.adopt_overstays(self.dirty.take())
            if await beat.wait(self.dirty.wake, opens):
                self.dirty.touch()

    def _next_start(self) -> datetime | None:
        """Just after the soonest booking window start still ahead (a holder may move
        to it then)."""
        now = self._clock.now()
        starts = [
            r.facts.start
            for r in self._reservations().values()
            if r.facts.kind is Kind.BOOKING and r.facts.start > now
        ]
        return min(starts) + JUST_AFTER if starts else None

    async def adopt_overstays(self, keys: set[str] | None = None) -> int:
        """R26 over the pods ``keys`` names (None: every pod); the number moved."""
        if not self.enabled or not self._ready():
            return 0
        self.passes += 1
        now = self._clock.now()
        reservations = self._reservations()
        use_group = self.rules.use_group
        taken: dict[str, int] = {}
        moved = 0
        cached = self._pods()
        if keys is None:
            pods = list(cached.values())
            for uid in self._refused.keys() - {p.uid for p in pods}:
                del self._refused[uid]
        else:
            pods = [cached[k] for k in sorted(keys) if k in cached]
        # Overstay depends on the reservation alone: its chain is walked once per pass.
        over: dict[str | None, bool] = {}
        for pod in pods:
            if not movable(pod):
                continue
            if pod.reference not in over:
                over[pod.reference] = overstaying(pod, reservations, now, use_group=use_group)
            if not over[pod.reference]:
                continue
            if cancelled_in_window(reservations.get(pod.reference or ""), now):
                continue  # the cancellation path re-links it (ReservationRelinked) or evicts
            refused = self._refused.get(pod.uid)
            if refused is not None and refused[0] == pod.resource_version and now < refused[1]:
                continue  # its move failed and nothing changed since
            goal = target(pod, reservations, now, self.rules, taken)
            if goal is None:
                continue
            async with self.lock:
                if await self.move(pod, goal, Cause.OVERSTAY, now, reservations):
                    taken[goal.name] = taken.get(goal.name, 0) + pod.gpus
                    moved += 1
        return moved

    def plan(self, pod: PodView, now: datetime, taken: Mapping[str, int]) -> GPUReservation | None:
        """Where ``pod`` could go now (None when adoption is off or nothing fits)."""
        if not self.enabled or not movable(pod):
            return None
        return target(pod, self._reservations(), now, self.rules, taken)

    async def move(
        self,
        pod: PodView,
        goal: GPUReservation,
        cause: Cause,
        now: datetime,
        reservations: Mapping[str, GPUReservation] | None = None,
    ) -> bool:
        """Re-link ``pod`` onto ``goal`` (module docstring); True when it moved."""
        old = pod.reference
        if old is None:
            return False
        pool = [r.facts for r in (reservations or self._reservations()).values()]
        until = guarantee_end(goal.facts, pool, now, use_group=self.rules.use_group)
        claim_id = await self._claim(pod, goal, now)
        if claim_id is None:
            return False
        patched = await self._patch(pod, old, goal, claim_id, until, now)
        if not patched:
            self._refused[pod.uid] = (pod.resource_version, now + timedelta(seconds=self._retry_s))
        if patched is None:
            return False  # may still land: the new hold stays (upkeep binds or expires it)
        if not patched:
            key = claim_key(claim_id)
            await self._release(goal.name, lambda h: h.claim == key, now)
            return False
        await self._release(old, lambda h: h.pod_uid == pod.uid or h.claim == pod.claim, now)
        self.moved += 1
        log(_log, logging.INFO, "relink.moved", pod=pod.key, old=old, new=goal.name, cause=cause)
        await self._announce(pod, cause, old, goal, until, now)
        return True

    async def _claim(self, pod: PodView, goal: GPUReservation, now: datetime) -> str | None:
        got = await ledger.claim(
            self._gateway,
            self._ns,
            goal.name,
            pod.gpus,
            pod=pod.name,
            now=now,
            deadline=self._mono.monotonic() + LEDGER_DEADLINE_S,
            monotonic=self._mono.monotonic,
            announced=True,
        )
        if not got.admitted:
            log(_log, logging.INFO, "relink.refused", pod=pod.key, new=goal.name, why=got.reason)
            return None
        return got.claim

    async def _patch(
        self,
        pod: PodView,
        old: str,
        goal: GPUReservation,
        claim_id: str,
        until: datetime,
        now: datetime,
    ) -> bool | None:
        notes = admission_annotations(
            goal.facts, claim=claim_id, guaranteed_until=until, now=now, admitted_at=None
        )
        ops = patch_ops(old, notes)
        try:
            await self._gateway.patch(PODS, pod.name, ops, pod.namespace)
        except KubeError as exc:
            log(_log, logging.WARNING, "relink.patch_failed", pod=pod.key, error=str(exc))
            if isinstance(exc, ServerError):  # the answer was lost: did it land?
                return await self._landed(pod, old, claim_id)
            return False
        return True

    async def _landed(self, pod: PodView, old: str, claim_id: str) -> bool | None:
        """Whether a patch whose answer was lost was applied (the pod carries the new
        claim), can no longer be (it left ``old``), or may still be (None)."""
        try:
            raw = await self._gateway.get(PODS, pod.name, pod.namespace)
        except KubeError:
            return None
        meta = raw.get("metadata") or {}
        notes = meta.get("annotations") or {}
        if meta.get("uid") != pod.uid:
            return False
        if notes.get(vocab.ADMISSION_CLAIM) == claim_id:
            return True
        return False if notes.get(vocab.BOOKING_REFERENCE) != old else None

    async def _release(self, name: str, mine: Callable[[Any], bool], now: datetime) -> None:
        def change(cur: GPUReservation) -> GPUReservation:
            return ledger.drop(cur, {h.claim for h in cur.holds if mine(h)})

        deadline = self._mono.monotonic() + LEDGER_DEADLINE_S
        await ledger.amend(
            self._gateway,
            self._ns,
            name,
            change,
            now=now,
            deadline=deadline,
            monotonic=self._mono.monotonic,
        )

    async def _announce(
        self,
        pod: PodView,
        cause: Cause,
        old: str,
        goal: GPUReservation,
        until: datetime,
        now: datetime,
    ) -> None:
        zone = self._zone
        guaranteed = runtime_guaranteed(goal, until, zone)
        relinked = relinked_message(cause, old, goal, until, zone)
        await self._emit(self._gateway, pod, vocab.REASON_RUNTIME_GUARANTEED, guaranteed, now=now)
        await self._emit(self._gateway, pod, relink_reason(cause), relinked, now=now)
