"""On-demand lease events, one pod at a time (issue 12 acceptance 1 and 6).

The figures behind "the lease is cancelled `pod-terminated` when the pod finishes —
within 3 s" and "a pod running under a lease moves onto its owner's booking within 2 s
of the booking opening". The sandbox tests (tests/reconciler/test_ondemand_sandbox.py)
check those behaviours with liveness bounds only: a loaded CI machine cannot promise
seconds.

The sandbox's kube, app and cluster (emulated scheduler and kubelet) run in this
process; one real reconciler replica as a subprocess (leader election off, pushes on).
Two reserved a100 nodes of 8 GPUs; one user, no booking. ``ROUNDS`` times, one after
the other:

1. *finished → lease cancelled*: a JIT pod that runs 2 s gets its lease and runs; from
   the kube store's commit of its phase ``Succeeded`` to the app emulator holding its
   lease cancelled (polled in-process every 10 ms);
2. *opened → merged*: a JIT pod runs under its lease; the user books 2 GPUs opening on
   a whole second 3 s ahead; from that instant to the kube store's commit of the pod
   carrying the booking's reference. The booking is then cancelled and the pod deleted.

Also *created → tolerated* for every pod (the lease path end to end, one pod alone;
``bench ondemand`` has the 200-pod burst). Wall seconds (the sandbox clock at factor
1). Figures go to ``$BENCH_OUT/lease.json``; a measurement, never a pass/fail check.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.bench_ondemand import BENCH_LABEL, BENCH_VALUE, GROUP, Seen, lags, manifest
from bench.bench_window_open import aligned_clock, key_of, one_class_app
from bench.sandboxed import measured, spread, with_replica
from sandbox.app.emulator import Emulator
from sandbox.kube.store import Change
from sandbox.runner import SandboxContext
from shared import model, vocab
from shared.clock import ScaledClock, format_utc
from shared.resources import GPU_RESERVATIONS, PODS

ROUNDS = 20 if os.environ.get("BENCH_MODE") == "full" else 5
USER = "u00"
GIVE_UP_S = 30.0
ENV = {"LEADER_ELECTION_ENABLED": "false", "RESERVATION_FETCH_INTERVAL": "3600"}


def scenario() -> dict[str, Any]:
    taint = f"{vocab.RESERVATION_TAINT_KEY}=a100:{vocab.TAINT_EFFECT_NO_SCHEDULE}"
    return {
        "namespaces": [USER, vocab.PRODUCT_NAME],
        "nodes": [
            {
                "name": f"a100-{i}",
                "labels": {vocab.GPU_CLASS_LABEL: "a100"},
                "taints": [taint],
                "allocatable": {vocab.GPU_RESOURCE: "8", "cpu": "64"},
            }
            for i in range(2)
        ],
        "app": one_class_app([USER], GROUP, 16, 8),
    }


class Events(Seen):
    """``Seen`` plus each bench pod's first ``Succeeded`` write and the first write of
    each booking reference it carries."""

    def __init__(self, clock: ScaledClock) -> None:
        super().__init__(clock)
        self.succeeded: dict[str, datetime] = {}
        self.carried: dict[tuple[str, str], datetime] = {}

    def put_nowait(self, item: Change | None) -> None:
        super().put_nowait(item)
        if item is None or item.type == "DELETED":
            return
        meta = item.object.get("metadata") or {}
        if (meta.get("labels") or {}).get(BENCH_LABEL) != BENCH_VALUE:
            return
        key, now = key_of(item.object), self.clock.now()
        if (item.object.get("status") or {}).get("phase") == "Succeeded":
            self.succeeded.setdefault(key, now)
        ref = (meta.get("annotations") or {}).get(vocab.BOOKING_REFERENCE)
        if ref:
            self.carried.setdefault((key, str(ref)), now)


async def until(check: Any) -> Any:
    """Poll ``check()`` every 10 ms until it is truthy (None after GIVE_UP_S)."""
    deadline = time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline:
        if got := check():
            return got
        await asyncio.sleep(0.01)
    return None


def lease_of(app: Emulator, pod: dict[str, Any] | None) -> Any:
    """The app's lease row whose reference the pod carries (None: none)."""
    notes = ((pod or {}).get("metadata") or {}).get("annotations") or {}
    ref = str(notes.get(vocab.BOOKING_REFERENCE, ""))
    rid = ref.removeprefix(vocab.RESERVATION_REF_PREFIX)
    return app.state.reservations.get(int(rid)) if rid.isdigit() else None


async def teardown(box_ctx: SandboxContext, gateway: Any, events: Events, i: int) -> float | None:
    """A 2-second JIT pod: seconds from its Succeeded commit to its lease cancelled."""
    app: Emulator = box_ctx.handles["app"]
    body = manifest(USER, i)
    body["metadata"]["name"] = f"short-{i}"
    body["metadata"]["annotations"][vocab.SANDBOX_RUN_SECONDS] = "2"
    await gateway.create(PODS, body, USER)
    key = f"{USER}/short-{i}"
    if await until(lambda: events.succeeded.get(key)) is None:
        return None
    lease = lease_of(app, await gateway.get(PODS, f"short-{i}", USER))
    if lease is None or await until(lambda: str(lease.status) == "cancelled") is None:
        return None
    return (events.clock.now() - events.succeeded[key]).total_seconds()


async def merge(
    box_ctx: SandboxContext, gateway: Any, http: httpx.AsyncClient, events: Events, i: int
) -> float | None:
    """A JIT pod running under its lease; seconds from its owner's booking opening to
    the pod carrying the booking's reference."""
    body = manifest(USER, i)
    body["metadata"]["name"] = f"long-{i}"
    await gateway.create(PODS, body, USER)
    key = f"{USER}/long-{i}"
    if await until(lambda: events.tolerated.get(key)) is None:
        return None
    opens = (events.clock.now() + timedelta(seconds=4)).replace(microsecond=0)
    booking = {
        "username": USER,
        "group": GROUP,
        "gpu_class": "a100",
        "gpu_count": 2,
        "start": format_utc(opens),
        "end": format_utc(opens + timedelta(hours=1)),
    }
    app = box_ctx.endpoints["app"]
    answer = await http.post(f"{app}/_sandbox/bookings", json=booking)
    answer.raise_for_status()
    rid = int(answer.json()["id"])
    merged = await until(lambda: events.carried.get((key, model.reference(rid))))
    # Clear the stage: the next round's pods must find no booking (they would go to it).
    (await http.post(f"{app}/_sandbox/bookings/{rid}/cancel")).raise_for_status()
    await gateway.delete(PODS, f"long-{i}", USER)
    await cancelled(gateway, box_ctx.namespace, model.reference(rid))
    return None if merged is None else (merged - opens).total_seconds()


async def cancelled(gateway: Any, namespace: str, name: str) -> None:
    """Wait (at most GIVE_UP_S) until the mirror shows ``name`` Cancelled."""
    deadline = time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline:
        obj = await gateway.get(GPU_RESERVATIONS, name, namespace)
        if (obj.get("status") or {}).get("phase") == "Cancelled":
            return
        await asyncio.sleep(0.05)


async def measure(state: Path) -> dict[str, Any]:
    clock = aligned_clock(1.0)
    ctx = SandboxContext(state_dir=state, scenario=scenario(), clock=clock)
    async with with_replica(ctx, ["kube", "app", "cluster"], ENV) as box:
        store = box.kube.store
        events = Events(clock)
        _, subscription = store.subscribe("", PODS.plural, store.resource_version)
        subscription.queue = events
        try:
            finished, merged = [], []
            async with httpx.AsyncClient(timeout=10) as http:
                for i in range(ROUNDS):
                    finished.append(await teardown(ctx, box.gateway, events, i))
                    merged.append(await merge(ctx, box.gateway, http, events, i))
        finally:
            store.unsubscribe(subscription)
    return {
        "rounds": ROUNDS,
        "created_to_tolerated_s": lags(events.created, events.tolerated),
        "finished_to_cancelled_s": finished,
        "opened_to_merged_s": merged,
        "load_average": os.getloadavg(),
    }


def run() -> list[str]:
    found = measured("lease", measure)
    load = ", ".join(f"{x:.1f}" for x in found["load_average"])
    return [
        f"{found['rounds']} rounds, one JIT pod at a time; load average {load}",
        spread("created -> tolerated", found["created_to_tolerated_s"], GIVE_UP_S),
        spread(
            "finished -> lease cancelled (goal <= 3 s)", found["finished_to_cancelled_s"], GIVE_UP_S
        ),
        spread(
            "booking opened -> pod merged onto it (goal <= 2 s)",
            found["opened_to_merged_s"],
            GIVE_UP_S,
        ),
    ]


if __name__ == "__main__":
    print("\n".join(run()))
