"""Just-in-time on-demand leases on the leader (R15–R22): ask, admit, tear down.

Each *batch* reads the caches:

1. **Candidates**: every waiting GPU pod that routing sends to JIT (re-routed every
   batch: a booking that becomes admittable wins). Due candidates (their retry time
   has come) are vetted oldest first by ``shared.policy.ondemand.preflight`` — guard
   1a verdict, class id, 1b drained, node constraint, 3 stuck holder, 4 overcommit, 5
   largest free block net of this batch's grants; a held pod is told why (throttled).
2. **Selection**: with ``ONDEMAND_DELEGATE_ADMISSION`` the eligible set is offered to
   the app; withheld pods retry later, any failure grants all.
3. **Ask** (concurrently): ``POST /api/reservations`` with the idempotency key
   ``lease_key(pod uid, attempt)``. A grant (new or returned) is mirrored as a
   GPUReservation at once and the pod admitted through the ledger
   (``Admission.admit_under``); if that fails the lease is cancelled
   ``controller-revoked`` and the next attempt uses a fresh key. A replay of a
   cancelled lease moves to the next key at once. Refusals follow R19.
4. **Merge, teardown and orphans**: ``reconciler.ondemand.leases.LeaseKeeper``, on the caches
   as they are after the asks (so a pending pod replays its key before the orphan rule
   looks at its lease).

Triggers (``docs/ondemand.md``): a new pending GPU pod (at most one batch in flight
plus one trailing, after a short settle), a candidate held for lack of a verdict
getting one (R21), capacity changes for candidates held on it, a pod under a lease
finishing or leaving, a booking appearing, the keeper's timers, the earliest retry
time, and the ``QUEUE_PROCESSOR_INTERVAL`` tick.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from reconciler.admission import pending
from reconciler.admission.announce import Admitted
from reconciler.admission.relink import Relinker
from reconciler.admission.step import Admission
from reconciler.base.apphealth import AppHealth, Health, is_outage
from reconciler.base.caches import Caches
from reconciler.base.metrics import LeaseMetrics
from reconciler.base.mirroring import MirrorWriter, facts_from
from reconciler.base.pods import PodView
from reconciler.base.settings import ReconcilerSettings
from reconciler.base.upkeep import until_ready, wait_either
from reconciler.ondemand import status as ondemand_status
from reconciler.ondemand.leases import LeaseKeeper, describe
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
from shared.model import GPUReservation, Kind, State
from shared.policy import ondemand, ondemand_wording
from shared.policy.ondemand import Candidate, ClassState, Held, Preflight
from shared.policy.routing import Path, Pool, route_in
from shared.resources import GPU_RESERVATIONS, PODS

_log = logging.getLogger(__name__)
LEASE_TASK = "ondemand-leases"
#: Lease asks in flight at once (each is one app call, a mirror write and a patch).
ASK_CONCURRENCY = 16
#: After a trigger, a batch waits this long (seconds) for the rest of a burst, again
#: while triggers keep coming or the scheduler has yet to judge a waiting pod, at most
#: SETTLE_MAX_S in all.
SETTLE_S = 0.1
SETTLE_MAX_S = 1.5
#: R18: at most this many of the pod's ``galends/*`` annotations go with an offer,
#: each value cut to MAX_NOTE characters.
MAX_NOTES = 32
MAX_NOTE = 1024
#: Holds retried at once when a node changes or a pod frees GPUs or gets placed.
RECHECKED = frozenset(
    {
        Held.DRAINED,
        Held.NO_MATCHING_NODE,
        Held.WAITING_FOR_NODE,
        Held.STUCK_HOLDER,
        Held.OVERCOMMIT,
        Held.FRAGMENTED,
    }
)


class LeaseApp(Protocol):
    """The app calls the lease path makes (``AppClient`` satisfies it)."""

    async def create_lease(self, request: LeaseRequest) -> LeaseResult: ...

    async def create_best_effort(self, request: BestEffortRequest) -> LeaseResult: ...

    async def cancel(self, reservation_id: int, reason: CancelReason) -> CancelResult: ...

    async def select_admissions(
        self, candidates: Sequence[AdmissionCandidate]
    ) -> SelectionResult: ...


@dataclass
class Track:
    """One candidate's retry state (memory only: a restart asks again at once, and the
    idempotency key returns any lease granted before)."""

    seen: datetime
    due: datetime
    attempt: int = 1
    errors: int = 0
    waiting_verdict: bool = False
    #: The guard holding it (None: due, or waiting after an app answer).
    held: Held | None = None
    #: Its last ask failed for an app outage: asked again the moment the app answers.
    outage: bool = False
    #: This outage was told (OnDemandLeaseDelayed): once per outage per pod.
    told_outage: bool = False


@dataclass(frozen=True)
class Context:
    """What one batch reads, taken once."""

    now: datetime
    pods: list[PodView]
    pool: list[GPUReservation]
    states: dict[str, ClassState]
    others: dict[str, tuple[ondemand.ClassNode, ...]]
    class_ids: dict[str, int]


class Leaser:
    """The on-demand lease path of one leader term."""

    def __init__(
        self,
        app: LeaseApp,
        gateway: Any,
        caches: Caches,
        admission: Admission,
        writer: MirrorWriter,
        settings: ReconcilerSettings,
        clock: Clock,
        classes: Callable[[], Mapping[int, GpuClass]],
        registry: CollectorRegistry,
        overcommit: Callable[[], Mapping[str, int]] = dict,
        rand: Callable[[], float] = random.random,
        relinker: Relinker | None = None,
        health: AppHealth | None = None,
    ) -> None:
        self._app = app
        #: The app's health: the poll's answers and this path's own (shared with the
        #: leader, which publishes it); an answer after an outage makes its pods due.
        self.health = health if health is not None else AppHealth(clock)
        self.health.listeners.append(self._app_health)
        self._gateway = gateway
        self._caches = caches
        self._admission = admission
        self._writer = writer
        self._settings = settings
        self._clock = clock
        self._classes = classes
        self._overcommit = overcommit
        self._rand = rand
        #: Admissions of this batch, announced once every ask is done (off the path
        #: from the grant to the toleration).
        self._admitted: list[Admitted] = []
        self._announcing: set[asyncio.Task[None]] = set()
        self.metrics = LeaseMetrics(registry)
        self.keeper = LeaseKeeper(
            app,
            caches,
            writer,
            settings,
            clock,
            classes,
            self.metrics.calls.labels("cancel"),
            relinker,
        )
        self.tracks: dict[str, Track] = {}
        #: Pods this process admitted whose admission the pod cache may not show yet
        #: (its watch lags the patch): never candidates again meanwhile.
        self._placed: set[str] = set()
        self.gates = ondemand_status.GateLog()
        self._stuck: dict[str, list[str]] = {}
        self._deficits: dict[str, int] = {}
        self._asks = asyncio.Semaphore(ASK_CONCURRENCY)
        self._wake = asyncio.Event()
        self.batches = 0
        #: Seconds the last trigger's settle waited (the ``ondemand.batch`` line).
        self._settled_s = 0.0
        caches.pods.listeners.append(self._pod_changed)
        caches.nodes.listeners.append(lambda _k, _o, _n: self._recheck())
        caches.reservations.listeners.append(self._reservation_changed)

    def loops(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """The leader's loop for leases (none when ONDEMAND_LEASE_ENABLED is off)."""
        if not self._settings.rules.leases_enabled:
            return []
        return [(LEASE_TASK, lambda: self.run(float(self._settings.queue_interval_s)))]

    def _recheck(self) -> None:
        """Capacity or a class gate may have changed: candidates held by a guard that
        reads them are due at once (not at their 30 s retry)."""
        now = self._clock.now()
        for track in self.tracks.values():
            if track.held in RECHECKED:
                track.due = min(track.due, now)
                self._wake.set()

    def _app_health(self, health: Health) -> None:
        """The app answers again: the candidates whose ask failed for the outage are due
        at once (not at their 2–5 minute retry), and a later outage is told anew."""
        if not health.ok:
            return
        for track in self.tracks.values():
            if track.outage:
                track.outage = track.told_outage = False
                track.due = min(track.due, health.since)
                self._wake.set()

    def _reservation_changed(
        self, _key: str, old: GPUReservation | None, new: GPUReservation | None
    ) -> None:
        """A booking that appears or changes may take a lease's pod now, or when it opens
        (R25: the merge timer is re-armed). A lease's pod may have left unseen."""
        if self.keeper.ledger_changed(old, new):
            self._wake.set()
        if new is None or new.facts.kind is not Kind.BOOKING:
            return
        if old is None or old.facts != new.facts:
            self._wake.set()

    def _pod_changed(self, _key: str, old: PodView | None, new: PodView | None) -> None:
        if self.keeper.pod_changed(old, new):
            self._wake.set()
        if moved(old, new):
            self._recheck()  # GPUs freed, or a stuck holder moved on
        if new is None or new.finished or new.admitted:
            if old is not None:
                self.tracks.pop(old.uid, None)
                self._placed.discard(old.uid)
            if new is not None:
                self._placed.discard(new.uid)
            return
        if old is None and new.phase == "Pending":
            self._wake.set()  # a new candidate: an immediate batch
            return
        track = self.tracks.get(new.uid)
        if (
            track is not None
            and track.waiting_verdict
            and (old is None or new.scheduled != old.scheduled)
        ):
            track.waiting_verdict = False  # R21: the scheduler gave its verdict
            track.due = self._clock.now()
            self._wake.set()

    async def run(self, tick_s: float) -> None:
        """A batch now, then on every trigger (see the module docstring)."""
        await until_ready(self._caches.ready)
        try:
            while True:
                self._wake.clear()
                try:
                    await self.once()
                except KubeError as exc:
                    log(_log, logging.WARNING, "ondemand.batch_failed", error=str(exc))
                sleep = self._clock.sleep(self._delay(tick_s))
                if not await wait_either(sleep, self._wake.wait()):
                    await self._settle()
        finally:
            for task in list(self._announcing):
                task.cancel()

    async def _settle(self) -> None:
        """Let a burst of arrivals (and the scheduler's verdicts on them) collect so they
        share one batch: wait ``SETTLE_S`` more while triggers keep coming or a waiting
        pod has no verdict yet, at most ``SETTLE_MAX_S`` in all."""
        began = self._clock.now()
        try:
            for _ in range(round(SETTLE_MAX_S / SETTLE_S)):
                self._wake.clear()
                await self._clock.sleep(SETTLE_S)
                if not self._wake.is_set() and not self._unjudged():
                    return
        finally:
            self._settled_s = (self._clock.now() - began).total_seconds()

    def _unjudged(self) -> bool:
        """Whether a waiting, ungated GPU pod has no scheduler verdict yet (guard 1a
        would hold it: the batch waits for it, within the settle's bound)."""
        return any(
            p.phase == "Pending" and p.scheduled is None and not p.gates
            for p in pending.waiting(self._caches.pods.items.values())
        )

    def _delay(self, tick_s: float) -> float:
        now = self._clock.now()
        dues = [t.due for t in self.tracks.values()]
        timer = self.keeper.next_timer(now)
        soonest = min([*dues, *([timer] if timer is not None else [])], default=None)
        if soonest is None:
            return tick_s
        return max(0.0, min(tick_s, (soonest - now).total_seconds()))

    # --- one batch -----------------------------------------------------------------------

    async def once(self) -> None:
        """One batch: vet and ask every due candidate, then teardown (on the caches as
        they are by then, so a pod still pending after a restart replays its key and
        uses its lease before the orphan rule looks at it)."""
        if not self._caches.ready():
            return
        ctx = self._context()
        due = self._due(ctx)
        claimed: dict[str, int] = {}
        eligible: list[PodView] = []
        told: list[Awaitable[None]] = []
        gated: dict[tuple[str, str], int] = {}
        for pod in due:
            cls = pod.profile.gpu_class or ""
            pre = ondemand.preflight(
                self._candidate(pod),
                cls in ctx.class_ids,
                ctx.states.get(cls, ClassState()),
                claimed.get(cls, 0),
                {c: n for c, n in ctx.others.items() if c != cls},
                ctx.now,
            )
            if pre.ask:
                self.tracks[pod.uid].held = None
                claimed[cls] = claimed.get(cls, 0) + pod.gpus
                eligible.append(pod)
            else:
                if pre.held in ondemand.PAUSES and not (
                    pre.held is Held.OVERCOMMIT and pod.profile.best_effort
                ):
                    gate = (cls, str(pre.held))
                    gated[gate] = gated.get(gate, 0) + 1
                self._held_by(self.tracks[pod.uid], pre, ctx.now)
                told.append(self._hold(pod, pre, ctx))
        await asyncio.gather(*told)
        self.gates.report(gated, ctx.now, bool(due), self._stuck, self._deficits)
        if eligible:
            self.batches += 1
            self.metrics.batches.inc()
        granted = await self._select(eligible, ctx)
        await asyncio.gather(*(self._ask(pod, ctx) for pod in granted))
        admitted, self._admitted = self._admitted, []
        if eligible:
            log(
                _log,
                logging.INFO,
                "ondemand.batch",
                batch=self.batches,
                due=len(due),
                eligible=len(eligible),
                asked=len(granted),
                admitted=len(admitted),
                settled_s=round(self._settled_s, 3),
                took_s=round((self._clock.now() - ctx.now).total_seconds(), 3),
            )
        self._settled_s = 0.0
        if admitted:  # in the background: the trailing batch need not wait for it
            task = asyncio.create_task(self._admission.announce(admitted, self._clock.now()))
            self._announcing.add(task)
            task.add_done_callback(self._announcing.discard)
        self.metrics.candidates.set(len(self.tracks))
        after = self._context()
        await self.keeper.merge(after.now, after.pods, after.pool)
        await self.keeper.teardown(after.now, after.pods, after.pool)

    def _context(self) -> Context:
        now = self._clock.now()
        pods = list(self._caches.pods.items.values())
        pool = list(self._caches.reservations.items.values())
        inventory = self._caches.inventory()
        class_ids = {c.label_value: c.id for c in self._classes().values() if c.label_value}
        labels = set(class_ids) | (set(inventory.classes) if inventory is not None else set())
        nodes = {c: ondemand.class_nodes(inventory, c) for c in labels}
        deficits = self._overcommit()
        stuck = self._stuck_classes(pods, nodes, now)
        states = {
            c: ClassState(
                nodes=nodes.get(c),
                stuck=c in stuck,
                overcommitted=deficits.get(c, 0) > 0,
                physical=self._physical(c, inventory) if c in deficits else None,
                booked=_windows(c, pool) if c in deficits else (),
            )
            for c in labels
        }
        others = {c: n for c, n in nodes.items() if n}
        self._stuck = stuck
        self._deficits = dict(deficits)
        return Context(now, pods, pool, states, others, class_ids)

    def _physical(self, cls: str, inventory: Any) -> int | None:
        """Guard 4 with ONDEMAND_OVERCOMMIT_FIT: the class's physical GPUs (None: pause)."""
        cap = inventory.capacity(cls) if inventory is not None else None
        if not self._settings.ondemand.overcommit_fit or cap is None:
            return None
        return int(cap.total)

    def _stuck_classes(
        self,
        pods: list[PodView],
        nodes: Mapping[str, tuple[ondemand.ClassNode, ...] | None],
        now: datetime,
    ) -> dict[str, list[str]]:
        """Guard 3 (R17): classes with an admitted pod the scheduler cannot place that
        its own node constraint does not explain (and that it has had the time to retry
        since the admission), with those pods (for the log only)."""
        stuck: dict[str, list[str]] = {}
        for pod in pods:
            cls = pod.profile.gpu_class
            if not pod.admitted or cls is None or pod.finished or pod.deleting:
                continue
            at = pod.admitted_at
            since = (now - at).total_seconds() if at is not None else None
            if ondemand.stuck_holder(
                pod.phase, pod.scheduled, pod.constraint, pod.gpus, nodes.get(cls), since
            ):
                stuck.setdefault(cls, []).append(pod.key)
        return stuck

    def _due(self, ctx: Context) -> list[PodView]:
        """Candidates whose retry time has come, oldest first; tracks kept in step."""
        rules = self._settings.rules
        found: list[PodView] = []
        owned = Pool(ctx.pool)
        self._placed &= {p.uid for p in ctx.pods if not p.admitted}  # the cache caught up
        for pod in pending.waiting(ctx.pods):
            if pod.phase != "Pending" or pod.uid in self._placed:
                continue
            if route_in(pod.profile, owned, ctx.now, rules).path is Path.JIT:
                found.append(pod)
        live = {p.uid for p in found}
        for uid in self.tracks.keys() - live:
            del self.tracks[uid]
        for pod in found:
            self.tracks.setdefault(pod.uid, Track(seen=ctx.now, due=ctx.now))
        due = [p for p in found if self.tracks[p.uid].due <= ctx.now]
        return sorted(due, key=lambda p: (p.created, p.namespace, p.name))

    def _candidate(self, pod: PodView) -> Candidate:
        return Candidate(
            phase=pod.phase,
            scheduled=pod.scheduled,
            gpu_class=pod.profile.gpu_class,
            gpus=pod.gpus,
            best_effort=pod.profile.best_effort,
            constraint=pod.constraint,
            duration_s=self._duration(pod),
        )

    # --- holds ---------------------------------------------------------------------------

    @staticmethod
    def _held_by(track: Track, pre: Preflight, now: datetime) -> None:
        """Record the hold on the candidate's track — at once, while vetting: a verdict
        that arrives before the batch's holds are told must find the track waiting for
        it (R21), or the pod waits for its 30 s retry."""
        track.due = ondemand.hold_until(now)
        track.held = pre.held
        track.waiting_verdict = pre.held is Held.NO_VERDICT

    async def _hold(self, pod: PodView, pre: Preflight, ctx: Context) -> None:
        """Tell ``pod`` why it is held (ungated first when it waits for a verdict)."""
        gate = self._settings.queue.gate_name
        if pre.held is Held.NO_VERDICT and gate is not None and gate in pod.gates:
            await self._ungate(pod, gate)
        await self._admission.say(
            pod,
            ondemand_status.hold_status(
                pod, pre, self._settings, ctx.class_ids, bool(self._classes())
            ),
            ctx.now,
        )

    async def _ungate(self, pod: PodView, gate: str) -> None:
        """Remove our scheduling gate from a candidate (queued for a booking that no
        longer takes it): gated, the scheduler never gives the verdict guard 1a needs."""
        index = pod.gates.index(gate)
        ops = [
            {"op": "test", "path": "/metadata/uid", "value": pod.uid},
            {"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": gate},
            {"op": "remove", "path": f"/spec/schedulingGates/{index}"},
        ]
        try:
            await self._gateway.patch(PODS, pod.name, ops, pod.namespace)
        except KubeError as exc:
            log(_log, logging.WARNING, "ondemand.ungate_failed", pod=pod.key, error=str(exc))
            return
        log(_log, logging.INFO, "ondemand.ungated", pod=pod.key)

    # --- selection and the ask --------------------------------------------------------

    async def _select(self, eligible: list[PodView], ctx: Context) -> list[PodView]:
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
            duration_seconds=self._duration(pod),
            pod_created_at=created,
            pod_annotations={k: v[:MAX_NOTE] for k, v in pod.notes[:MAX_NOTES]},
            best_effort=pod.profile.best_effort,
        )

    def _duration(self, pod: PodView) -> int:
        if pod.profile.best_effort:
            return 0
        runtime = pod.profile.minimum_runtime_s or 0
        return ondemand.lease_seconds(runtime, self._settings.ondemand.buffer)

    async def _ask(self, pod: PodView, ctx: Context) -> None:
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
        ask = LeaseRequest(pod.namespace, group, cls_id, pod.gpus, self._duration(pod), key)
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
                self._admitted.append(got)
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


def _windows(cls: str, pool: list[GPUReservation]) -> tuple[tuple[datetime, datetime, int], ...]:
    """The active reservations of ``cls`` as ``(start, end, gpus)`` (guard 4's fit)."""
    return tuple(
        (r.facts.start, r.facts.end, r.facts.gpu_count)
        for r in pool
        if r.facts.gpu_class == cls and r.facts.state is State.ACTIVE
    )


def moved(old: PodView | None, new: PodView | None) -> bool:
    """Whether a change of a placed or admitted pod may change capacity or guard 3."""
    if old is None or (old.node is None and not old.admitted):
        return False
    if new is None:
        return True
    return (old.node, old.phase, old.deleting, old.scheduled) != (
        new.node,
        new.phase,
        new.deleting,
        new.scheduled,
    )
