"""The admission step both paths take (R11, R20): claim, then patch once.

``Admission`` admits one pod under a reservation: the budget claimed through the ledger
(``shared.ledger``, the cache's copy first, a fresh GET after a conflict), then the pod
patched once (``pending.admission_patch``), the patch built from the view the caller
holds and testing its resourceVersion, so a pod that changed since — finished, deleted,
admitted meanwhile — refuses it. A refused patch drops the hold again
(``ledger.amend``); a patch whose answer was lost (a timeout, a 5xx) may have been
applied: the pod is re-read, and the hold is kept when it carries the claim (admitted)
or when the patch may still land (upkeep binds the hold then, or expires it after the
claim TTL).

The reserved queue (``reconciler.queue``) calls ``claim_in_order`` and ``stamp`` for
the pods its passes route; the on-demand path (``reconciler.ondemand``) calls
``admit_under`` for a pod whose lease was just granted. Both tell waiting statuses
through the one ``Teller`` (one story per pod) and announce through the one
``Announcer`` (``RuntimeGuaranteed`` once). The step remembers, per pod, what its
callers share: the patches that failed (``backing_off``: tried again when the pod
changes or at the queue's backstop tick, not at once) and the pods that waited for a
window to open (the window-open lag metric).
"""

from __future__ import annotations

import enum
import logging
from datetime import datetime, timedelta
from typing import Any

from reconciler.admission import pending
from reconciler.admission.announce import Admitted, Announcer, guaranteed_until
from reconciler.admission.waiting import Emit, Knowledge, Teller
from reconciler.base import events
from reconciler.base.caches import Caches
from reconciler.base.component import Ground
from reconciler.base.kube import KubeWriter
from reconciler.base.metrics import QueueMetrics
from reconciler.base.pods import PodView, project_pod
from reconciler.base.settings import ReconcilerSettings
from reconciler.base.throttle import HOLD
from shared import ledger, model, vocab
from shared.clock import Clock, MonotonicClock, SystemMonotonic
from shared.errors import KubeError, NotFound, ServerError
from shared.logs import log
from shared.model import GPUReservation, claim_key
from shared.policy.routing import Path, Route
from shared.policy.statuses import Status
from shared.resources import PODS

_log = logging.getLogger(__name__)
#: Seconds one admission (claim + patch) may take.
ADMIT_DEADLINE_S = 10.0
#: How often the on-demand path reads its pod again and retries when the admission
#: patch was refused because the pod changed meanwhile (a scheduler status write).
ON_DEMAND_ATTEMPTS = 3


class Failed(enum.Enum):
    """Why one admission attempt did not admit its pod."""

    #: No candidate's claim admitted the pod (full, gone, an error, the deadline).
    CLAIM = "claim"
    #: The patch was refused (the pod changed or left, the API said no); hold dropped.
    REFUSED = "refused"
    #: The patch's answer was lost and it may still land; the hold is kept.
    UNKNOWN = "unknown"


#: What one admission attempt (claim, then patch) came to.
Attempt = Admitted | Failed


class Admission:
    """The claim-and-patch step of one leader term, shared by the queue and on-demand."""

    def __init__(
        self,
        gateway: KubeWriter,
        caches: Caches,
        settings: ReconcilerSettings,
        clock: Clock,
        metrics: QueueMetrics,
        knowledge: Knowledge,
        emit: Emit = events.emit,
        mono: MonotonicClock | None = None,
    ) -> None:
        self.gateway = self._gateway = gateway
        self._caches = caches
        self._settings = settings
        self._clock = clock
        self._mono = mono or SystemMonotonic()
        #: The monotonic clock's reading, for the ledger writes of the callers.
        self.monotonic = self._mono.monotonic
        self._metrics = metrics
        self._ns = settings.common.namespace
        self.teller = Teller(gateway, settings, clock, self.count, knowledge, emit)
        self.announcer = Announcer(
            gateway, caches, settings, metrics, self.teller.send, mono=self._mono
        )
        #: uid → the reservation it waited to open (the window-open lag metric).
        self.waited_open: dict[str, str] = {}
        #: uid → (resourceVersion patched against, retry at): pods whose admission patch
        #: was refused or lost. Retried when the pod changes or at the backstop tick —
        #: not on the reservation change our own claim and release cause (a hot loop).
        self.refused: dict[str, tuple[str, datetime]] = {}

    def forget(self, uid: str) -> None:
        """The pod ``uid`` is gone or finished: nothing to remember of it."""
        self.waited_open.pop(uid, None)
        self.refused.pop(uid, None)

    def keep_only(self, live: set[str]) -> None:
        """Forget every pod but ``live`` (a full pass saw the others leave)."""
        for uid in self.waited_open.keys() - live:
            del self.waited_open[uid]
        for uid in self.refused.keys() - live:
            del self.refused[uid]

    def backing_off(self, pod: PodView, now: datetime) -> bool:
        """Whether ``pod``'s last admission patch failed and nothing changed since."""
        refused = self.refused.get(pod.uid)
        if refused is None:
            return False
        version, retry_at = refused
        if pod.resource_version != version or now >= retry_at:
            del self.refused[pod.uid]
            return False
        return True

    def deadline(self) -> float:
        """The monotonic instant one ledger write must end by."""
        return self._mono.monotonic() + ADMIT_DEADLINE_S

    async def claim_in_order(
        self,
        pod: PodView,
        found: Route,
        pool: list[GPUReservation],
        latest: dict[str, GPUReservation],
        now: datetime,
        path: str = "reserved",
    ) -> Attempt:
        """Claim the candidates in order for one pod; patch it under the first that
        admits. ``latest`` holds the newest copy of each reservation seen so far."""
        for cand in found.candidates:
            res = latest.get(cand.name, cand)
            got = await ledger.claim(
                self._gateway,
                self._ns,
                res.name,
                pod.gpus,
                pod=pod.name,
                now=now,
                deadline=self.deadline(),
                monotonic=self._mono.monotonic,
                cached=model.to_object(res, self._ns, now),
            )
            if got.reservation is not None:
                latest[cand.name] = got.reservation
            if got.admitted and got.claim is not None and got.reservation is not None:
                return await self.stamp(pod, got.reservation, got.claim, pool, now, path)
            if got.reason in {"error", "deadline"}:
                return Failed.CLAIM
        return Failed.CLAIM

    async def admit_under(
        self,
        pod: PodView,
        res: GPUReservation,
        now: datetime,
        announce: bool = True,
        fresh: PodView | None = None,
    ) -> Admitted | None:
        """Admit ``pod`` under ``res`` at once — a just-granted on-demand lease (``res``
        as written, with its resourceVersion) — and announce it (``announce``; else the
        caller passes it to ``announce`` later). The same claim and patch as a queued
        pod; None when the pod no longer waits or the claim or the patch failed (the
        caller cancels the lease then). ``fresh``: the pod as the caller has just read it
        (``reread``, side by side with writing the lease's mirror), used by the first
        attempt instead of reading again.

        A pod waiting for a lease is Pending, and the scheduler may rewrite its
        ``PodScheduled`` condition between the read and the patch: the patch's ``test`` on
        the resourceVersion then refuses it (its claim is dropped again). That is no reason
        to give a granted lease up, so the pod is read again and the admission retried, at
        most ``ON_DEMAND_ATTEMPTS`` times; a failed claim or a patch whose answer was lost
        (its hold kept) is not retried."""
        pool = [*self._caches.reservations.items.values(), res]
        found = Route(Path.ADMIT, (res,))
        got: Attempt | None = None
        # Announced by this call or its caller, never by a queue pass that sees the
        # admission first (as if the webhook had made it: a second RuntimeGuaranteed).
        self.announcer.expect(pod.uid)
        try:
            for _ in range(ON_DEMAND_ATTEMPTS):
                fresh = fresh or await self.reread(pod)
                if fresh is None:
                    return None
                got = await self.claim_in_order(fresh, found, pool, {}, now, path="on_demand")
                if isinstance(got, Admitted):
                    if announce:
                        await self.announce([got], now)
                    return got
                if got is not Failed.REFUSED:
                    return None  # the claim failed, or the answer was lost (the hold kept)
                fresh = None  # refused: the pod changed since; read it again
            return None
        finally:
            if not isinstance(got, Admitted):
                self.announcer.forget_expected(pod.uid)

    async def announce(self, admitted: list[Admitted], now: datetime) -> None:
        """``RuntimeGuaranteed`` (or ``BestEffortAdmitted``) for admissions this process
        made, then the ledger's announced mark (as after a queue pass)."""
        await self.announcer.announce(admitted, now)

    async def say(self, pod: PodView, status: Status | None, now: datetime) -> None:
        """Tell ``pod`` a waiting status on the shared throttle (one story per pod)."""
        await self.teller.say(pod, HOLD, status, now)

    async def reread(self, pod: PodView) -> PodView | None:
        """The pod as it is now, when it still waits (R11 step 3); else None. The
        on-demand path's view was taken before a lease round trip: read it again rather
        than let a since-changed pod fail the patch and cost the lease."""
        try:
            raw: dict[str, Any] = await self._gateway.get(PODS, pod.name, pod.namespace)
        except NotFound:
            return None
        except KubeError as exc:
            log(_log, logging.WARNING, "queue.read_failed", pod=pod.key, error=str(exc))
            return None
        fresh = project_pod(raw, self._settings.rules)
        if fresh is None or fresh.uid != pod.uid or not pending.waiting([fresh]):
            return None
        return fresh

    async def stamp(
        self,
        pod: PodView,
        res: GPUReservation,
        claim: str,
        pool: list[GPUReservation],
        now: datetime,
        path: str = "reserved",
        until: datetime | None = None,
    ) -> Attempt:
        """Patch the pod after a successful claim; drop the hold again if the patch was
        refused, keep it if its answer was lost (it may still land). ``until`` is the
        reservation's guarantee end when the caller has it already."""
        if until is None:
            until = guaranteed_until(res, pool, now, self._settings.rules)
        patch = pending.admission_patch(pod, res, claim, until, now, self._settings.queue.gate_name)
        try:
            await self._gateway.patch(PODS, pod.name, patch, pod.namespace)
        except KubeError as exc:
            failed = await self._patch_failed(pod, res, claim, now, exc)
            if failed is not None:
                return failed
        lag = (self._clock.now() - res.facts.start).total_seconds()
        if self.waited_open.pop(pod.uid, None) == res.name:
            self._metrics.lag.observe(max(0.0, lag))
        self._metrics.admissions.labels(path).inc()
        log(
            _log,
            logging.INFO,
            "queue.admitted",
            namespace=pod.namespace,
            pod=pod.name,
            reservation=res.name,
            claim=claim_key(claim),
            since_open_s=round(lag, 3),
        )
        return Admitted(pod, res, claim_key(claim))

    async def _patch_failed(
        self, pod: PodView, res: GPUReservation, claim: str, now: datetime, exc: KubeError
    ) -> Failed | None:
        """After a refused or lost patch: None when it was applied after all (the pod is
        admitted); else back off, and drop the hold unless the patch may still land."""
        log(_log, logging.WARNING, "queue.patch_failed", pod=pod.key, error=str(exc))
        landed = await self._landed(pod, claim) if isinstance(exc, ServerError) else False
        if landed:
            return None
        retry_at = now + timedelta(seconds=self._settings.queue_interval_s)
        self.refused[pod.uid] = (pod.resource_version, retry_at)
        if landed is None:
            # The answer was lost and the patch may still land: keep the hold; upkeep
            # binds it if it does, and expires it after the claim TTL if not.
            log(_log, logging.WARNING, "queue.patch_unknown", pod=pod.key, claim=claim_key(claim))
            return Failed.UNKNOWN
        await ledger.amend(
            self._gateway,
            self._ns,
            res.name,
            lambda cur: ledger.drop(cur, {claim_key(claim)}),
            now=now,
            deadline=self.deadline(),
            monotonic=self._mono.monotonic,
        )
        return Failed.REFUSED

    async def _landed(self, pod: PodView, claim: str) -> bool | None:
        """After a patch whose answer was lost: whether it was applied (the pod carries
        ``claim``), not and never will be (the pod changed since the view the patch was
        built from, so its ``test`` fails), or unknown (None)."""
        try:
            now_raw: dict[str, Any] = await self._gateway.get(PODS, pod.name, pod.namespace)
        except NotFound:
            return False
        except KubeError:
            return None
        meta = now_raw.get("metadata") or {}
        if meta.get("uid") != pod.uid:
            return False
        if (meta.get("annotations") or {}).get(vocab.ADMISSION_CLAIM) == claim:
            return True
        return False if meta.get("resourceVersion") != pod.resource_version else None

    def count(self, reason: str) -> None:
        """One Event sent on a pod, by reason."""
        self._metrics.events.labels(reason).inc()


def setup(ground: Ground) -> Admission:
    """The admission step of one leader term (no loop of its own: the queue and the
    on-demand path call it)."""
    return Admission(
        ground.gateway,
        ground.caches,
        ground.settings,
        ground.clock,
        ground.queue_metrics,
        Knowledge(ground.fetched, ground.class_labels),
        ground.recorder.emit,
    )
