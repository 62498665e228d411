"""``cluster``: the scheduler, kubelet, process runtime, endpoints controller and
workload controller emulation as a sandbox component.

Starts after ``kube`` and talks to it over HTTP with the admin kubeconfig the kube
component published (``ctx.kubeconfig``), through ``shared.gateway.Gateway`` — the
same path every other client takes. Leave it out of ``--components`` to run the
emulator without scheduling (pods then stay Pending, as on a cluster with no scheduler).

Publishes ``ctx.handles["cluster"]`` and ``ctx.handles["processes"]`` (the
``ProcessRuntime`` running our image's pods), and registers the runtime as the kube
emulator's ``pods/log`` reader when the kube server runs in the same process.

``ctx.handles[SCOPE]``, when a namespace, confines every namespaced cache — and so the
scheduler, kubelet and controllers — to that namespace: the release's pods run, any
other pod stays Pending, untouched. For a benchmark of the API server (``python -m
bench create``): on a cluster the scheduler and kubelet spend CPUs of their own, while
here every pass over every pod would run on the emulator's event loop.
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
from sandbox.cluster.endpoints import ENDPOINTS, EndpointsController
from sandbox.cluster.kubelet import Kubelet
from sandbox.cluster.passes import Cache, cache
from sandbox.cluster.podnet import Block
from sandbox.cluster.processes import Credentials, ProcessRuntime
from sandbox.cluster.ratelimit import LimitedClient
from sandbox.cluster.scheduler import Scheduler
from sandbox.cluster.workloads import DEPLOYMENTS, JOBS, REPLICASETS
from sandbox.kube.server import KubeServer
from sandbox.runner import SandboxContext
from shared.clock import Clock
from shared.gateway import Gateway
from shared.resources import CONFIGMAPS, NODES, PODS, SECRETS, SERVICES

#: Seconds to wait for the first LIST of pods and nodes before giving up on start.
SYNC_TIMEOUT_S = 10.0
#: The ``ctx.handles`` key of the one namespace the cluster serves (absent: all).
SCOPE = "cluster.namespace"


class Cluster:
    """Scheduler, kubelet and the workload controllers over one gateway, sharing the
    caches (as kube-scheduler, the kubelet and kube-controller-manager share informers;
    each controller has its own client rate limit). With ``namespace`` every namespaced
    cache holds that namespace's objects only (nodes stay cluster-wide)."""

    def __init__(
        self,
        gateway: Gateway,
        clock: Clock,
        state_dir: Path | None = None,
        credentials: Credentials | None = None,
        namespace: str | None = None,
    ) -> None:
        self.gateway = gateway
        self.pods = cache(gateway, PODS, clock, namespace)
        self.nodes = cache(gateway, NODES, clock)
        self.replicasets = cache(gateway, REPLICASETS, clock, namespace)
        self.deployments = cache(gateway, DEPLOYMENTS, clock, namespace)
        self.jobs = cache(gateway, JOBS, clock, namespace)
        self.secrets = cache(gateway, SECRETS, clock, namespace)
        self.configmaps = cache(gateway, CONFIGMAPS, clock, namespace)
        self.services = cache(gateway, SERVICES, clock, namespace)
        self.endpoints = cache(gateway, ENDPOINTS, clock, namespace)
        self.block: Block | None = None
        self.runtime: ProcessRuntime | None = None
        if state_dir is not None:
            self.block = Block()
            self.runtime = ProcessRuntime(
                gateway, clock, state_dir, self.pods, self.secrets, self.configmaps, credentials
            )
        self.scheduler = Scheduler(gateway, clock, self.pods, self.nodes)
        self.kubelet = Kubelet(gateway, clock, self.pods, self.nodes, self.runtime, self.block)
        self.controllers = [
            EndpointsController(gateway, clock, self.services, self.pods, self.endpoints),
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
        caches = self._caches()
        loops = [
            *(c.run() for c in caches),
            self.scheduler.run(),
            self.kubelet.run(),
            *(c.run() for c in self.controllers),
        ]
        self._tasks = [asyncio.create_task(loop) for loop in loops]
        async with asyncio.timeout(SYNC_TIMEOUT_S):  # not wait_for: it can swallow a cancel
            await self._synced()

    def _caches(self) -> tuple[Cache, ...]:
        return (
            self.pods,
            self.nodes,
            self.replicasets,
            self.deployments,
            self.jobs,
            self.secrets,
            self.configmaps,
            self.services,
            self.endpoints,
        )

    async def _synced(self) -> None:
        for watched in self._caches():
            await watched.synced.wait()

    async def stop(self) -> None:
        """Stop every process, cancel every loop and close the gateway."""
        for task in self._tasks[len(self._caches()) :]:
            task.cancel()
        if self.runtime is not None:
            await self.runtime.stop()
        if self.block is not None:
            self.block.close()
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
        self._kube: KubeServer | None = None

    async def start(self, ctx: SandboxContext) -> None:
        ctx.state_dir.mkdir(parents=True, exist_ok=True)
        gateway = Gateway.from_kubeconfig(str(write_kubeconfig(ctx)))
        kube = ctx.handles.get("kube")
        scope = ctx.handles.get(SCOPE)
        self.cluster = Cluster(gateway, ctx.clock, ctx.state_dir, _credentials(kube), scope)
        try:
            await self.cluster.start()
        except BaseException:
            await self.stop()
            raise
        ctx.handles[self.name] = self.cluster
        ctx.handles["processes"] = self.cluster.runtime
        if isinstance(kube, KubeServer) and self.cluster.runtime is not None:
            kube.cluster.log_reader = self.cluster.runtime.logs
            self._kube = kube

    async def stop(self) -> None:
        if self._kube is not None:
            self._kube.cluster.log_reader = None
            self._kube = None
        if self.cluster is not None:
            await self.cluster.stop()
            self.cluster = None


def _credentials(kube: object) -> Credentials | None:
    """Kubeconfigs of service accounts, with tokens the kube emulator accepts."""
    if not isinstance(kube, KubeServer):
        return None
    server = kube

    def kubeconfig(namespace: str, account: str) -> str:
        token = server.service_account_token(namespace, account)
        return server.kubeconfig(token=token, user=account, namespace=namespace)

    return kubeconfig
