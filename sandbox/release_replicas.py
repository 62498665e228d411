"""Reconciler replicas for tests and benchmarks, run as a cluster runs them: from the
chart.

``Reconcilers`` installs the chart's release (``sandbox.release_component``) into a
running sandbox (kube, cluster, app) when a test asks for its first reconciler replica,
and runs every later one as ``kubectl scale`` of the reconciler Deployment. A test's
settings are values: its environment goes in as ``reconciler.extraEnv`` (after the
chart's own variables, so a name the chart sets is overridden, as on a cluster), the
webhook's replica count as ``webhook.replicas``. Every replica of a Deployment runs one
template, so every replica of a test has the same environment.

A test without the webhook gets the release with its webhook Deployment scaled to 0
after the install (the chart's minimum is 1): the MutatingWebhookConfiguration stays,
and its ``failurePolicy: Ignore`` lets pods through unadmitted — a cluster whose webhook
is down.

``ReconcilerPod`` is one pod: its HTTP API (``url``), its log over every start, and the
three ways a replica ends — ``signal(SIGKILL)`` (a crash: the kubelet restarts the
container, same pod and identity), ``stop()`` (the Deployment scaled down by one with
this pod removed: SIGTERM, a clean shutdown) and ``kill()`` (the pod gone without a
shutdown: the process frozen, then SIGKILLed as it is removed, so it neither runs its
shutdown nor comes back — a crashed leader that does not return).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from typing import Any

from sandbox.release import RELEASE_NAME
from sandbox.release_component import DEPLOYMENTS, ReleaseComponent, Replica
from sandbox.runner import SandboxContext
from shared import vocab
from shared.resources import PODS

#: Wall seconds a replica may take to start, or to be gone.
PATIENCE_S = 60.0
#: The cost a pod to remove is given: below every other pod's (the default is 0).
CHEAPEST = str(-(2**31))


def _extra_env(env: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": str(v)} for k, v in env.items()]


class ReconcilerPod:
    """A pod of the chart's reconciler Deployment and its process."""

    def __init__(self, kit: Reconcilers, replica: Replica, label: str) -> None:
        self._kit = kit
        self.label = label
        #: The pod's name: the replica's identity in the leader Lease.
        self.name = replica.name
        self.url = replica.url
        self.logs_dir = replica.log_path.parent

    @property
    def process(self) -> Any:
        """The current process of the pod (None once the pod is gone or between starts)."""
        return self._kit.processes.of(self._kit.namespace, self.name)

    @property
    def running(self) -> bool:
        process = self.process
        return process is not None and bool(process.alive)

    @property
    def pid(self) -> int:
        process = self.process
        assert process is not None, f"{self.name} runs no process"
        return int(process.pid)

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the pod's current process (SIGKILL: a crash, which the
        kubelet restarts; SIGSTOP: a hang)."""
        process = self.process
        if process is not None:
            process.signal(sig)

    def logs(self) -> list[dict[str, Any]]:
        """Every JSON log line of every start of the container so far."""
        files = sorted(self.logs_dir.glob("*.log"), key=lambda p: int(p.stem))
        out = []
        for path in files:
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if isinstance(entry, dict):
                        out.append(entry)
        return out

    async def stop(self) -> None:
        """``kubectl scale`` down by one, this pod the one removed: SIGTERM, a clean
        shutdown (the leader gives up its Lease); no pod replaces it."""
        await self._kit.remove(self, kill=False)

    async def kill(self) -> None:
        """The pod gone without a shutdown: frozen (SIGSTOP), removed as ``stop`` removes
        it, and SIGKILLed as the kubelet begins to terminate it — its Lease is left to
        lapse, as after a crash, and it does not come back."""
        await self._kit.remove(self, kill=True)


class Reconcilers:
    """The chart's release in a running sandbox, installed at the first ``add``."""

    def __init__(self, ctx: SandboxContext, webhook_replicas: int | None = None) -> None:
        self.ctx = ctx
        self.namespace = ctx.namespace
        #: None: no webhook (its Deployment scaled to 0 after the install).
        self.webhook_replicas = webhook_replicas
        self.release: ReleaseComponent | None = None
        self.env: dict[str, str] | None = None
        self.pods: list[ReconcilerPod] = []
        self.wanted = 0

    @property
    def processes(self) -> Any:
        return self.ctx.handles["processes"]

    async def add(self, label: str, env: dict[str, str], push: bool = True) -> ReconcilerPod:
        """One more reconciler replica with ``env`` (the release's first install, or a
        scale up by one); returns once it is Ready. ``push``: the app emulator pushes to
        it (otherwise to the replica it pushed to before, or to none)."""
        if self.release is None:
            await self._install(env)
        elif env != self.env:
            raise ValueError(
                f"replicas of one Deployment run one template: {env} is not {self.env}"
            )
        else:
            await self._scale(self.wanted + 1)
        assert self.release is not None
        known = {p.name for p in self.pods}
        fresh = [r for r in await self.release.replicas("reconciler") if r.name not in known]
        assert len(fresh) == 1, [r.name for r in fresh]
        pod = ReconcilerPod(self, fresh[0], label)
        self.pods.append(pod)
        if push:
            self.ctx.endpoints["reconciler"] = pod.url
        elif len(self.pods) == 1:
            self.ctx.endpoints.pop("reconciler", None)
        return pod

    async def _install(self, env: dict[str, str]) -> None:
        values: dict[str, Any] = {"reconciler": {"extraEnv": _extra_env(env)}}
        if self.webhook_replicas is not None:
            values["webhook"] = {"replicas": self.webhook_replicas}
        files, sets = self.ctx.handles.get("release.user", ((), ()))
        self.ctx.handles["release.user"] = ((*files, values), tuple(sets))
        release = self.release = ReleaseComponent()  # close() stops even a failed start
        await release.start(self.ctx)
        self.env, self.wanted = dict(env), 1
        if release.problems:
            raise RuntimeError(f"the release did not start: {release.problems}")
        if self.webhook_replicas is None:
            await release.scale("webhook", 0)
            self.ctx.endpoints.pop("webhook", None)

    async def _scale(self, replicas: int) -> None:
        assert self.release is not None
        self.wanted = replicas
        async with asyncio.timeout(PATIENCE_S):
            await self.release.scale("reconciler", replicas)

    async def remove(self, pod: ReconcilerPod, kill: bool) -> None:
        """Scale the Deployment down by one, ``pod`` the one removed (the lowest
        ``pod-deletion-cost`` goes first); ``kill``: frozen first, SIGKILLed as the
        kubelet starts terminating it."""
        assert self.release is not None
        gateway = self.release.gateway
        assert gateway is not None
        process = self.processes.of(self.namespace, pod.name)
        if kill and process is not None:
            process.signal(signal.SIGSTOP)
        notes = {"metadata": {"annotations": {vocab.POD_DELETION_COST: CHEAPEST}}}
        await gateway.patch(PODS, pod.name, notes, self.namespace, "merge")
        self.wanted -= 1
        name = f"{RELEASE_NAME}-reconciler"
        body = {"spec": {"replicas": self.wanted}}
        await gateway.patch(DEPLOYMENTS, name, body, self.namespace, "merge")
        async with asyncio.timeout(PATIENCE_S):
            if kill and process is not None:
                while True:
                    if self._terminating(pod.name):
                        break
                    await asyncio.sleep(0.02)
                process.signal(signal.SIGKILL)  # no SIGCONT: the pending SIGTERM stays unseen
            await self.release.settle(PATIENCE_S)
        if process is not None:
            await process.proc.wait()
        self.pods.remove(pod)

    def _terminating(self, name: str) -> bool:
        runs = self.processes.runs.values()
        return any(r.name == name and r.namespace == self.namespace and r.terminating for r in runs)

    async def close(self) -> None:
        if self.release is not None:
            await self.release.stop()
            self.release = None
