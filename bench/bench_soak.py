"""Soak: 10,000 randomized concurrent pod creates and deletes across 50 bookings, through
three webhook replicas and one reconciler (issue 14, acceptance 5).

The sandbox's kube and app emulators run in this process with the real webhook
component (three replicas behind the Service, TLS, the MutatingWebhookConfiguration)
and one real reconciler replica as a subprocess. Fifty users each hold one open
booking of ``GPUS`` GPUs. ``OPERATIONS`` operations (seeded, ``BENCH_SOAK_SEED``) run
``CONCURRENCY`` at a time: each picks a random user and creates a one-GPU pod of
theirs (admitted by the webhook when the booking has room, queued otherwise) or
deletes one of their live pods (freeing room the reconciler hands to a queued pod).

Counted, and printed (a measurement, never a pass/fail check):
- **over-admissions**: instants, seen at every write the kube emulator's store commits,
  at which the pods carrying one booking's reference request more GPUs than it holds
  (must be 0);
- **ledgers vs pods** at the end, once quiet: every booking's holds name exactly its
  live admitted pods (must be equal), and how long that took to settle.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.bench_window_open import one_class_app
from bench.sandboxed import in_fresh_state, with_replica
from sandbox.kube.store import Change
from sandbox.runner import SandboxContext
from shared import model, vocab
from shared.errors import KubeError, NotFound
from shared.gateway import Gateway
from shared.resources import GPU_RESERVATIONS, PODS

BOOKINGS = 50
GPUS = 4
OPERATIONS = int(os.environ.get("BENCH_SOAK_OPERATIONS", "10000"))
CONCURRENCY = 32
#: A user keeps at most this many pods (so creates and deletes stay balanced).
MAX_PODS = 2 * GPUS
GPU_CLASS = "a100"
GROUP = "soak"
#: Wall seconds to wait, once the load stopped, for the ledgers to match the pods (a
#: claim whose pod was created and deleted before it was bound expires after
#: LEDGER_CLAIM_TTL_SECONDS, 120 s).
SETTLE_S = 180.0
ENV = {"LEADER_ELECTION_ENABLED": "false", "RESERVATION_FETCH_INTERVAL": "3600"}


def users() -> list[str]:
    return [f"s{i:02d}" for i in range(BOOKINGS)]


def scenario() -> dict[str, Any]:
    names = users()
    return {
        "namespaces": [*names, vocab.PRODUCT_NAME],
        "nodes": [],
        "app": one_class_app(names, GROUP, BOOKINGS * GPUS, GPUS),
    }


def manifest(owner: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": owner,
            "labels": {vocab.GPU_CLASS_LABEL: GPU_CLASS},
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


def reference_of(pod: dict[str, Any]) -> str | None:
    notes = (pod.get("metadata") or {}).get("annotations") or {}
    ref = notes.get(vocab.BOOKING_REFERENCE)
    return ref if isinstance(ref, str) else None


class Admitted:
    """Fed by the kube emulator's store at each pod write: which pods carry which
    booking's reference, and every instant one booking's pods exceed its GPUs."""

    def __init__(self, budgets: dict[str, int]) -> None:
        self.budgets = budgets
        self.under: dict[str, set[str]] = {}
        self.where: dict[str, str] = {}
        self.over = 0
        self.worst: Counter[str] = Counter()
        self.writes = 0
        #: The first over-admission: the booking, its pods and their claim ids.
        self.first = ""
        self.claims: dict[str, str] = {}

    def put_nowait(self, item: Change | None) -> None:
        if item is None:
            return
        self.writes += 1
        meta = item.object.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        old = self.where.pop(key, None)
        if old is not None:
            self.under[old].discard(key)
        ref = reference_of(item.object)
        notes = meta.get("annotations") or {}
        self.claims[key] = str(notes.get(vocab.ADMISSION_CLAIM, ""))[:8]
        if item.type != "DELETED" and ref is not None:
            self.where[key] = ref
            self.under.setdefault(ref, set()).add(key)
            excess = len(self.under[ref]) - self.budgets.get(ref, 0)
            if excess > 0:
                self.over += 1
                self.worst[ref] = max(self.worst[ref], excess)
                if not self.first:
                    claims = sorted(self.claims.get(k, "?") for k in self.under[ref])
                    self.first = f"{ref} at write {self.writes}: {sorted(self.under[ref])} {claims}"


@dataclass
class Load:
    """What the load did."""

    creates: int = 0
    deletes: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


async def drive(gateway: Gateway, rng: random.Random, load: Load) -> None:
    """``OPERATIONS`` random creates and deletes, ``CONCURRENCY`` at a time."""
    live: dict[str, list[str]] = {u: [] for u in users()}
    serial = iter(range(10**9))
    ops = asyncio.Queue[int]()
    for i in range(OPERATIONS):
        ops.put_nowait(i)

    async def one() -> None:
        owner = rng.choice(users())
        pods = live[owner]
        create = not pods or (len(pods) < MAX_PODS and rng.random() < 0.55)
        try:
            if create:
                name = f"p{next(serial)}"
                await gateway.create(PODS, manifest(owner, name), owner)
                pods.append(name)
                load.creates += 1
            else:
                name = pods.pop(rng.randrange(len(pods)))
                await gateway.delete(PODS, name, owner)
                load.deletes += 1
        except NotFound:
            load.deletes += 1
        except KubeError as exc:
            load.errors[type(exc).__name__] += 1

    async def worker() -> None:
        while not ops.empty():
            ops.get_nowait()
            await one()

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    load.seconds = time.monotonic() - started


async def mismatches(gateway: Gateway, namespace: str) -> list[str]:
    """Bookings whose holds do not name exactly their live admitted pods."""
    pods: dict[str, set[str]] = {}
    for pod in (await gateway.list_all(PODS)).items:
        ref = reference_of(pod)
        if ref and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            pods.setdefault(ref, set()).add(str(pod["metadata"]["uid"]))
    wrong = []
    for obj in (await gateway.list_all(GPU_RESERVATIONS, namespace)).items:
        res = model.from_object(obj)
        holds = {h.pod_uid for h in res.holds}
        if holds != pods.get(res.name, set()):
            wrong.append(res.name)
    return wrong


async def settle(gateway: Gateway, namespace: str) -> tuple[float, list[str]]:
    started = time.monotonic()
    wrong = await mismatches(gateway, namespace)
    while wrong and time.monotonic() - started < SETTLE_S:
        await asyncio.sleep(1.0)
        wrong = await mismatches(gateway, namespace)
    return time.monotonic() - started, wrong


async def measure(state: Path, seed: int) -> list[str]:
    ctx = SandboxContext(state_dir=state, scenario=scenario())
    async with with_replica(ctx, ["kube", "app", "webhook"], ENV, webhook_replicas=3) as box:
        gateway, store = box.gateway, box.kube.store
        budgets = await book(ctx.endpoints["app"], gateway, ctx.namespace)
        admitted = Admitted(budgets)
        _, subscription = store.subscribe("", PODS.plural, store.resource_version)
        subscription.queue = admitted  # type: ignore[assignment]
        try:
            load = Load()
            await drive(gateway, random.Random(seed), load)
            took, wrong = await settle(gateway, ctx.namespace)
            return report(load, admitted, took, wrong, seed)
        finally:
            store.unsubscribe(subscription)


async def book(app: str, gateway: Gateway, namespace: str) -> dict[str, int]:
    """One open booking per user; their GPUReservations mirrored. Name → GPUs."""
    async with httpx.AsyncClient(timeout=10) as http:
        for owner in users():
            body = {
                "username": owner,
                "group": GROUP,
                "gpu_class": GPU_CLASS,
                "gpu_count": GPUS,
                "start": "-1m",
                "end": "+4h",
            }
            answer = await http.post(f"{app}/_sandbox/bookings", json=body)
            if answer.status_code != 201:
                raise RuntimeError(f"booking for {owner}: {answer.status_code} {answer.text}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        items = (await gateway.list_all(GPU_RESERVATIONS, namespace)).items
        if len(items) >= BOOKINGS:
            return {o["metadata"]["name"]: int(o["spec"]["gpuCount"]) for o in items}
        await asyncio.sleep(0.25)
    raise RuntimeError("the bookings were not mirrored within 30 s")


def report(load: Load, admitted: Admitted, took: float, wrong: list[str], seed: int) -> list[str]:
    rate = (load.creates + load.deletes) / load.seconds if load.seconds else 0.0
    errors = ", ".join(f"{k} {v}" for k, v in sorted(load.errors.items())) or "0"
    worst = max(admitted.worst.values(), default=0)
    return [
        f"{OPERATIONS} operations (seed {seed}) across {BOOKINGS} bookings of {GPUS} GPUs, "
        f"{CONCURRENCY} at a time, 3 webhook replicas + 1 reconciler",
        f"load: {load.creates} creates, {load.deletes} deletes in {load.seconds:.1f} s "
        f"wall ({rate:.0f} ops/s); API errors: {errors}",
        f"over-admissions: {admitted.over} instants (worst excess {worst} GPU) over "
        f"{admitted.writes} pod writes — must be 0"
        + (f"; first: {admitted.first}" if admitted.first else ""),
        f"ledgers vs pods: {'equal' if not wrong else f'{len(wrong)} bookings differ'} "
        f"{took:.1f} s after the load stopped — must be equal",
    ]


def run() -> list[str]:
    seed = int(os.environ.get("BENCH_SOAK_SEED", "14"))
    return in_fresh_state("soak", lambda state: measure(state, seed))


if __name__ == "__main__":
    print("\n".join(run()))
