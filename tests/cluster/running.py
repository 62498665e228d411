"""The kube and cluster components started for one test, with an admin gateway."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator
from pathlib import Path

from sandbox.cluster.component import SCOPE, ClusterComponent
from sandbox.kube.component import KubeComponent
from sandbox.runner import SandboxContext
from shared.errors import Conflict
from shared.gateway import Gateway
from shared.resources import NAMESPACES


@contextlib.asynccontextmanager
async def cluster_gateway(
    tmp_path: Path, *namespaces: str, scope: str | None = None
) -> AsyncIterator[Gateway]:
    """The emulated API server with its scheduler and kubelet (serving only ``scope``'s
    pods when given), an empty scenario and ``namespaces``; an admin gateway on it.
    Everything is stopped on the way out."""
    ctx = SandboxContext(state_dir=tmp_path, scenario={})
    if scope is not None:
        ctx.handles[SCOPE] = scope
    kube, cluster = KubeComponent(), ClusterComponent()
    await kube.start(ctx)
    await cluster.start(ctx)
    path = tmp_path / "kubeconfig"
    assert ctx.kubeconfig is not None
    path.write_text(ctx.kubeconfig, encoding="utf-8")
    client = Gateway.from_kubeconfig(str(path))
    try:
        for namespace in namespaces:
            with contextlib.suppress(Conflict):
                body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
                await client.create(NAMESPACES, body)
        yield client
    finally:
        client.close()
        await cluster.stop()
        await kube.stop()
        gc.collect()
