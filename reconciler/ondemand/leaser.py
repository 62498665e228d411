"""Just-in-time on-demand leases on the leader (R15–R22): the lease loop, ``Leaser``.

``once`` is one batch, in phases:

1. *read* the caches once (``vetting.read_context``) and list the *due* candidates:
   every waiting GPU pod that routing sends to JIT whose retry time has come;
2. *vet* them oldest first (``vetting.vet``: the five guards of
   ``shared.policy.ondemand.preflight``) and *tell* each held pod why (throttled;
   ungated first when it waits for the scheduler's verdict), then *report* the paused
   classes (the gate warning, R38);
3. *select* (``ONDEMAND_DELEGATE_ADMISSION``: the app chooses) and *ask* concurrently
   (``asking.Asker``: a grant is mirrored and its pod admitted through the shared
   admission step; a failed admission revokes the lease);
4. *announce* the batch's admissions in the background, then *keep* the leases:
   ``reconciler.ondemand.leases.LeaseKeeper`` merges, tears down and cancels orphans on
   the caches as they are after the asks (so a pending pod replays its key before the
   orphan rule looks at its lease).

Triggers (``docs/developer/ondemand.md``): a new pending GPU pod (at most one batch in flight
plus one trailing, after a short settle), a candidate held for lack of a verdict
getting one (R21), capacity changes for candidates held on it, a pod under a lease
finishing or leaving, a booking appearing, the keeper's timers, the earliest retry
time, and the ``QUEUE_PROCESSOR_INTERVAL`` tick.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping

from prometheus_client import CollectorRegistry

from reconciler.admission import pending
from reconciler.admission.announce import Admitted
from reconciler.admission.relink import Relinker
from reconciler.admission.step import Admission
from reconciler.base.apphealth import AppHealth, Health
from reconciler.base.caches import Caches
from reconciler.base.component import Ground
from reconciler.base.kube import KubeWriter
from reconciler.base.loops import sleep_unless, until_ready
from reconciler.base.metrics import LeaseMetrics
from reconciler.base.mirroring import MirrorView, MirrorWriter
from reconciler.base.pods import PodView
from reconciler.base.settings import ReconcilerSettings
from reconciler.ondemand import status as ondemand_status
from reconciler.ondemand import vetting
from reconciler.ondemand.asking import Asker, LeaseApp
from reconciler.ondemand.leases import LeaseKeeper
from reconciler.ondemand.vetting import RECHECKED, Context, Track, Vetted, moved
from shared.appclient import GpuClass
from shared.clock import Clock
from shared.errors import KubeError
from shared.logs import log
from shared.model import GPUReservation, Kind
from shared.policy.ondemand import Held, Preflight
from shared.resources import PODS

_log = logging.getLogger(__name__)
LEASE_TASK = "ondemand-leases"
#: After a trigger, a batch waits this long (seconds) for the rest of a burst, again
#: while triggers keep coming or the scheduler has yet to judge a waiting pod, at most
#: SETTLE_MAX_S in all.
SETTLE_S = 0.1
SETTLE_MAX_S = 1.5


class Leaser:
    """The on-demand lease path of one leader term."""

    def __init__(
        self,
        app: LeaseApp,
        gateway: KubeWriter,
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
        #: The app's health: the poll's answers and this path's own (shared with the
        #: leader, which publishes it); an answer after an outage makes its pods due.
        self.health = health if health is not None else AppHealth(clock)
        self.health.listeners.append(self._app_health)
        self._gateway = gateway
        self._caches = caches
        self._admission = admission
        self._settings = settings
        self._clock = clock
        self._classes = classes
        self._overcommit = overcommit
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
        self._wake = asyncio.Event()
        self.asker = Asker(
            app,
            gateway,
            caches,
            admission,
            writer,
            self.keeper,
            settings,
            clock,
            classes,
            self.metrics,
            self.health,
            tracks=self.tracks,
            placed=self._placed,
            wake=self._wake,
            rand=rand,
        )
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
                if not await sleep_unless(self._clock, self._wake, self._delay(tick_s)):
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
        """One batch: read, vet and tell, select and ask, announce, then keep the leases
        (on the caches as they are by then, so a pod still pending after a restart
        replays its key and uses its lease before the orphan rule looks at it)."""
        if not self._caches.ready():
            return
        ctx = self._context()
        due = vetting.due(ctx, self.tracks, self._placed, self._settings)
        vetted = vetting.vet(due, ctx, self.tracks, self._settings)
        await asyncio.gather(*(self._hold(pod, pre, ctx) for pod, pre in vetted.held))
        self.gates.report(vetted.gated, ctx.now, bool(due), ctx.stuck, ctx.deficits)
        if vetted.eligible:
            self.batches += 1
            self.metrics.batches.inc()
        granted = await self.asker.select(vetted.eligible, ctx)
        await asyncio.gather(*(self.asker.ask(pod, ctx) for pod in granted))
        admitted = self.asker.take_admitted()
        self._log_batch(ctx, len(due), vetted, len(granted), len(admitted))
        self._announce(admitted)
        self.metrics.candidates.set(len(self.tracks))
        after = self._context()
        await self.keeper.merge(after.now, after.pods, after.pool)
        await self.keeper.teardown(after.now, after.pods, after.pool)

    def _context(self) -> Context:
        return vetting.read_context(
            self._caches, self._classes(), self._overcommit(), self._settings, self._clock.now()
        )

    def _log_batch(self, ctx: Context, due: int, vetted: Vetted, asked: int, admitted: int) -> None:
        """The ``ondemand.batch`` line of a batch that had eligible pods."""
        if vetted.eligible:
            log(
                _log,
                logging.INFO,
                "ondemand.batch",
                batch=self.batches,
                due=due,
                eligible=len(vetted.eligible),
                asked=asked,
                admitted=admitted,
                settled_s=round(self._settled_s, 3),
                took_s=round((self._clock.now() - ctx.now).total_seconds(), 3),
            )
        self._settled_s = 0.0

    def _announce(self, admitted: list[Admitted]) -> None:
        """Announce the batch's admissions in the background: the trailing batch need
        not wait for it."""
        if admitted:
            task = asyncio.create_task(self._admission.announce(admitted, self._clock.now()))
            self._announcing.add(task)
            task.add_done_callback(self._announcing.discard)

    # --- holds ---------------------------------------------------------------------------

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


def setup(
    ground: Ground,
    app: LeaseApp,
    step: Admission,
    mirror: MirrorView,
    overcommit: Callable[[], Mapping[str, int]],
    relinker: Relinker,
) -> Leaser:
    """The lease path of one leader term: it admits through ``step`` (shared with the
    reserved queue), mirrors grants through the ``mirror``'s writer and shares its view
    of the app's health and classes; subscribed to the pod, node and reservation
    caches."""
    return Leaser(
        app,
        ground.gateway,
        ground.caches,
        step,
        mirror.writer,
        ground.settings,
        ground.clock,
        lambda: mirror.classes,
        ground.metrics.registry,
        overcommit=overcommit,
        relinker=relinker,
        health=mirror.health,
    )
