"""The emulated API server's cost of one ledger write and one ledger read.

The webhook's claim path is one conditional status write per group of claims, and
writes to one object cannot overlap, so this write's latency bounds one booking's
admissions per second (docs/performance.md, "Webhook"). Measured here alone: the kube
emulator on its own thread and event loop with the chart installed (CRD, RBAC, the
MutatingWebhookConfiguration, so admission dispatch runs as in the sandbox), and the
webhook's own client (``shared.gateway.Gateway``) calling it one request at a time:

- ``put``: a ``/status`` PUT of a 64-hold GPUReservation dropping the oldest hold and
  adding a new one (the reconciler's upkeep), with 0, 1 and 4 watches open;
- ``patch``: the claim's write (``shared.ledger.appended_ops``' shape) on a 50-hold
  ledger — a JSON Patch of ``/status`` replacing ``metadata.resourceVersion`` (the
  precondition), appending a hold and setting ``usedGpus`` and ``phase``, plus a
  ``remove`` of the oldest hold so the ledger stays at 50 — with 1 and 3 watches open;
- ``get``: a GET of the same 50-hold object.

Printed per cell: requests/s, p50 latency, the emulator thread's CPU per request
(the yardstick least moved by other load on the machine) and the client's (the rest of
the process's CPU). The ``patch`` and ``get`` cells run with the webhook's
``LoopGateway`` (calls on the caller's loop) as well as with the thread-pool gateway.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from bench.bench_kube_client import EmulatorThread, thread_cpu
from bench.bench_webhook import NS, booking, mode
from sandbox import chart
from sandbox.install import install_base
from shared import model
from shared.clock import SystemClock
from shared.gateway import Gateway
from shared.loopgateway import LoopGateway
from shared.resources import GPU_RESERVATIONS, MUTATING_WEBHOOK_CONFIGURATIONS

PUT_HOLDS = 64
PATCH_HOLDS = 50
#: (cell, watches open, client) in the order measured.
CELLS: tuple[tuple[str, int, type[Gateway]], ...] = (
    ("put", 0, Gateway),
    ("put", 1, Gateway),
    ("put", 4, Gateway),
    ("patch", 1, Gateway),
    ("patch", 1, LoopGateway),
    ("patch", 3, Gateway),
    ("get", 0, Gateway),
    ("get", 0, LoopGateway),
)


def holds(count: int) -> list[dict[str, Any]]:
    now = SystemClock().now()
    return [
        model.hold_to_status(model.Hold(str(uuid.uuid4()), 1, now, f"p-{i}", str(uuid.uuid4())))
        for i in range(count)
    ]


async def seed(gateway: Gateway, name: str, count: int) -> None:
    """Give ``name`` a ledger of ``count`` holds."""
    obj = await gateway.get(GPU_RESERVATIONS, name, NS)
    obj["status"] = {"holds": holds(count), "usedGpus": count, "phase": "Open"}
    await gateway.replace(GPU_RESERVATIONS, name, obj, NS, subresource="status")


Step = Callable[[], Awaitable[None]]


def put_step(gateway: Gateway, obj: dict[str, Any]) -> Step:
    """A PUT of the whole ledger, oldest hold dropped and a new one added."""

    async def step() -> None:
        status = obj["status"]
        status["holds"] = [*status["holds"][1:], *holds(1)]
        obj.update(await gateway.replace(GPU_RESERVATIONS, "res-1", obj, NS, subresource="status"))

    return step


def patch_step(gateway: Gateway, version: list[str]) -> Step:
    """The claim's JSON Patch (conditional on the version last written)."""

    async def step() -> None:
        ops: list[dict[str, Any]] = [
            {"op": "replace", "path": "/metadata/resourceVersion", "value": version[0]},
            {"op": "remove", "path": "/status/holds/0"},
            *({"op": "add", "path": "/status/holds/-", "value": h} for h in holds(1)),
            {"op": "add", "path": "/status/usedGpus", "value": PATCH_HOLDS},
            {"op": "add", "path": "/status/phase", "value": "Open"},
        ]
        written = await gateway.patch(GPU_RESERVATIONS, "res-2", ops, NS, subresource="status")
        version[0] = written["metadata"]["resourceVersion"]

    return step


def get_step(gateway: Gateway) -> Step:
    async def step() -> None:
        await gateway.get(GPU_RESERVATIONS, "res-2", NS)

    return step


async def timed(step: Step, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        t0 = time.perf_counter()
        await step()
        latencies.append(time.perf_counter() - t0)
    return latencies


async def drain(gateway: Gateway) -> None:
    """One watch of GPUReservations, read until cancelled."""
    async for _ in gateway.watch(GPU_RESERVATIONS, "", NS, timeout_s=600):
        pass


def run() -> list[str]:
    count = 2000 if mode().name == "full" else 400
    with EmulatorThread("bench-kube-write-") as emulator:
        kubeconfig = str(emulator.kubeconfig)

        async def setup() -> None:
            gateway = Gateway.from_kubeconfig(kubeconfig)
            objects = chart.objects(NS)
            await install_base(gateway, objects)
            await gateway.create(MUTATING_WEBHOOK_CONFIGURATIONS, objects.webhook_configuration)
            for number, count in ((1, PUT_HOLDS), (2, PATCH_HOLDS)):
                body = booking(number, "alice", 10**6)
                await gateway.create(GPU_RESERVATIONS, body, NS)
                await seed(gateway, body["metadata"]["name"], count)
            gateway.close()

        async def measure(cell: str, watchers: int, client: type[Gateway]) -> str:
            gateway = client.from_kubeconfig(kubeconfig, max_workers=watchers + 4)
            streams = [asyncio.ensure_future(drain(gateway)) for _ in range(watchers)]
            try:
                if cell == "put":
                    step = put_step(gateway, await gateway.get(GPU_RESERVATIONS, "res-1", NS))
                elif cell == "patch":
                    obj = await gateway.get(GPU_RESERVATIONS, "res-2", NS)
                    step = patch_step(gateway, [obj["metadata"]["resourceVersion"]])
                else:
                    step = get_step(gateway)
                await timed(step, 20)  # warm up (and let the watches start)
                cpu = thread_cpu(emulator.thread)
                everything = time.process_time()
                t0 = time.perf_counter()
                latencies = await timed(step, count)
                wall = time.perf_counter() - t0
                cpu = thread_cpu(emulator.thread) - cpu
                mine = time.process_time() - everything - cpu
            finally:
                for stream in streams:
                    stream.cancel()
                await asyncio.gather(*streams, return_exceptions=True)
                gateway.close()
            size = PUT_HOLDS if cell == "put" else PATCH_HOLDS
            return (
                f"{cell:5} {size} holds, {watchers} watch(es), {client.__name__}: "
                f"{count / wall:.0f} req/s, p50 {statistics.median(latencies) * 1e3:.2f} ms, "
                f"emulator CPU {cpu / count * 1e3:.3f} ms, client CPU "
                f"{mine / count * 1e3:.3f} ms per request"
            )

        emulator.run(setup())
        return [asyncio.run(measure(cell, w, client)) for cell, w, client in CELLS]


if __name__ == "__main__":
    print("\n".join(run()))
