"""The hot path's Kubernetes client: the thread-pool gateway against an async client.

The webhook's ledger claim is one call to the API server per group of claims. This
measures the two ways to make it against the same kube emulator (on its own thread and
event loop): ``shared.gateway.Gateway`` (the official client's configuration, urllib3
in a pool of worker threads) and ``httpx.AsyncClient`` on the caller's event loop, each
GETting a GPUReservation ``REQUESTS`` times at concurrency 1 and 10, twice,
alternating. The choice it informed is written in docs/performance.md.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import httpx

from bench.bench_webhook import NS, booking, scenario
from sandbox import chart
from sandbox.install import install_base
from sandbox.runner import Sandbox, SandboxContext
from shared.gateway import Gateway, load_configuration
from shared.resources import GPU_RESERVATIONS

REQUESTS = 400
T = TypeVar("T")


async def _timed(call: Callable[[], Awaitable[object]], c: int) -> tuple[float, float]:
    latencies: list[float] = []

    async def worker() -> None:
        for _ in range(REQUESTS // c):
            t = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(c)))
    return REQUESTS / (time.perf_counter() - t0), statistics.median(latencies) * 1e3


async def gateway_run(kubeconfig: Path, c: int) -> tuple[float, float]:
    gateway = Gateway.from_kubeconfig(str(kubeconfig))
    try:
        return await _timed(lambda: gateway.get(GPU_RESERVATIONS, "res-1", NS), c)
    finally:
        gateway.close()


async def httpx_run(kubeconfig: Path, c: int) -> tuple[float, float]:
    cfg = load_configuration(str(kubeconfig))
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, cfg.key_file)
    headers = {"Accept": "application/json"}
    token = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
    if token:
        headers["Authorization"] = token
    path = GPU_RESERVATIONS.path(NS, "res-1")
    async with httpx.AsyncClient(base_url=cfg.host, verify=context, headers=headers) as client:

        async def get() -> object:
            answer = await client.get(path)
            answer.raise_for_status()
            return answer.json()

        return await _timed(get, c)


class EmulatorThread:
    """The sandbox's kube emulator served from its own thread and event loop (so a
    client in the calling thread measures the emulator, not a shared loop)."""

    def __init__(self, prefix: str) -> None:
        self.state = Path(tempfile.mkdtemp(prefix=prefix))
        self.kubeconfig = self.state / "kubeconfig"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.box = Sandbox(SandboxContext(state_dir=self.state, scenario=scenario()), ["kube"])

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run ``coro`` on the emulator's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def __enter__(self) -> EmulatorThread:
        self.thread.start()
        self.run(self.box.start())
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self.run(self.box.stop(), 30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            shutil.rmtree(self.state, ignore_errors=True)


def run() -> list[str]:
    lines = []
    with EmulatorThread("bench-client-") as emulator:
        kubeconfig = emulator.kubeconfig

        async def setup() -> None:
            gateway = Gateway.from_kubeconfig(str(kubeconfig))
            await install_base(gateway, chart.objects(NS))
            await gateway.create(GPU_RESERVATIONS, booking(1, "alice", 8), NS)
            gateway.close()

        emulator.run(setup())
        for c in (1, 10):
            for name, measure in (
                ("thread-pool gateway", gateway_run),
                ("httpx async", httpx_run),
            ) * 2:
                rps, p50 = asyncio.run(measure(kubeconfig, c))
                lines.append(f"c={c} {name}: {rps:.0f} req/s, p50 {p50:.2f} ms")
    return lines


if __name__ == "__main__":
    print("\n".join(run()))
