"""What the sandbox benchmarks share: a sandbox with one reconciler replica, and the
figures written where ``make bench`` keeps them (``$BENCH_OUT``, default ``.bench/``)."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.bench_window_open import admin_gateway, rank
from sandbox.kube.server import KubeServer
from sandbox.reconciler_component import ReconcilerProcess
from sandbox.runner import Sandbox, SandboxContext
from shared.gateway import Gateway

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Box:
    """A running sandbox: its context, the kube emulator, an admin gateway, the replica."""

    ctx: SandboxContext
    kube: KubeServer
    gateway: Gateway
    replica: ReconcilerProcess


@asynccontextmanager
async def with_replica(
    ctx: SandboxContext, components: list[str], env: dict[str, str]
) -> AsyncIterator[Box]:
    """``components`` started on ``ctx``, the chart installed, one reconciler replica
    (``env`` added) running and pushed to; everything stopped on the way out."""
    box = Sandbox(ctx, components)
    await box.start()
    replica: ReconcilerProcess | None = None
    gateway: Gateway | None = None
    try:
        _, gateway = await admin_gateway(ctx, ctx.state_dir)
        replica = ReconcilerProcess(ctx, "r0", env)
        await replica.start()
        ctx.endpoints["reconciler"] = replica.url
        yield Box(ctx, ctx.handles["kube"], gateway, replica)
    finally:
        if replica is not None:
            await replica.stop()
        if gateway is not None:
            gateway.close()
        await box.stop()
        gc.collect()


def measured(
    name: str, measure: Callable[[Path], Coroutine[Any, Any, dict[str, Any]]]
) -> dict[str, Any]:
    """Run ``measure`` in a fresh state directory (kept with ``BENCH_KEEP``) and write
    what it found to ``$BENCH_OUT/<name>.json``."""
    state = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    try:
        found = asyncio.run(measure(state))
    finally:
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(state, ignore_errors=True)
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
