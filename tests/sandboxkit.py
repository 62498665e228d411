"""The sandbox's emulators for one test: started on a given clock, the chart's
namespace, CRD and RBAC installed, an admin gateway and an HTTP client — and the
reservation app's control API for making bookings. Shared by the integration tests
(``tests/reconciler/test_integration.py``, which run our processes from the chart's
release: ``sandbox.release_replicas``) and the fault harness (``tests/faults``)."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sandbox import chart
from sandbox.install import install_base
from sandbox.runner import Sandbox, SandboxContext
from sandbox.scenario import load_scenario
from shared.clock import Clock
from shared.gateway import Gateway


async def install(kubeconfig: Path, namespace: str) -> None:
    """The chart's namespace, CRD and RBAC, put in with the admin ``kubeconfig``
    (existing objects are kept or replaced); returns once GPUReservations are served."""
    gateway = Gateway.from_kubeconfig(str(kubeconfig))
    try:
        await install_base(gateway, chart.objects(namespace))
    finally:
        gateway.close()


@dataclass
class Emulated:
    """What ``emulators`` hands a test."""

    ctx: SandboxContext
    gateway: Gateway
    http: httpx.AsyncClient


@asynccontextmanager
async def emulators(
    tmp_path: Path,
    components: tuple[str, ...] = ("kube", "app"),
    *,
    clock: Clock | None = None,
    scenario: dict[str, Any] | None = None,
    handles: dict[str, Any] | None = None,
    kubeconfig: str = "admin.kubeconfig",
    http_timeout_s: float = 5.0,
    **gateway_options: Any,
) -> AsyncIterator[Emulated]:
    """The emulators (``components``) on ``clock`` seeded from ``scenario`` (the default
    one when None); ``handles`` are put on the context first (e.g. ``release.user``).
    The admin kubeconfig is written to ``tmp_path / kubeconfig``; ``gateway_options`` go
    to the gateway built on it. Everything is stopped on the way out."""
    ctx = SandboxContext(state_dir=tmp_path, scenario=scenario or load_scenario())
    if clock is not None:
        ctx.clock = clock
    ctx.handles.update(handles or {})
    sandbox = Sandbox(ctx, list(components))
    await sandbox.start()
    try:
        assert ctx.kubeconfig is not None
        path = tmp_path / kubeconfig
        path.write_text(ctx.kubeconfig, encoding="utf-8")
        await install(path, ctx.namespace)
        gateway = Gateway.from_kubeconfig(str(path), **gateway_options)
        try:
            async with httpx.AsyncClient(timeout=http_timeout_s) as http:
                yield Emulated(ctx, gateway, http)
        finally:
            gateway.close()
    finally:
        await sandbox.stop()
        gc.collect()  # reap the emulators' leftover transports inside the filtered test


async def book(
    http: httpx.AsyncClient,
    app: str,
    *,
    user: str = "alice",
    gpus: int = 2,
    start: str = "+0s",
    end: str = "+1h",
    gpu_class: str = "a100",
) -> int:
    """A booking of ``user``'s (group ``lab``) made through the app emulator's control
    API at ``app``; its id. ``start``/``end`` are offsets from the app's now."""
    body = {
        "username": user,
        "group": "lab",
        "gpu_class": gpu_class,
        "gpu_count": gpus,
        "start": start,
        "end": end,
    }
    answer = await http.post(f"{app}/_sandbox/bookings", json=body)
    assert answer.status_code == 201, answer.text
    rid: int = answer.json()["id"]
    return rid
