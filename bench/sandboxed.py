"""What the sandbox benchmarks share: a sandbox with one reconciler replica, and the
figures written where ``make bench`` keeps them (``$BENCH_OUT``, default ``.bench/``)."""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sandbox import chart
from sandbox.install import install_base
from sandbox.kube.server import KubeServer
from sandbox.release_replicas import ReconcilerPod, Reconcilers
from sandbox.runner import Sandbox, SandboxContext
from shared.gateway import Gateway

ROOT = Path(__file__).resolve().parent.parent

T = TypeVar("T")


def rank(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def admin_gateway(ctx: SandboxContext, state: Path) -> tuple[Path, Gateway]:
    """The sandbox's admin kubeconfig written under ``state``, the chart's namespace, CRD
    and RBAC installed with it, and a gateway on it (the caller closes it)."""
    assert ctx.kubeconfig is not None
    admin = state / "admin.kubeconfig"
    admin.write_text(ctx.kubeconfig, encoding="utf-8")
    gateway = Gateway.from_kubeconfig(str(admin))
    await install_base(gateway, chart.objects(ctx.namespace))
    return admin, gateway


@dataclass
class Box:
    """A running sandbox: its context, the kube emulator, an admin gateway (and its
    kubeconfig's path), the replica."""

    ctx: SandboxContext
    kube: KubeServer
    gateway: Gateway
    replica: ReconcilerPod
    admin: Path


@asynccontextmanager
async def with_replica(
    ctx: SandboxContext,
    components: list[str],
    env: dict[str, str],
    *,
    pushed: bool = True,
    webhook_replicas: int = 1,
) -> AsyncIterator[Box]:
    """``components`` started on ``ctx`` with the cluster, and the chart's release
    installed with one reconciler replica (``env`` as ``reconciler.extraEnv``) run by the
    process kubelet; everything stopped on the way out. ``"webhook"`` in ``components``:
    the release's webhook runs ``webhook_replicas`` pods (else it is scaled to 0). The
    app emulator pushes its changes to the replica unless ``pushed`` is false (the
    replica then learns of bookings only by fetching them)."""
    names = [*(c for c in components if c != "webhook"), "cluster"]
    box = Sandbox(ctx, list(dict.fromkeys(names)))
    await box.start()
    kit = Reconcilers(ctx, webhook_replicas if "webhook" in components else None)
    gateway: Gateway | None = None
    try:
        admin, gateway = await admin_gateway(ctx, ctx.state_dir)
        replica = await kit.add("r0", env, push=pushed)
        yield Box(ctx, ctx.handles["kube"], gateway, replica, admin)
    finally:
        await kit.close()
        if gateway is not None:
            gateway.close()
        await box.stop()
        gc.collect()


def in_fresh_state(name: str, measure: Callable[[Path], Coroutine[Any, Any, T]]) -> T:
    """Run ``measure`` in a fresh state directory (kept with ``BENCH_KEEP``)."""
    state = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    try:
        return asyncio.run(measure(state))
    finally:
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(state, ignore_errors=True)


def measured(
    name: str, measure: Callable[[Path], Coroutine[Any, Any, dict[str, Any]]]
) -> dict[str, Any]:
    """Run ``measure`` in a fresh state directory (``in_fresh_state``) and write what it
    found to ``$BENCH_OUT/<name>.json``."""
    found = in_fresh_state(name, measure)
    folder = Path(os.environ.get("BENCH_OUT", ROOT / ".bench"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
    return found


def spread(what: str, values: list[float | None], give_up_s: float) -> str:
    """One printed line of lags: p50, p99 and max of those measured, and how many were
    lost (none within ``give_up_s``)."""
    got = sorted(v for v in values if v is not None)
    if not got:
        return f"{what}: none within {give_up_s:.0f} s"
    marks = f"p50 {rank(got, 0.5):.3f} s, p99 {rank(got, 0.99):.3f} s, max {got[-1]:.3f} s"
    lost = len(values) - len(got)
    return f"{what}: {marks} ({len(got)} measured" + (f", {lost} lost)" if lost else ")")
