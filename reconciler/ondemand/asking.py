"""Asking the app for leases and admitting under them (R18–R20, R22's revoke).

``Asker.select`` offers the eligible pods to the app when admission is delegated
(``ONDEMAND_DELEGATE_ADMISSION``: withheld pods retry later, any failure grants all).
``Asker.ask`` posts one lease (``POST /api/reservations``) with the idempotency key
``lease_key(pod uid, attempt)``; a grant (new or returned) is mirrored as a
GPUReservation at once and the pod admitted through the shared step
(``Admission.admit_under``); if that fails the lease is cancelled
``controller-revoked`` and the next attempt uses a fresh key. A replay of a cancelled
lease moves to the next key at once. Refusals follow R19, and are told on the pod
through the shared throttle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from reconciler.admission.announce import Admitted
from reconciler.admission.step import Admission
from reconciler.base.apphealth import AppHealth, is_outage
from reconciler.base.caches import Caches
from reconciler.base.kube import KubeWriter
from reconciler.base.metrics import LeaseMetrics
from reconciler.base.mirroring import MirrorWriter, facts_from
from reconciler.base.pods import PodView
from reconciler.base.settings import ReconcilerSettings
from reconciler.ondemand import status as ondemand_status
from reconciler.ondemand.leases import LeaseKeeper, describe
from reconciler.ondemand.vetting import Context, Track, duration
from shared import model, vocab
from shared.appclient import (
    AdmissionCandidate,
    BestEffortRequest,
    CancelReason,
    Denied,
    Failure,
    GpuClass,
    Granted,
    LeaseRequest,
    Rejected,
    ReplayedCancelled,
    Reservation,
    ReturnedExisting,
    Selection,
    lease_key,
)
from shared.appclient.outcomes import CancelResult, LeaseResult, SelectionResult
from shared.clock import Clock, parse_utc
from shared.errors import KubeError
from shared.logs import log
from shared.policy import ondemand, ondemand_wording
from shared.resources import GPU_RESERVATIONS, PODS

_log = logging.getLogger(__name__)
#: Lease asks in flight at once (each is one app call, a mirror write and a patch).
ASK_CONCURRENCY = 16
#: R18: at most this many of the pod's ``galends/*`` annotations go with an offer,
#: each value cut to MAX_NOTE characters.
MAX_NOTES = 32
MAX_NOTE = 1024


class LeaseApp(Protocol):
    """The app calls the lease path makes (``AppClient`` satisfies it)."""

    async def create_lease(self, request: LeaseRequest) -> LeaseResult: ...

    async def create_best_effort(self, request: BestEffortRequest) -> LeaseResult: ...

    async def cancel(self, reservation_id: int, reason: CancelReason) -> CancelResult: ...

    async def select_admissions(
        self, candidates: Sequence[AdmissionCandidate]
    ) -> SelectionResult: ...


class Asker:
    """The app side of one batch: selection, the asks, and the admissions under them."""

    def __init__(
        self,
        app: LeaseApp,
        gateway: KubeWriter,
        caches: Caches,
        admission: Admission,
        writer: MirrorWriter,
        keeper: LeaseKeeper,
        settings: ReconcilerSettings,
        clock: Clock,
        classes: Callable[[], Mapping[int, GpuClass]],
        metrics: LeaseMetrics,
        health: AppHealth,
        *,
        tracks: dict[str, Track],
        placed: set[str],
        wake: asyncio.Event,
        rand: Callable[[], float],
    ) -> None:
        self._app = app
        self._gateway = gateway
        self._caches = caches
        self._admission = admission
        self._writer = writer
        self.keeper = keeper
        self._settings = settings
        self._clock = clock
        self._classes = classes
        self.metrics = metrics
        self.health = health
        #: The leaser's candidates and the pods it placed, shared with it.
        self.tracks = tracks
        self._placed = placed
        self._wake = wake
        self._rand = rand
        #: Admissions of this batch, announced once every ask is done (off the path
        #: from the grant to the toleration).
        self.admitted: list[Admitted] = []
        self._asks = asyncio.Semaphore(ASK_CONCURRENCY)

    def take_admitted(self) -> list[Admitted]:
        """The admissions made since the last call."""
        admitted, self.admitted = self.admitted, []
        return admitted

    async def select(self, eligible: list[PodView], ctx: Context) -> list[PodView]:
        """R20: the app's choice when delegated; every eligible pod otherwise or on failure."""
        if not eligible or not self._settings.ondemand.delegate:
            return eligible
        offered = [self._offer(p, ctx) for p in eligible]
        tracks = {p.uid: self.tracks[p.uid] for p in eligible}  # before the call's wait
        self.metrics.calls.labels("select").inc()
        got = await self._app.select_admissions(offered)
        self.health.note(got)
        if not isinstance(got, Selection):
            log(_log, logging.WARNING, "ondemand.selection_unavailable", error=describe(got))
            return eligible
        by_uid = {p.uid: p for p in eligible}
        for pod in eligible:
            if pod.uid not in got.granted:
                tracks[pod.uid].due = ondemand.jitter(ctx.now, self._rand)
        told = []
        for withheld in got.withheld:
            log(
                _log,
                logging.INFO,
                "ondemand.withheld",
                pod_uid=withheld.pod_uid,
                code=withheld.denial.code,
                outranked=withheld.outranked,
            )
            held = by_uid.get(withheld.pod_uid)
            track = tracks.get(withheld.pod_uid)
            if held is not None and track is not None and not withheld.outranked:
                # Contract §2.7: as if the create had been refused 409 with this envelope.
                told.append(self._refused(held, track, Denied(withheld.denial), ctx.now))
        await asyncio.gather(*told)
        return [by_uid[u] for u in dict.fromkeys(got.granted) if u in by_uid]

    def _offer(self, pod: PodView, ctx: Context) -> AdmissionCandidate:
        created = None
        if pod.created:
            try:
                created = parse_utc(pod.created)
            except ValueError:
                created = None
        return AdmissionCandidate(
            pod_uid=pod.uid,
            username=pod.namespace,
            group_name=pod.profile.usage_group,
            gpu_class_id=ctx.class_ids[pod.profile.gpu_class or ""],
            gpu_count=pod.gpus,
            duration_seconds=duration(pod, self._settings),
            pod_created_at=created,
            pod_annotations={k: v[:MAX_NOTE] for k, v in pod.notes[:MAX_NOTES]},
            best_effort=pod.profile.best_effort,
        )

    async def ask(self, pod: PodView, ctx: Context) -> None:
        track = self.tracks.get(pod.uid)
        if track is None:
            return
        async with self._asks:
            result = await self._create(pod, track, ctx)
        self.health.note(result)
        now = self._clock.now()
        if isinstance(result, ReplayedCancelled):
            self.metrics.asks.labels("replayed").inc()
            track.attempt += 1  # a fresh key: the cancelled original is never reused
            track.due = now
            self._wake.set()
            return
        if isinstance(result, Granted | ReturnedExisting):
            outcome = "granted" if isinstance(result, Granted) else "returned"
            self.metrics.asks.labels(outcome).inc()
            await self._use(pod, track, result.reservation, now)
            return
        await self._refused(pod, track, result, now)

    async def _create(self, pod: PodView, track: Track, ctx: Context) -> LeaseResult:
        cls_id = ctx.class_ids[pod.profile.gpu_class or ""]
        key = lease_key(pod.uid, track.attempt)
        group = pod.profile.usage_group or ""
        self.metrics.calls.labels("lease").inc()
        if pod.profile.best_effort:
            stub = BestEffortRequest(pod.namespace, group, cls_id, pod.gpus, key, None)
            return await self._app.create_best_effort(stub)
        ask = LeaseRequest(
            pod.namespace, group, cls_id, pod.gpus, duration(pod, self._settings), key
        )
        return await self._app.create_lease(ask)

    async def _use(self, pod: PodView, track: Track, row: Reservation, now: datetime) -> None:
        """Mirror the lease, admit the pod under it; cancel it when that fails."""
        facts = facts_from(row, self._classes())
        name = model.reference(row.id)
        with self.keeper.using(name):
            got = None
            if facts is not None:
                # The mirror's POST and the pod's re-read side by side: one round trip
                # less between the grant and the toleration.
                res, fresh = await asyncio.gather(
                    self._writer.install(facts, now), self._admission.reread(pod)
                )
                if res is not None and fresh is not None:
                    at = max(self._clock.now(), facts.start)
                    got = await self._admission.admit_under(
                        pod, res, at, announce=False, fresh=fresh
                    )
            if got is not None:
                self.admitted.append(got)
                self.keeper.used(name)
                self.tracks.pop(pod.uid, None)
                self._placed.add(pod.uid)
                waited = (self._clock.now() - track.seen).total_seconds()
                self.metrics.grant_latency.observe(max(0.0, waited))
                log(_log, logging.INFO, "ondemand.admitted", pod=pod.key, reservation=name)
                return
            if await self._carries(pod, name):
                self.tracks.pop(pod.uid, None)
                self._placed.add(pod.uid)
                return
            if await self._held(name):
                # The patch's answer was lost and it may still land: the hold stays for
                # upkeep to bind (admitted) or expire (then the orphan rule cancels the
                # lease). The next ask replays the same key, so nothing leaks.
                log(_log, logging.WARNING, "ondemand.admit_unknown", pod=pod.key, reservation=name)
                track.due = ondemand.jitter(self._clock.now(), self._rand)
                return
            log(_log, logging.WARNING, "ondemand.admit_failed", pod=pod.key, reservation=name)
            self.metrics.asks.labels("revoked").inc()
            await self.keeper.cancel(row.id, CancelReason.CONTROLLER_REVOKED)
            track.attempt += 1
            track.due = ondemand.jitter(self._clock.now(), self._rand)

    async def _held(self, name: str) -> bool:
        """Whether the lease's ledger holds a claim (an admission that may still land)."""
        try:
            raw = await self._gateway.get(GPU_RESERVATIONS, name, self._settings.common.namespace)
            return bool(model.from_object(raw).holds)
        except (KubeError, ValueError):
            return False

    async def _carries(self, pod: PodView, name: str) -> bool:
        """Whether the pod already carries ``name`` (admitted under it before)."""
        try:
            raw = await self._gateway.get(PODS, pod.name, pod.namespace)
        except KubeError:
            return False
        notes = (raw.get("metadata") or {}).get("annotations") or {}
        uid = (raw.get("metadata") or {}).get("uid")
        return uid == pod.uid and notes.get(vocab.BOOKING_REFERENCE) == name

    async def _refused(self, pod: PodView, track: Track, failure: Failure, now: datetime) -> None:
        retry = ondemand.retry_after(failure, now, track.errors, self._rand)
        track.due, track.errors = retry.at, retry.errors
        track.outage = is_outage(failure)
        if not track.outage:
            track.told_outage = False
        self.metrics.asks.labels(str(retry.outcome)).inc()
        log(
            _log,
            logging.INFO if isinstance(failure, Denied) else logging.WARNING,
            "ondemand.lease_refused" if isinstance(failure, Denied) else "lease.error",
            pod=pod.key,
            outcome=str(retry.outcome),
            status=failure.status,
            detail=getattr(failure, "detail", ""),
            retry_at=retry.at.isoformat(),
        )
        if not self._settings.ondemand.denial_events:
            return
        if track.outage and not track.told_outage:
            await self._admission.say(pod, ondemand_status.delayed(), now)
            track.told_outage = True
        elif isinstance(failure, Denied):
            status = ondemand_wording.denied(failure.detail, not failure.denial.retryable)
            await self._admission.say(pod, status, now)
        elif isinstance(failure, Rejected):
            pool = self._caches.reservations.items.values()
            status = ondemand_status.rejected(pod, failure, self._settings, pool, now)
            await self._admission.say(pod, status, now)
