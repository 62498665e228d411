"""``cluster``: the scheduler, kubelet and workload controller emulation as a sandbox
component.

Starts after ``kube`` and talks to it over HTTP with the admin kubeconfig the kube
component published (``ctx.kubeconfig``), through ``shared.gateway.Gateway`` — the
same path every other client takes. Leave it out of ``--components`` to run the
emulator without scheduling (pods then stay Pending, as on a cluster with no scheduler).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from sandbox.cluster.controllers import (
    DeploymentController,
    GarbageCollector,
    JobController,
    ReplicaSetController,
)
from sandbox.cluster.kubelet import Kubelet
from sandbox.cluster.passes import cache
from sandbox.cluster.ratelimit import LimitedClient
from sandbox.cluster.scheduler import Scheduler
from sandbox.cluster.workloads import DEPLOYMENTS, JOBS, REPLICASETS
from sandbox.runner import SandboxContext
from shared.clock import Clock
from shared.gateway import Gateway
from shared.resources import NODES, PODS

#: Seconds to wait for the first LIST of pods and nodes before giving up on start.
SYNC_TIMEOUT_S = 10.0


class Cluster:
    """Scheduler, kubelet and the workload controllers over one gateway, sharing the
    caches (as kube-scheduler, the kubelet and kube-controller-manager share informers;
    each controller has its own client rate limit)."""

    def __init__(self, gateway: Gateway, clock: Clock) -> None:
        self.gateway = gateway
        self.pods = cache(gateway, PODS, clock)
        self.nodes = cache(gateway, NODES, clock)
        self.replicasets = cache(gateway, REPLICASETS, clock)
        self.deployments = cache(gateway, DEPLOYMENTS, clock)
        self.jobs = cache(gateway, JOBS, clock)
        self.scheduler = Scheduler(gateway, clock, self.pods, self.nodes)
        self.kubelet = Kubelet(gateway, clock, self.pods, self.nodes)
        self.controllers = [
            ReplicaSetController(LimitedClient(gateway), clock, self.replicasets, self.pods),
            DeploymentController(LimitedClient(gateway), clock, self.deployments, self.replicasets),
            JobController(LimitedClient(gateway), clock, self.jobs, self.pods),
            GarbageCollector(
                LimitedClient(gateway),
                clock,
                self.pods,
                self.replicasets,
                self.jobs,
                self.deployments,
            ),
        ]
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start the caches and every loop; returns once the caches are filled."""
        caches = (self.pods, self.nodes, self.replicasets, self.deployments, self.jobs)
        loops = [
            *(c.run() for c in caches),
            self.scheduler.run(),
            self.kubelet.run(),
            *(c.run() for c in self.controllers),
        ]
        self._tasks = [asyncio.create_task(loop) for loop in loops]
        async with asyncio.timeout(SYNC_TIMEOUT_S):  # not wait_for: it can swallow a cancel
            await self._synced()

    async def _synced(self) -> None:
        for watched in (self.pods, self.nodes, self.replicasets, self.deployments, self.jobs):
            await watched.synced.wait()

    async def stop(self) -> None:
        """Cancel every loop and close the gateway."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self.gateway.close()


def write_kubeconfig(ctx: SandboxContext) -> Path:
    """The admin kubeconfig as a file this component's gateway can load."""
    if ctx.kubeconfig is None:
        raise RuntimeError("the cluster component needs the kube component (no kubeconfig)")
    path = ctx.state_dir / "cluster.kubeconfig"
    path.write_text(ctx.kubeconfig, encoding="utf-8")
    path.chmod(0o600)
    return path


class ClusterComponent:
    """The ``cluster`` component: scheduler and kubelet against ``ctx.endpoints["kube"]``."""

    name = "cluster"

    def __init__(self) -> None:
        self.cluster: Cluster | None = None

    async def start(self, ctx: SandboxContext) -> None:
        ctx.state_dir.mkdir(parents=True, exist_ok=True)
        gateway = Gateway.from_kubeconfig(str(write_kubeconfig(ctx)))
        self.cluster = Cluster(gateway, ctx.clock)
        try:
            await self.cluster.start()
        except BaseException:
            await self.stop()
            raise
        ctx.handles[self.name] = self.cluster

    async def stop(self) -> None:
        if self.cluster is not None:
            await self.cluster.stop()
            self.cluster = None
