"""Webhook benchmark: decision latency in-process, admissions/s through uvicorn + TLS.

1. ``decide_create`` alone (pure) over an owner with 20 reservations: p50/p99.
2. ``Admission.review`` in-process (parse, decide, ledger claim on an in-memory
   store with optimistic concurrency, diff, answer): p50/p99.
3. End to end: one uvicorn server (one event loop, one core) serving ``/mutate`` over
   TLS 1.2+, an httpx client with 8 concurrent keep-alive connections in another
   thread of the same process; admissions per second.
"""

from __future__ import annotations

import asyncio
import copy
import json
import ssl
import statistics
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from certs import issue
from certs.tls import ReloadingTLS
from shared import model, vocab
from shared.clock import ManualClock
from shared.errors import Conflict
from shared.gateway import ListResult
from shared.policy.matching import MatchRules
from webhook.app import mutate_app
from webhook.cache import ReservationCache
from webhook.decide import Context, decide_create
from webhook.handler import Admission
from webhook.metrics import Metrics
from webhook.settings import STRIP, PolicySettings

NOW = datetime(2026, 1, 5, 10, tzinfo=UTC)
NS = vocab.PRODUCT_NAME
POLICY = PolicySettings(MatchRules(), None, STRIP, frozenset(), NS)


class MemoryStore:
    """GET / PUT-status with resourceVersion checks, LIST for the cache."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.rv = 1

    async def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        return copy.deepcopy(self.objects[name])

    async def replace(
        self,
        res: Any,
        name: str,
        body: dict[str, Any],
        namespace: Any = None,
        subresource: Any = None,
    ) -> dict[str, Any]:
        current = self.objects[name]
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "modified", "Conflict")
        self.rv += 1
        updated = {
            **current,
            "status": body["status"],
            "metadata": {**current["metadata"], "resourceVersion": str(self.rv)},
        }
        self.objects[name] = updated
        return copy.deepcopy(updated)

    async def list_all(self, res: Any, namespace: Any = None, **_: Any) -> ListResult:
        return ListResult(list(self.objects.values()), str(self.rv))


def reservations(gpus: int) -> list[model.GPUReservation]:
    found = []
    for i in range(20):
        start = NOW + timedelta(hours=i - 1)
        facts = model.ReservationFacts(
            id=i + 1,
            owner="alice",
            gpu_class="h100" if i % 2 == 0 else "a100",
            gpu_class_name="H100",
            gpu_count=gpus,
            kind=model.Kind.BOOKING,
            start=start,
            end=start + timedelta(hours=1),
            state=model.State.ACTIVE,
            updated_at=NOW,
        )
        found.append(model.GPUReservation(facts, resource_version="1"))
    return found


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "alice", "labels": {vocab.GPU_CLASS_LABEL: "h100"}},
        "spec": {
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {vocab.GPU_RESOURCE: "1"}}}
            ]
        },
    }


def review(name: str) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "namespace": "alice",
                "name": name,
                "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": pod(name),
                "dryRun": False,
            },
        }
    ).encode()


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.99) - 1]


def bench_decide(n: int = 5000) -> str:
    pool, ctx, p = reservations(10**6), Context(POLICY, NOW), pod("p")
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        decide_create(p, "alice", pool, ctx)
        samples.append(time.perf_counter() - t0)
    p50, p99 = percentiles(samples)
    return f"decide_create (pure): p50 {p50 * 1e6:.0f} µs, p99 {p99 * 1e6:.0f} µs ({n} runs)"


async def admission() -> Admission:
    store = MemoryStore([model.to_object(r, NS, NOW) for r in reservations(10**6)])
    cache = ReservationCache(store, NS, ManualClock(NOW))  # type: ignore[arg-type]
    await cache.relist()
    return Admission(POLICY, cache, store, ManualClock(NOW), Metrics(), ledger_deadline_s=5)


def bench_review(n: int = 3000) -> str:
    async def run() -> list[float]:
        adm, samples = await admission(), []
        for i in range(n):
            body = review(f"p-{i}")
            t0 = time.perf_counter()
            await adm.review(body)
            samples.append(time.perf_counter() - t0)
        return samples

    p50, p99 = percentiles(asyncio.run(run()))
    figures = f"p50 {p50 * 1e6:.0f} µs, p99 {p99 * 1e6:.0f} µs"
    return f"Admission.review with ledger claim (in-process): {figures}"


def bench_tls(n: int = 2000, concurrency: int = 8) -> str:
    directory = Path(tempfile.mkdtemp())
    ca = issue.issue_ca(NOW.now(UTC))
    pair = issue.issue_serving(ca, ("webhook.local",), NOW.now(UTC))
    (directory / "tls.crt").write_bytes(pair.cert_pem)
    (directory / "tls.key").write_bytes(pair.key_pem)
    (directory / "ca.crt").write_bytes(ca.cert_pem)
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def serve() -> None:
        async def main() -> None:
            tls = ReloadingTLS(directory / "tls.crt", directory / "tls.key", ManualClock(NOW))
            app = mutate_app(await admission(), 3 * 1024 * 1024)
            config = uvicorn.Config(
                app,
                host="127.0.0.1",
                port=0,
                log_config=None,
                access_log=False,
                lifespan="off",
                ssl_context_factory=tls.uvicorn_factory,
            )
            server = uvicorn.Server(config)
            holder["server"] = server
            task = asyncio.ensure_future(server.serve())
            while not server.started:  # noqa: ASYNC110 - uvicorn exposes a flag only
                await asyncio.sleep(0.01)
            holder["port"] = server.servers[0].sockets[0].getsockname()[1]
            ready.set()
            await task

        asyncio.run(main())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ready.wait(10)
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    context.check_hostname = False

    async def client() -> float:
        async with httpx.AsyncClient(
            verify=context, base_url=f"https://127.0.0.1:{holder['port']}"
        ) as http:
            counter = iter(range(n))

            async def worker() -> None:
                for i in counter:
                    response = await http.post("/mutate", content=review(f"t-{i}"))
                    assert response.status_code == 200

            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return time.perf_counter() - t0

    elapsed = asyncio.run(client())
    holder["server"].should_exit = True
    thread.join(10)
    return f"end to end (uvicorn + TLS, {concurrency} connections): {n / elapsed:.0f} admissions/s"


def run() -> list[str]:
    return [bench_decide(), bench_review(), bench_tls()]


if __name__ == "__main__":
    print("\n".join(run()))
