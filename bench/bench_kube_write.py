"""The emulated API server's cost of one ledger write and one ledger read.

The webhook's claim path is one conditional status write per group of claims, and
writes to one object cannot overlap, so this write's latency bounds one booking's
admissions per second (docs/developer/performance.md, "Webhook"). Measured here alone: the kube
emulator on its own thread and event loop with the chart installed (CRD, RBAC, the
MutatingWebhookConfiguration, so admission dispatch runs as in the sandbox), and the
webhook's own client (``shared.gateway.Gateway``) calling it one request at a time:

- ``put``: a ``/status`` PUT of a 64-hold GPUReservation dropping the oldest hold and
  adding a new one (the reconciler's upkeep), with 0, 1 and 4 watches open;
- ``patch``: the claim's write on a 50-hold ledger (``claim_ops``: the ledger token
  protocol's JSON Patch of ``/status`` — tests of uid, generation and token, an
  appended hold, ``usedGpus``, ``phase`` and the next token — plus a ``remove`` of the
  oldest hold so the ledger stays at 50), with 1 and 3 watches open;
- ``get``: a GET of the same 50-hold object;
- ``in-process``: the ``patch`` (1 and 3 watches) and ``get`` cells again with the
  emulator's ASGI application called directly (``InProcess``): the emulator's own CPU
  per request without sockets, TLS and the client, best and median chunk.

Printed per cell: requests/s, p50 latency, the emulator thread's CPU per request
(the yardstick least moved by other load on the machine) — over the cell and in its
best chunk of ``CHUNK`` requests (the least disturbed by other processes on a loaded
machine) — and the client's (the rest of the process's CPU). The ``patch`` and ``get``
cells run with the webhook's ``LoopGateway`` (calls on the caller's loop) as well as
with the thread-pool gateway.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from bench.bench_kube_client import EmulatorThread, thread_cpu
from bench.bench_webhook import NS, booking, mode
from sandbox import chart
from sandbox.install import install_base
from sandbox.kube.admission.install import install as install_admission
from sandbox.kube.server import KubeServer
from shared import model
from shared.clock import SystemClock
from shared.gateway import Gateway
from shared.gateway.loop import LoopGateway
from shared.resources import (
    CRDS,
    GPU_RESERVATIONS,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
)

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
    obj["status"][model.LEDGER_TOKEN] = "t0"
    await gateway.replace(GPU_RESERVATIONS, name, obj, NS, subresource="status")


Step = Callable[[], Awaitable[None]]


def put_step(gateway: Gateway, obj: dict[str, Any]) -> Step:
    """A PUT of the whole ledger, oldest hold dropped and a new one added."""

    async def step() -> None:
        status = obj["status"]
        status["holds"] = [*status["holds"][1:], *holds(1)]
        obj.update(await gateway.replace(GPU_RESERVATIONS, "res-1", obj, NS, subresource="status"))

    return step


def claim_ops(meta: dict[str, Any], token: int, hold: dict[str, Any]) -> list[dict[str, Any]]:
    """A claim's JSON Patch as the ledger token protocol writes it (``shared.ledger``:
    ``guard_ops`` then ``appended_ops``): tests of the uid, the generation and the token
    read, one hold appended, the totals and the next token — plus a ``remove`` of the
    oldest hold, so the ledger stays at ``PATCH_HOLDS``."""
    return [
        {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
        {"op": "test", "path": "/metadata/generation", "value": meta["generation"]},
        {"op": "test", "path": f"/status/{model.LEDGER_TOKEN}", "value": f"t{token}"},
        {"op": "remove", "path": "/status/holds/0"},
        {"op": "add", "path": "/status/holds/-", "value": hold},
        {"op": "add", "path": "/status/usedGpus", "value": PATCH_HOLDS},
        {"op": "add", "path": "/status/phase", "value": "Open"},
        {"op": "add", "path": f"/status/{model.LEDGER_TOKEN}", "value": f"t{token + 1}"},
    ]


def token_of(obj: dict[str, Any]) -> int:
    """The number of the bench's ledger token (``t<n>``) in ``obj``."""
    return int(obj["status"][model.LEDGER_TOKEN][1:])


def patch_step(gateway: Gateway, obj: dict[str, Any]) -> Step:
    """The claim's JSON Patch (conditional on the token last written)."""
    token = [token_of(obj)]

    async def step() -> None:
        ops = claim_ops(obj["metadata"], token[0], holds(1)[0])
        written = await gateway.patch(GPU_RESERVATIONS, "res-2", ops, NS, subresource="status")
        token[0] = token_of(written)

    return step


def get_step(gateway: Gateway) -> Step:
    async def step() -> None:
        await gateway.get(GPU_RESERVATIONS, "res-2", NS)

    return step


#: Requests per chunk for the best-chunk CPU figure.
CHUNK = 50


async def timed(
    step: Step,
    count: int,
    cpu: Callable[[], float] | None = None,
    chunks: list[float] | None = None,
) -> list[float]:
    """``count`` steps, one at a time; their latencies. With ``cpu`` (a thread's CPU
    clock), the CPU per request of every ``CHUNK`` requests goes to ``chunks``."""
    latencies = []
    mark = cpu() if cpu is not None else 0.0
    for n in range(1, count + 1):
        t0 = time.perf_counter()
        await step()
        latencies.append(time.perf_counter() - t0)
        if cpu is not None and chunks is not None and n % CHUNK == 0:
            now = cpu()
            chunks.append((now - mark) / CHUNK)
            mark = now
    return latencies


async def drain(gateway: Gateway) -> None:
    """One watch of GPUReservations, read until cancelled."""
    async for _ in gateway.watch(GPU_RESERVATIONS, "", NS, timeout_s=600):
        pass


class InProcess:
    """The emulator's ASGI application called directly on this thread: no socket, TLS,
    HTTP parsing or client — the emulator's own work per request, the figure least
    moved by other load (best chunk of ``CHUNK`` requests). Admission dispatch is
    installed with the chart's webhook configuration, as in the sandbox."""

    def __init__(self) -> None:
        self.server = KubeServer()
        install_admission(self.server)
        self.app = self.server.asgi_app()
        self.auth = f"Bearer {self.server.admin_token}".encode()

    async def call(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        kind: str = "application/json",
        query: str = "",
    ) -> tuple[int, bytes]:
        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "headers": [
                (b"authorization", self.auth),
                (b"content-type", kind.encode()),
                (b"content-length", str(len(body)).encode()),
            ],
            "http_version": "1.1",
            "scheme": "https",
            "server": ("127.0.0.1", 443),
            "client": ("127.0.0.1", 1),
            "root_path": "",
        }
        sent = False
        answer: dict[str, Any] = {"body": []}

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                await asyncio.Event().wait()  # a watch: the client never goes away
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
            elif query == "":
                answer["body"].append(message.get("body", b""))

        await self.app(scope, receive, send)
        return answer["status"], b"".join(answer["body"])

    async def create(self, res: Any, obj: dict[str, Any], namespace: str | None = None) -> bytes:
        status, body = await self.call("POST", res.path(namespace), json.dumps(obj).encode())
        assert status == 201, body
        return body

    async def measure(self, count: int) -> list[str]:
        objects = chart.objects(NS)
        await self.create(NAMESPACES, {"metadata": {"name": NS}})
        for crd in objects.crds:
            await self.create(CRDS, crd)
        await self.create(MUTATING_WEBHOOK_CONFIGURATIONS, objects.webhook_configuration)
        obj = json.loads(await self.create(GPU_RESERVATIONS, booking(2, "alice", 10**6), NS))
        path = GPU_RESERVATIONS.path(NS, "res-2")
        obj["status"] = {"holds": holds(PATCH_HOLDS), "usedGpus": PATCH_HOLDS, "phase": "Open"}
        obj["status"][model.LEDGER_TOKEN] = "t0"
        status, body = await self.call("PUT", f"{path}/status", json.dumps(obj).encode())
        assert status == 200, body
        obj = json.loads(body)
        token = [0]
        fresh = holds(count + CHUNK)

        async def patch() -> None:
            ops = claim_ops(obj["metadata"], token[0], fresh[token[0] % len(fresh)])
            status, body = await self.call(
                "PATCH", f"{path}/status", json.dumps(ops).encode(), "application/json-patch+json"
            )
            assert status == 200, body
            token[0] += 1
            await asyncio.sleep(0)  # let the watches send it

        async def get() -> None:
            assert (await self.call("GET", path))[0] == 200

        lines = []
        for name, step, watchers in (("patch", patch, 1), ("patch", patch, 3), ("get", get, 0)):
            query = "watch=true"
            watches = [
                asyncio.ensure_future(self.call("GET", GPU_RESERVATIONS.path(NS), query=query))
                for _ in range(watchers)
            ]
            chunks: list[float] = []
            await timed(step, CHUNK)
            await timed(step, count, time.thread_time, chunks)
            for watch in watches:
                watch.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
            chunks.sort()
            lines.append(
                f"in-process {name:5} {PATCH_HOLDS} holds, {watchers} watch(es): emulator CPU "
                f"{chunks[len(chunks) // 2] * 1e6:.0f} µs per request (median chunk), best "
                f"{chunks[0] * 1e6:.0f} µs"
            )
        self.server.store.close_watchers()
        return lines


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
                    step = patch_step(gateway, await gateway.get(GPU_RESERVATIONS, "res-2", NS))
                else:
                    step = get_step(gateway)
                await timed(step, 20)  # warm up (and let the watches start)
                cpu = thread_cpu(emulator.thread)
                everything = time.process_time()
                t0 = time.perf_counter()
                chunks: list[float] = []
                latencies = await timed(step, count, lambda: thread_cpu(emulator.thread), chunks)
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
                f"emulator CPU {cpu / count * 1e3:.3f} ms (best {CHUNK}-request chunk "
                f"{min(chunks) * 1e3:.3f} ms), client CPU "
                f"{mine / count * 1e3:.3f} ms per request"
            )

        emulator.run(setup())
        lines = [asyncio.run(measure(cell, w, client)) for cell, w, client in CELLS]
    return lines + asyncio.run(InProcess().measure(count))


if __name__ == "__main__":
    print("\n".join(run()))
