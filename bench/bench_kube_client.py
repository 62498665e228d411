"""The hot path's Kubernetes client: the thread-pool gateway against an async client.

The webhook's ledger claim is one call to the API server per group of claims. This
measures the ways to make it against the same kube emulator (on its own thread and
event loop): ``shared.gateway.Gateway`` (the official client's configuration, urllib3
in a pool of worker threads), ``shared.gateway.loop.LoopGateway`` (the gateway's calls
through aiohttp on the caller's loop) and bare ``aiohttp`` on the caller's loop (and
``httpx.AsyncClient`` when ``BENCH_HTTPX`` is set: measured much slower before), each
GETting a GPUReservation ``REQUESTS`` times at concurrency 1 and 10, twice,
alternating. Printed per run: calls/s, p50, and the client's CPU per call (the
process's CPU less the emulator thread's). The choice it informed is written in
docs/developer/performance.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import httpx

from bench.bench_webhook import NS, booking, scenario
from sandbox import chart
from sandbox.install import install_base
from sandbox.runner import Sandbox, SandboxContext
from shared.gateway import Gateway, load_configuration
from shared.gateway.loop import LoopGateway
from shared.resources import GPU_RESERVATIONS

REQUESTS = 400
T = TypeVar("T")


#: The emulator's thread, whose CPU is not the client's (set by ``run``).
_SERVER: list[threading.Thread] = []


@dataclass(frozen=True)
class Figures:
    """One run: calls per second, median latency, and the client's CPU per call (the
    process's CPU less the emulator thread's: every client thread counts)."""

    rps: float
    p50_ms: float
    cpu_ms: float


def _client_cpu() -> float:
    server = sum(thread_cpu(t) for t in _SERVER)
    return time.process_time() - server


async def _timed(call: Callable[[], Awaitable[object]], c: int) -> Figures:
    latencies: list[float] = []

    async def worker() -> None:
        for _ in range(REQUESTS // c):
            t = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - t)

    await call()  # the first connection's handshake is not what is measured
    cpu = _client_cpu()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(c)))
    wall = time.perf_counter() - t0
    return Figures(
        REQUESTS / wall,
        statistics.median(latencies) * 1e3,
        (_client_cpu() - cpu) / REQUESTS * 1e3,
    )


async def gateway_run(kubeconfig: Path, c: int) -> Figures:
    gateway = Gateway.from_kubeconfig(str(kubeconfig))
    try:
        return await _timed(lambda: gateway.get(GPU_RESERVATIONS, "res-1", NS), c)
    finally:
        gateway.close()


async def loop_gateway_run(kubeconfig: Path, c: int) -> Figures:
    gateway = LoopGateway.from_kubeconfig(str(kubeconfig))
    try:
        return await _timed(lambda: gateway.get(GPU_RESERVATIONS, "res-1", NS), c)
    finally:
        await gateway.aclose()


def _tls_and_headers(kubeconfig: Path) -> tuple[str, ssl.SSLContext, dict[str, str]]:
    cfg = load_configuration(str(kubeconfig))
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, cfg.key_file)
    headers = {"Accept": "application/json"}
    token = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
    if token:
        headers["Authorization"] = token
    return cfg.host, context, headers


async def aiohttp_run(kubeconfig: Path, c: int) -> Figures:
    host, context, headers = _tls_and_headers(kubeconfig)
    url = host + GPU_RESERVATIONS.path(NS, "res-1")
    connector = aiohttp.TCPConnector(ssl=context, limit=16)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

        async def get() -> object:
            async with session.get(url) as answer:
                answer.raise_for_status()
                return json.loads(await answer.read())

        return await _timed(get, c)


async def httpx_run(kubeconfig: Path, c: int) -> Figures:
    host, context, headers = _tls_and_headers(kubeconfig)
    path = GPU_RESERVATIONS.path(NS, "res-1")
    async with httpx.AsyncClient(base_url=host, verify=context, headers=headers) as client:

        async def get() -> object:
            answer = await client.get(path)
            answer.raise_for_status()
            return answer.json()

        return await _timed(get, c)


def thread_cpu(thread: threading.Thread) -> float:
    """CPU seconds ``thread`` has used."""
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


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
        _SERVER[:] = [emulator.thread]
        clients = [
            ("thread-pool gateway", gateway_run),
            ("loop gateway (aiohttp)", loop_gateway_run),
            ("bare aiohttp", aiohttp_run),
        ]
        if os.environ.get("BENCH_HTTPX"):
            clients.append(("httpx async", httpx_run))
        for c in (1, 10):
            for name, measure in clients * 2:
                got = asyncio.run(measure(kubeconfig, c))
                lines.append(
                    f"c={c} {name}: {got.rps:.0f} req/s, p50 {got.p50_ms:.2f} ms, "
                    f"client CPU {got.cpu_ms:.3f} ms per call"
                )
    return lines


if __name__ == "__main__":
    print("\n".join(run()))
