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
from collections.abc import Generator
from typing import Protocol

import uvicorn

from reconciler import usage
from reconciler.admission import step as admission_step
from reconciler.backstop import backstop, lingering
from reconciler.base import events
from reconciler.base.caches import STALL_S, Caches
from reconciler.base.component import Component, Ground, Loop
from reconciler.base.kube import KubeWatcher
from reconciler.base.metrics import Metrics, QueueMetrics
from reconciler.base.settings import ReconcilerSettings
from reconciler.base.tasks import Tasks, end_within
from reconciler.capacity import audit, noshow
from reconciler.capacity.noshow import Canceller
from reconciler.http import HttpState, build_app
from reconciler.leader import Elector
from reconciler.mirror.sync import ReservationSource, Syncer
from reconciler.ondemand import leaser
from reconciler.ondemand.asking import LeaseApp
from reconciler.preemption import sweep
from reconciler.preemption.forecast import Standby, forecaster
from reconciler.preemption.sweep import VictimApp
from reconciler.queue import admit, evict
from reconciler.rotation import Rotator
from shared.appclient import GpuClass
from shared.clock import Clock
from shared.gateway import Gateway
from shared.logs import log

_log = logging.getLogger(__name__)
ELECTION_TASK = "leader-election"
#: The start of a leader term: the startup sync, then the loops are spawned.
LEAD_TASK = "leader-start"


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
        victims: VictimApp | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.metrics = Metrics()
        self.tasks = Tasks()
        ns = settings.common.namespace
        self.caches = Caches(
            gateway,
            settings,
            clock,
            self._class_labels,
            on_unseen=self.metrics.unseen_released.inc,
        )
        self.syncer = Syncer(
            source,
            gateway,
            ns,
            clock,
            self.metrics,
            settings.lookahead_days,
            interval_s=float(settings.fetch_interval_s),
            retention=settings.usage.retention,
            references=self.caches.live_references,
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
        self.metrics.watch_ledgers(lambda: self.caches.by_name().values())
        self.metrics.watch_inventory(self.caches.inventory)
        ground = self._ground(gateway)
        self.upholders = evict.setup(ground)
        self.backstop = backstop.setup(ground, self.upholders.context)
        self.lingering = lingering.setup(ground, self.upholders.context, self.backstop.scope)
        # The admission step the reserved queue and the on-demand path share.
        step = admission_step.setup(ground)
        self.announcer = step.announcer
        self.admitter = admit.setup(ground, step)
        self.auditor = audit.setup(ground, self._classes_if_known)
        self.leaser = (
            leaser.setup(
                ground,
                leases,
                step,
                self.syncer,
                overcommit=self.auditor.deficits,
                relinker=self.upholders.relinker,
            )
            if leases is not None
            else None
        )
        self.rotator = Rotator(gateway, settings.rotation, clock)
        self.sweeper = sweep.setup(ground, victims, lock=self.upholders.relinker.lock)
        self.noshows, self.holding = noshow.setup(ground, source, mirror=self.syncer.record)
        self.usage = usage.setup(ground)
        #: What the leader runs, in the order its loops start.
        self.components: list[Component] = [
            self.syncer,
            self.caches,
            self.upholders,
            self.backstop,
            self.lingering,
            self.admitter,
            *([self.leaser] if self.leaser is not None else []),
            self.rotator,
            self.sweeper,
            self.auditor,
            self.noshows,
            self.usage,
        ]
        self.standby = Standby(Caches(gateway, settings, clock, self._class_labels))
        self._leading = False
        self._stopping = False
        self._lead_task: asyncio.Task[None] | None = None
        self._switch_task: asyncio.Task[None] | None = None
        self._server: _Server | None = None
        self._server_task: asyncio.Task[None] | None = None

    @property
    def is_leader(self) -> bool:
        return self._leading

    def leader_loops(self) -> list[Loop]:
        """The loops only the leader runs (started after the startup sync)."""
        return [loop for component in self.components for loop in component.loops()]

    def _ground(self, gateway: KubeWatcher) -> Ground:
        """What every component's setup is handed: one Event recorder for the whole
        process (repeats fold into a count), its Events counted by reason."""
        queue_metrics = QueueMetrics(self.metrics.registry)

        def counted(reason: str) -> None:
            queue_metrics.events.labels(reason).inc()

        recorder = events.Recorder()
        return Ground(
            gateway,
            self.settings,
            self.clock,
            self.caches,
            self.metrics,
            queue_metrics,
            recorder,
            functools.partial(recorder.emit, on_sent=counted),
            lambda: self.syncer.fetched,
            self._class_labels,
        )

    def _classes_if_known(self) -> dict[int, GpuClass] | None:
        """The app's classes once their list was fetched (the audit waits till then)."""
        return self.syncer.classes if self.syncer.classes_known else None

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
        self.announcer.begin()
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
        self.usage.reset()

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
