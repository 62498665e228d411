"""On-demand benchmark: 200 JIT candidates arriving at once (issue 12, acceptance 7).

The sandbox's kube, app and cluster (emulated scheduler and kubelet) run in this
process; one real reconciler replica as a subprocess. 25 reserved a100 nodes of 8
GPUs each (200 GPUs, the app's class capacity too); 50 users of one group each create
4 one-GPU pods carrying a minimum runtime and the group, all at once. No booking
exists, so each pod can only start under an on-demand lease.

Per pod, on the sandbox clock (factor 1: wall seconds):
- *seen → verdict*: to the scheduler's ``Unschedulable`` (guard 1a waits for it);
- *seen → granted*: from the pod's creation committed in the kube store to its lease's
  GPUReservation stored there (the reconciler mirrors a grant at once, one POST after
  the app's answer; the app's own ``created_at`` has whole seconds only);
- *seen → tolerated*: to the instant the kube store holds the pod carrying the
  reservation toleration (the reconciler's admission patch).
Also: admission batches, and reservation-app calls per candidate (lease creates,
cancels and selections the lease path made, from the reconciler's metrics). Figures
go to ``$BENCH_OUT/ondemand.json``. A measurement, never a pass/fail check.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.bench_window_open import aligned_clock, key_of, one_class_app, tolerated
from bench.procstat import cpu_s
from bench.sandboxed import Box, measured, rank, with_replica
from sandbox.kube.store import Change
from sandbox.runner import SandboxContext
from shared import model, vocab
from shared.clock import ScaledClock
from shared.resources import GPU_RESERVATIONS, PODS

USERS = 50
PODS_PER_USER = 4
NODES = 25
GPUS_PER_NODE = 8
GPU_CLASS = "a100"
GROUP = "bench"
GIVE_UP_S = 120.0
CREATE_CONCURRENCY = 32
BENCH_LABEL = "bench"
BENCH_VALUE = "ondemand"
ENV = {"LEADER_ELECTION_ENABLED": "false", "RESERVATION_FETCH_INTERVAL": "3600"}


def users() -> list[str]:
    return [f"u{i:02d}" for i in range(USERS)]


def scenario() -> dict[str, Any]:
    names = users()
    taint = f"{vocab.RESERVATION_TAINT_KEY}={GPU_CLASS}:{vocab.TAINT_EFFECT_NO_SCHEDULE}"
    return {
        "namespaces": [*names, vocab.PRODUCT_NAME],
        "nodes": [
            {
                "name": f"a100-{i:02d}",
                "labels": {vocab.GPU_CLASS_LABEL: GPU_CLASS},
                "taints": [taint],
                "allocatable": {vocab.GPU_RESOURCE: str(GPUS_PER_NODE), "cpu": "64"},
            }
            for i in range(NODES)
        ],
        "app": one_class_app(names, GROUP, NODES * GPUS_PER_NODE, GPUS_PER_NODE),
    }


def manifest(owner: str, index: int) -> dict[str, Any]:
    """A one-GPU JIT pod: minimum runtime and usage group, no booking."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"j{index}",
            "namespace": owner,
            "labels": {vocab.GPU_CLASS_LABEL: GPU_CLASS, BENCH_LABEL: BENCH_VALUE},
            "annotations": {
                vocab.MINIMUM_RUNTIME_SECONDS: "3600",
                vocab.USAGE_GROUP: GROUP,
                vocab.SANDBOX_RUN_SECONDS: "36000",
            },
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {vocab.GPU_RESOURCE: "1"}},
                }
            ]
        },
    }


class Mirrored(asyncio.Queue[Change | None]):
    """Fed by the kube store: the instant each GPUReservation is first stored."""

    def __init__(self, clock: ScaledClock) -> None:
        super().__init__()
        self.clock = clock
        self.stored: dict[str, datetime] = {}

    def put_nowait(self, item: Change | None) -> None:
        if item is not None and item.type == "ADDED":
            self.stored.setdefault(str(item.object["metadata"]["name"]), self.clock.now())


class Seen(asyncio.Queue[Change | None]):
    """Fed by the kube store at each write: each bench pod's creation and first
    tolerated write (the instant the apiserver holds it; no delivery delay)."""

    def __init__(self, clock: ScaledClock) -> None:
        super().__init__()
        self.clock = clock
        self.created: dict[str, datetime] = {}
        self.tolerated: dict[str, datetime] = {}
        self.verdict: dict[str, datetime] = {}
        self.uids: dict[str, str] = {}

    def put_nowait(self, item: Change | None) -> None:
        if item is None or item.type == "DELETED":
            return
        meta = item.object.get("metadata") or {}
        if (meta.get("labels") or {}).get(BENCH_LABEL) != BENCH_VALUE:
            return
        key = key_of(item.object)
        now = self.clock.now()
        self.created.setdefault(key, now)
        self.uids.setdefault(str(meta.get("uid", "")), key)
        if key not in self.tolerated and tolerated(item.object):
            self.tolerated[key] = now
        conditions = (item.object.get("status") or {}).get("conditions") or []
        if key not in self.verdict and any(c.get("reason") == "Unschedulable" for c in conditions):
            self.verdict[key] = now


def lags(start: dict[str, datetime], end: dict[str, datetime]) -> list[float]:
    return sorted((end[k] - start[k]).total_seconds() for k in end if k in start)


def line(what: str, values: list[float], total: int) -> str:
    if not values:
        return f"{what}: none (gave up after {GIVE_UP_S:.0f} s)"
    marks = f"p50 {rank(values, 0.5):.2f} s, p99 {rank(values, 0.99):.2f} s, max {values[-1]:.2f} s"
    return f"{what}: {marks} ({len(values)}/{total})"


async def metric_sum(http: httpx.AsyncClient, url: str, prefix: str) -> float:
    text = (await http.get(f"{url}/metrics")).text
    return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(prefix))


async def measure(state: Path) -> dict[str, Any]:
    clock = aligned_clock(1.0)
    ctx = SandboxContext(state_dir=state, scenario=scenario(), clock=clock)
    # Not pushed to, as this benchmark always ran: no booking exists, and the app's
    # pushes of the leases the replica itself creates would be work it never counted.
    async with with_replica(ctx, ["kube", "app", "cluster"], ENV, pushed=False) as box:
        store = box.kube.store
        seen = Seen(clock)
        _, subscription = store.subscribe("", PODS.plural, store.resource_version)
        subscription.queue = seen
        mirrored = Mirrored(clock)
        group, plural = GPU_RESERVATIONS.group, GPU_RESERVATIONS.plural
        _, mirrors = store.subscribe(group, plural, store.resource_version)
        mirrors.queue = mirrored
        try:
            return await burst(ctx, box, seen, mirrored)
        finally:
            store.unsubscribe(subscription)
            store.unsubscribe(mirrors)


async def burst(ctx: SandboxContext, box: Box, seen: Seen, mirrored: Mirrored) -> dict[str, Any]:
    """Every candidate created at once; the figures once the last is tolerated."""
    replica = box.replica
    total = USERS * PODS_PER_USER
    await asyncio.sleep(1.0)  # the leader's caches are listed
    limit = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def create(owner: str, index: int) -> None:
        async with limit:
            await box.gateway.create(PODS, manifest(owner, index), owner)

    pid = replica.pid
    cpu0, rcpu0 = time.process_time(), cpu_s(pid)
    t0 = time.monotonic()
    await asyncio.gather(*(create(u, i) for u in users() for i in range(PODS_PER_USER)))
    created_s = time.monotonic() - t0
    deadline = time.monotonic() + GIVE_UP_S
    while len(seen.tolerated) < total and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.1)  # the store's feed is synchronous: poll its tally
    cpu, rcpu = time.process_time() - cpu0, cpu_s(pid) - rcpu0
    async with httpx.AsyncClient(timeout=10) as http:
        calls = await metric_sum(http, replica.url, "gpu_reservation_ondemand_app_calls_total")
        batches = await metric_sum(http, replica.url, "gpu_reservation_ondemand_batches_total")
    app = ctx.handles["app"]
    granted: dict[str, datetime] = {}
    for key_text, rid in app.state.idempotency.items():
        pod = seen.uids.get(key_text.split(".")[0])
        stored = mirrored.stored.get(model.reference(rid))
        if pod is not None and stored is not None:
            granted.setdefault(pod, stored)
    return {
        "candidates": total,
        "created_s": round(created_s, 3),
        "seen_to_verdict_s": lags(seen.created, seen.verdict),
        "seen_to_granted_s": lags(seen.created, granted),
        "seen_to_tolerated_s": lags(seen.created, seen.tolerated),
        "leases": len(granted),
        "batches": batches,
        "app_calls_per_candidate": round(calls / total, 3),
        "bench_cpu_ms_per_candidate": round(1000 * cpu / total, 2),
        "reconciler_cpu_ms_per_candidate": round(1000 * rcpu / total, 2),
    }


def run() -> list[str]:
    found = measured("ondemand", measure)
    total = found["candidates"]
    return [
        f"{total} one-GPU JIT pods of {USERS} users created at once "
        f"({found['created_s']:.1f} s to create); {NODES} a100 nodes x {GPUS_PER_NODE} GPUs",
        line("seen -> scheduler verdict", found["seen_to_verdict_s"], total),
        line("seen -> lease granted", found["seen_to_granted_s"], total),
        line("seen -> pod tolerated", found["seen_to_tolerated_s"], total),
        f"leases {found['leases']}, admission batches {found['batches']:.0f}, "
        f"app calls per candidate {found['app_calls_per_candidate']:.2f} (goal p99 <= 3 s)",
        f"CPU per candidate until the last is tolerated: "
        f"{found['bench_cpu_ms_per_candidate']:.1f} ms in this process (emulators), "
        f"{found['reconciler_cpu_ms_per_candidate']:.1f} ms in the reconciler",
    ]


if __name__ == "__main__":
    print("\n".join(run()))
