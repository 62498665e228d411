"""The emulated API server's cost of one ledger write: a ``/status`` PUT of a 64-hold
GPUReservation.

The webhook's claim path is one conditional status write per group of claims, and
writes to one object cannot overlap, so this write's latency bounds one booking's
admissions per second (docs/performance.md, "Webhook"). Measured here alone: the kube
emulator on its own thread and event loop with the chart installed (CRD, RBAC, the
MutatingWebhookConfiguration, so admission dispatch runs as in the sandbox), and the
webhook's own client (``shared.gateway.Gateway``) PUTting ``/status`` one write at a
time, each write dropping the oldest hold and adding a new one (64 holds stay), with
0, 1 and 4 watches of GPUReservations open. Printed: writes/s, p50 latency, and the
emulator thread's CPU per write.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
import uuid
from typing import Any

from bench.bench_kube_client import EmulatorThread
from bench.bench_webhook import NS, booking, mode
from sandbox import chart
from sandbox.install import install_base
from shared import model
from shared.clock import SystemClock
from shared.gateway import Gateway
from shared.resources import GPU_RESERVATIONS, MUTATING_WEBHOOK_CONFIGURATIONS

HOLDS = 64
WATCHERS = (0, 1, 4)


def holds(count: int) -> list[dict[str, Any]]:
    now = SystemClock().now()
    return [
        model.hold_to_status(model.Hold(str(uuid.uuid4()), 1, now, f"p-{i}", str(uuid.uuid4())))
        for i in range(count)
    ]


async def writes(gateway: Gateway, count: int) -> list[float]:
    """``count`` status PUTs, one at a time; their latencies."""
    obj = await gateway.get(GPU_RESERVATIONS, "res-1", NS)
    latencies = []
    for _ in range(count):
        status = obj["status"]
        status["holds"] = [*status["holds"][1:], *holds(1)]
        t0 = time.perf_counter()
        obj = await gateway.replace(GPU_RESERVATIONS, "res-1", obj, NS, subresource="status")
        latencies.append(time.perf_counter() - t0)
    return latencies


async def drain(gateway: Gateway) -> None:
    """One watch of GPUReservations, read until cancelled."""
    async for _ in gateway.watch(GPU_RESERVATIONS, "", NS, timeout_s=600):
        pass


def thread_cpu(thread: threading.Thread) -> float:
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def run() -> list[str]:
    count = 2000 if mode().name == "full" else 400
    with EmulatorThread("bench-kube-write-") as emulator:
        kubeconfig = str(emulator.kubeconfig)

        async def setup() -> None:
            gateway = Gateway.from_kubeconfig(kubeconfig)
            objects = chart.objects(NS)
            await install_base(gateway, objects)
            await gateway.create(MUTATING_WEBHOOK_CONFIGURATIONS, objects.webhook_configuration)
            await gateway.create(GPU_RESERVATIONS, booking(1, "alice", 10**6), NS)
            obj = await gateway.get(GPU_RESERVATIONS, "res-1", NS)
            obj["status"] = {"holds": holds(HOLDS), "usedGpus": HOLDS, "phase": "Open"}
            await gateway.replace(GPU_RESERVATIONS, "res-1", obj, NS, subresource="status")
            gateway.close()

        async def measure(watchers: int) -> str:
            gateway = Gateway.from_kubeconfig(kubeconfig, max_workers=watchers + 4)
            streams = [asyncio.ensure_future(drain(gateway)) for _ in range(watchers)]
            try:
                await writes(gateway, 20)  # warm up (and let the watches start)
                cpu = thread_cpu(emulator.thread)
                t0 = time.perf_counter()
                latencies = await writes(gateway, count)
                wall = time.perf_counter() - t0
                cpu = thread_cpu(emulator.thread) - cpu
            finally:
                for stream in streams:
                    stream.cancel()
                await asyncio.gather(*streams, return_exceptions=True)
                gateway.close()
            return (
                f"{HOLDS} holds, {watchers} watch(es): {count / wall:.0f} writes/s, "
                f"p50 {statistics.median(latencies) * 1e3:.2f} ms, emulator CPU "
                f"{cpu / count * 1e3:.2f} ms per write"
            )

        emulator.run(setup())
        return [asyncio.run(measure(w)) for w in WATCHERS]


if __name__ == "__main__":
    print("\n".join(run()))
