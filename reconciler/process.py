"""The reconciler process: HTTP on every replica, the acting loops on the leader.

Start order: the HTTP listener (every replica answers health, metrics and push at
once), then leader election. When this replica becomes leader it runs one full sync
and only then starts the leader's loops (every mirror's spec exists by then; the
status of the mirrors that sync created follows); when it loses the Lease the loops are
cancelled and the caches emptied (a later term acts only after its own LIST).
``stop`` (SIGTERM) cancels everything, releases the Lease so a standby takes over at
its next look, and closes the listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from collections.abc import Awaitable, Callable, Generator
from typing import Protocol

import uvicorn

from reconciler import backstop, events, usage
from reconciler.admit import Admitter
from reconciler.audit import CapacityAuditor
from reconciler.caches import STALL_S, Caches, ledger_only
from reconciler.evict import Upholders
from reconciler.forecast import Standby, forecaster
from reconciler.http import HttpState, build_app
from reconciler.leader import Elector
from reconciler.metrics import Metrics
from reconciler.noshow import Canceller, Holding, NoShows
from reconciler.ondemand import LeaseApp, Leaser
from reconciler.overstay import OverstayReporter
from reconciler.queue import QueueMetrics
from reconciler.rotation import Rotator
from reconciler.settings import ReconcilerSettings
from reconciler.sweep import Sweeper, SweepMetrics, VictimApp
from reconciler.sync import ReservationSource, Syncer
from reconciler.tasks import Tasks, end_within
from reconciler.waiting import Knowledge
from shared import model
from shared.clock import Clock
from shared.gateway import Gateway
from shared.logs import log

_log = logging.getLogger(__name__)
ELECTION_TASK = "leader-election"
#: The start of a leader term: the startup sync, then the loops are spawned.
LEAD_TASK = "leader-start"
SYNC_TASK = "reservation-sync"
AUDIT_TASK = "capacity-audit"
NOSHOW_TASK = "no-show"


class AppSource(ReservationSource, Canceller, Protocol):
    """Every call the reconciler makes of the reservation app (``AppClient``)."""


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling (the process owns SIGTERM)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class Reconciler:
    """One reconciler replica."""

    def __init__(
        self,
        settings: ReconcilerSettings,
        gateway: Gateway,
        source: AppSource,
        clock: Clock,
        leases: LeaseApp | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.metrics = Metrics()
        self.tasks = Tasks()
        ns = settings.common.namespace
        self.syncer = Syncer(
            source,
            gateway,
            ns,
            clock,
            self.metrics,
            settings.lookahead_days,
            retention=settings.usage.retention,  # usage (issue 31)
        )
        self.elector = Elector(
            gateway,
            ns,
            settings.identity,
            clock,
            settings.leader,
            self._on_leadership,
            annotations=self.syncer.health.annotations,
        )
        self.caches = Caches(
            gateway,
            settings,
            clock,
            self._class_labels,
            on_unseen=self.metrics.unseen_released.inc,
        )
        queue_metrics = QueueMetrics(self.metrics.registry)
        self.metrics.watch_ledgers(lambda: self.caches.by_name().values())

        def counted(reason: str) -> None:
            queue_metrics.events.labels(reason).inc()

        # One recorder for every Event of this process, so repeats fold into a count.
        recorder = events.Recorder()

        self.upholders = Upholders(
            self.caches,
            gateway,
            settings,
            clock,
            functools.partial(recorder.emit, on_sent=counted),
            on_evicted=lambda reason: queue_metrics.evictions.labels(reason).inc(),
        )
        self.backstop = backstop.Backstop(
            self.upholders.context,
            ns,
            scope=backstop.Scope(ns, settings.exempt_namespaces),
            mirror_current=lambda: self.syncer.fetched,
            on_evicted=lambda reason: self.metrics.unadmitted.labels(reason).inc(),
            nodes=lambda: self.caches.nodes.items,
            group=self.caches.by_reference.pods,
            times=backstop.Times(float(settings.ledger_claim_ttl_s), settings.unseen_s),
        )
        backstop.wire(self.backstop, self.caches)
        self.admitter = Admitter(
            gateway,
            self.caches,
            settings,
            clock,
            queue_metrics,
            Knowledge(lambda: self.syncer.fetched, self._class_labels),
            recorder.emit,
        )
        self.auditor = CapacityAuditor(
            gateway,
            ns,
            clock,
            self.metrics,
            self.caches.inventory,
            lambda: self.syncer.classes if self.syncer.classes_known else None,
            float(settings.capacity_check_s),
            recorder=recorder,
        )
        self.leaser = (
            Leaser(
                leases,
                gateway,
                self.caches,
                self.admitter,
                self.syncer.writer,
                settings,
                clock,
                lambda: self.syncer.classes,
                self.metrics.registry,
                overcommit=self.auditor.deficits,
                relinker=self.upholders.relinker,
                health=self.syncer.health,
            )
            if leases is not None
            else None
        )
        self.rotator = Rotator(gateway, settings.rotation, clock)
        self.sweeper = Sweeper(
            gateway,
            clock,
            functools.partial(recorder.emit, on_sent=counted),
            pods=lambda: self.caches.pods.items,
            reservations=self.caches.by_name,
            inventory=self.caches.inventory,
            ready=self.caches.ready,
            app=source if isinstance(source, VictimApp) else None,
            settings=settings.preemption,
            rules=settings.rules,
            zone=settings.common.display_timezone,
            lock=self.upholders.relinker.lock,
            metrics=SweepMetrics(self.metrics.registry),
        )
        if settings.preemption.overstay_report and isinstance(source, VictimApp):
            reporter = OverstayReporter(
                source, clock, self.caches.by_name, use_group=settings.rules.use_group
            )
            self.caches.pods.listeners.append(reporter.pod_changed)
        self.standby = Standby(Caches(gateway, settings, clock, self._class_labels))
        self.metrics.watch_inventory(self.caches.inventory)
        self.noshows = NoShows(
            gateway,
            source,
            settings,
            clock,
            self.metrics,
            lambda: self.caches.pods.items,
            self.caches.by_name,
            self.caches.ready,
            mirror=self.syncer.record,
        )
        self.caches.reservations.listeners.append(self._reservation_changed)
        # usage (issue 31): booked versus used accounting on the leader's caches.
        self.usage = usage.setup(
            gateway, ns, clock, self.caches, self.metrics.registry, settings.usage
        )
        #: Wakes the no-show loop when a booking gains its first or loses its last holder.
        self.holding = Holding(self.noshows.touch)
        self.caches.pods.listeners.append(self.holding.changed)
        self._leading = False
        self._stopping = False
        self._lead_task: asyncio.Task[None] | None = None
        self._switch_task: asyncio.Task[None] | None = None
        self._server: _Server | None = None
        self._server_task: asyncio.Task[None] | None = None

    @property
    def is_leader(self) -> bool:
        return self._leading

    def leader_loops(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """The loops only the leader runs (started after the startup sync)."""
        interval = self.settings.fetch_interval_s
        return [
            (SYNC_TASK, lambda: self.syncer.run(interval)),
            *self.caches.loops(),
            *self.upholders.loops(),
            (
                backstop.BACKSTOP_TASK,
                lambda: self.backstop.run(float(self.settings.queue_interval_s)),
            ),
            *self.admitter.loops(),
            *(self.leaser.loops() if self.leaser is not None else []),
            *self.rotator.loops(),
            *self.sweeper.loops(),
            (AUDIT_TASK, self.auditor.run),
            (NOSHOW_TASK, self.noshows.run),
            *self.usage.loops(),  # usage (issue 31)
        ]

    def _reservation_changed(
        self, key: str, old: model.GPUReservation | None, new: model.GPUReservation | None
    ) -> None:
        """Wake the no-show loop and the preemption sweep when a reservation's facts or
        no-show record changed: neither reads the holds (the pods tell which bookings
        are held and what they use)."""
        if not ledger_only(old, new):
            self.noshows.touch()
            self.sweeper.touch()

    def _class_labels(self) -> set[str] | None:
        """The app's class labels once its class list was fetched (else unknown)."""
        if not self.syncer.classes_known:
            return None
        return {c.label_value for c in self.syncer.classes.values() if c.label_value}

    async def start(self, sock: socket.socket | None = None) -> None:
        """Serve HTTP, then join the election (or lead at once when it is disabled)."""
        await self._serve(sock)
        if self.settings.leader.enabled:
            self.standby.start()
            self.tasks.spawn(ELECTION_TASK, self.elector.run)
        else:
            self._on_leadership(True)
        log(_log, logging.INFO, "startup.ready", identity=self.settings.identity)

    async def stop(self) -> None:
        """Cancel every loop, release the Lease, close the listener."""
        log(_log, logging.INFO, "shutdown.start")
        self._stopping = True
        await self.tasks.cancel(ELECTION_TASK)  # no leadership change after this
        self._leading = False
        if self._switch_task is not None:
            await asyncio.gather(self._switch_task, return_exceptions=True)
        await self._stop_leading()
        await self.standby.stop()
        await self.tasks.cancel()
        await self.elector.release()
        if self._server is not None and self._server_task is not None:
            self._server.should_exit = True
            await self._server_task
        log(_log, logging.INFO, "shutdown.complete")

    def _on_leadership(self, leading: bool) -> None:
        self._leading = leading
        self.metrics.leader.set(1 if leading else 0)
        previous = self._switch_task
        self._switch_task = asyncio.create_task(self._switch(leading, previous))

    async def _switch(self, leading: bool, previous: asyncio.Task[None] | None) -> None:
        """One leadership change, after the previous one finished (a loss and a gain in
        quick succession must not let the stop cancel the new term's start)."""
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        if not leading:
            await self._stop_leading()
            if not self._stopping:
                self.standby.start()
        elif self._leading and self._lead_task is None:
            await self.standby.stop()
            self._lead_task = asyncio.create_task(self._lead(), name=LEAD_TASK)

    async def _lead(self) -> None:
        """The startup sync, then the loops; the status of the mirrors that sync
        created (phase, an empty ledger: nothing the loops or the webhook wait for) is
        written once the loops run."""
        await self.syncer.sync_once(defer_status=True)
        for name, loop in self.leader_loops():
            self.tasks.spawn(name, loop)
        log(_log, logging.INFO, "leader.loops_started", loops=[n for n, _ in self.leader_loops()])
        await self.syncer.write_deferred_status()

    async def _stop_leading(self) -> None:
        if self._lead_task is not None:
            await end_within({LEAD_TASK: self._lead_task}, self.tasks.grace_s)
            self._lead_task = None
        await self.tasks.cancel(*(n for n, _ in self.leader_loops()))
        self.caches.reset()
        self.holding.clear()
        self.noshows.reset()
        self.auditor.reset()
        self.usage.reset()  # usage (issue 31)

    def _current_caches(self) -> Caches:
        """The caches this replica runs now: the leader's, or its standby watches."""
        return self.caches if self._leading else self.standby.caches

    async def _serve(self, sock: socket.socket | None) -> None:
        state = HttpState(
            self.tasks,
            self.metrics,
            self.syncer,
            self.settings.inbound_token,
            lambda: self._leading,
            forecaster(
                self._current_caches,
                self.settings.preemption,
                self.settings.rules,
                self.clock,
            ),
            stalled=lambda: self._current_caches().stalled(STALL_S),
        )
        config = uvicorn.Config(
            build_app(state),
            host=self.settings.http_host,
            port=self.settings.http_port,
            log_config=None,
            access_log=False,
            lifespan="off",
        )
        self._server = _Server(config)
        sockets = [sock] if sock is not None else None
        self._server_task = asyncio.create_task(self._server.serve(sockets))
        while not self._server.started:
            if self._server_task.done():
                await self._server_task
                raise RuntimeError(f"HTTP listener on port {self.settings.http_port} failed")
            await asyncio.sleep(0.01)
