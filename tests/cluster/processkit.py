"""A sandbox with the process kubelet for one test: kube + cluster components, a node,
a namespace, pods of our image running ``tests/cluster/podprogram.py``."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.cluster.component import ClusterComponent
from sandbox.cluster.processes import ProcessRuntime
from sandbox.kube.component import KubeComponent
from sandbox.kube.server import KubeServer
from sandbox.runner import SandboxContext
from shared.clock import Clock, SystemClock
from shared.errors import NotFound
from shared.gateway import Gateway
from shared.resources import EVENTS, NAMESPACES, NODES, PODS
from tests.cluster.builders import node

PROGRAM = Path(__file__).with_name("podprogram.py")
IMAGE = "ghcr.io/galends/gpu-reservation:test"
NAMESPACE = "team-a"
NODE = "node-a"


@dataclass
class World:
    ctx: SandboxContext
    gateway: Gateway
    kubeconfig: Path

    @property
    def runtime(self) -> ProcessRuntime:
        runtime: ProcessRuntime = self.ctx.handles["processes"]
        return runtime

    @property
    def kube(self) -> KubeServer:
        server: KubeServer = self.ctx.handles["kube"]
        return server

    async def pod(self, name: str) -> dict[str, Any]:
        return await self.gateway.get(PODS, name, NAMESPACE)

    async def until(
        self, check: Callable[[], Awaitable[Any]], timeout_s: float = 20.0, what: str = ""
    ) -> Any:
        """Poll ``check`` until it returns a truthy value."""
        last: Any = None
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    with contextlib.suppress(NotFound):
                        last = await check()
                        if last:
                            return last
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"not reached: {what}; last {last!r}") from None

    async def pod_until(
        self, name: str, test: Callable[[dict[str, Any]], bool], timeout_s: float = 20.0
    ) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            pod = await self.pod(name)
            return pod if test(pod) else None

        result: dict[str, Any] = await self.until(check, timeout_s, f"pod {name}")
        return result

    async def reasons(self, name: str) -> list[str]:
        items = (await self.gateway.list_all(EVENTS, NAMESPACE)).items
        return [
            str(e.get("reason"))
            for e in items
            if (e.get("involvedObject") or {}).get("name") == name
        ]

    async def messages(self, name: str) -> list[str]:
        items = (await self.gateway.list_all(EVENTS, NAMESPACE)).items
        return [
            str(e.get("message"))
            for e in items
            if (e.get("involvedObject") or {}).get("name") == name
        ]

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl (call it in a thread: the emulator shares this loop)."""
        binary = shutil.which("kubectl") or "kubectl"
        return subprocess.run(
            [binary, "--kubeconfig", str(self.kubeconfig), "-n", NAMESPACE, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


def container(*args: str, name: str = "main", **fields: Any) -> dict[str, Any]:
    """A container running ``podprogram.py`` with ``args``."""
    return {
        "name": name,
        "image": IMAGE,
        "command": ["python", str(PROGRAM)],
        "args": list(args),
        **fields,
    }


def local_pod(
    name: str, *containers: dict[str, Any], labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "nodeName": NODE,
        "terminationGracePeriodSeconds": 2,
        "containers": list(containers),
        **spec,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
        "spec": body,
    }


def state(pod: dict[str, Any], index: int = 0) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    status: dict[str, Any] = statuses[index] if index < len(statuses) else {}
    return status


def waiting_reason(pod: dict[str, Any]) -> str:
    return str(((state(pod).get("state") or {}).get("waiting") or {}).get("reason") or "")


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


@contextlib.asynccontextmanager
async def world(tmp_path: Path, clock: Clock | None = None) -> AsyncIterator[World]:
    """kube + cluster on ``clock``, node ``node-a``, namespace ``team-a``."""
    ctx = SandboxContext(state_dir=tmp_path, scenario={}, clock=clock or SystemClock())
    kube, cluster = KubeComponent(), ClusterComponent()
    await kube.start(ctx)
    try:
        await cluster.start(ctx)
        path = tmp_path / "kubeconfig"
        assert ctx.kubeconfig is not None
        path.write_text(ctx.kubeconfig, encoding="utf-8")
        gateway = Gateway.from_kubeconfig(str(path))
        try:
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            await gateway.create(NAMESPACES, namespace)
            await gateway.create(NODES, node(NODE))
            yield World(ctx, gateway, path)
        finally:
            gateway.close()
            await cluster.stop()
    finally:
        await kube.stop()
        gc.collect()
