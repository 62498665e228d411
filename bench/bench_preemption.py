"""Preemption benchmark (issue 13, acceptance 5): one sweep and one forecast over
10,000 pods / 500 nodes / 2,000 reservations, and decided-to-deleted latency.

The world (built in memory, no I/O): 5 classes of 100 nodes × 20 GPUs, every GPU taken
by a 1-GPU pod (10,000). Per class 400 reservations: 200 ended bookings of 5 GPUs whose
1,000 pods overstay, 125 open bookings of 8 GPUs whose 1,000 pods are guaranteed, and
75 upcoming bookings of 4 GPUs — 10 starting inside the preemption lead (40 GPUs to
reclaim per class, 200 victims in all), 20 inside the warning lead, 45 hours later.

1. **Sweep CPU**: ``reconciler.preemption.sweep.Sweeper.once`` (plan, victim choice, warnings
   planned and reconciled, kills) against an in-memory API stand-in that answers at
   once, so the figure is the sweep's own work; the planning part alone is timed too.
2. **Forecast CPU**: ``reconciler.preemption.forecast``'s computation (holders, rooms, model) and
   the JSON encoding of the body.
3. **Decided → deleted** for 50 victims: the sandbox's Kubernetes emulator runs in this
   process over real HTTP; the sweep chooses 50 overstaying pods and each is re-read,
   told (Event ``Preempted``) and deleted with a uid precondition. Latency per victim =
   its delete answered − the sweep's decision (monotonic).

CPU time is ``time.process_time`` (this process only); every figure is the median of
``REPEATS`` runs (``BENCH_MODE=full``: more). Figures go to ``$BENCH_OUT/preemption.json``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reconciler.base import events
from reconciler.base.pods import PodView, project_pod
from reconciler.base.settings import PreemptionSettings
from reconciler.preemption.plan import holders_of, rooms_from
from reconciler.preemption.sweep import Sweeper
from sandbox.runner import Sandbox, SandboxContext
from shared import model, vocab
from shared.clock import ManualClock
from shared.gateway import Gateway
from shared.policy.forecast import forecast
from shared.policy.inventory import PodPlacement, build_inventory, project_node_facts
from shared.policy.matching import MatchRules
from shared.resources import PODS
from tests.policy.builders import PodBuilder

ROOT = Path(__file__).resolve().parents[1]
CLASSES = [f"g{i}" for i in range(5)]
NODES_PER_CLASS = 100
GPUS_PER_NODE = 20
NOW = datetime(2026, 12, 3, 10, 5, tzinfo=UTC)
LEAD = timedelta(minutes=15)
RULES = MatchRules()


def node(name: str, cls: str, gpus: int = GPUS_PER_NODE) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {
            "taints": [
                {
                    "key": vocab.RESERVATION_TAINT_KEY,
                    "value": cls,
                    "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
                }
            ]
        },
        "status": {
            "allocatable": {vocab.GPU_RESOURCE: str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, ns: str, cls: str, ref: str, on: str) -> dict[str, Any]:
    """A running 1-GPU pod of ``cls`` on node ``on``, admitted under ``ref``."""
    built = PodBuilder(name, ns).uid(f"uid-{ns}-{name}").cls(cls).gpus("1")
    return built.annotate(vocab.BOOKING_REFERENCE, ref).on(on).build()


def booking(rid: int, owner: str, cls: str, gpus: int, start: datetime, end: datetime) -> Any:
    facts = model.ReservationFacts(
        rid, owner, cls, cls.upper(), gpus, model.Kind.BOOKING, start, end,
        model.State.ACTIVE, NOW - timedelta(days=1),
    )  # fmt: skip
    return model.GPUReservation(facts)


class World:
    """Nodes, pods and reservations of the benchmark (see the module docstring)."""

    def __init__(self, classes: list[str], nodes_per_class: int, gpus: int = GPUS_PER_NODE):
        self.nodes: list[dict[str, Any]] = []
        self.pods: dict[str, dict[str, Any]] = {}
        self.reservations: dict[str, model.GPUReservation] = {}
        rid = 0
        for cls in classes:
            names = [f"{cls}-n{i:03d}" for i in range(nodes_per_class)]
            self.nodes += [node(n, cls, gpus) for n in names]
            slots = [n for n in names for _ in range(gpus)]
            half = len(slots) // 2
            for kind, count, size, start, end in (
                ("ended", half // 5, 5, NOW - timedelta(hours=3), NOW - timedelta(hours=1)),
                ("open", half // 8, 8, NOW - timedelta(hours=1), NOW + timedelta(hours=5)),
            ):
                for _ in range(count):
                    rid += 1
                    owner = f"u{rid % 50:02d}"
                    res = booking(rid, owner, cls, size, start, end)
                    self.reservations[res.name] = res
                    for j in range(size):
                        on = slots.pop()
                        raw = pod(f"{kind}-{rid}-{j}", owner, cls, res.name, on)
                        self.pods[f"{owner}/{raw['metadata']['name']}"] = raw
            for count, ahead in ((10, 10), (20, 25), (45, 180)):
                for _ in range(count):
                    rid += 1
                    start = NOW + timedelta(minutes=ahead)
                    res = booking(rid, f"v{rid}", cls, 4, start, start + timedelta(hours=2))
                    self.reservations[res.name] = res
        self.views: dict[str, PodView] = {}
        for key, raw in self.pods.items():
            view = project_pod(raw, RULES)
            if view is not None:
                self.views[key] = view

    def inventory(self) -> Any:
        placements = [PodPlacement(v.node, v.gpus, True) for v in self.views.values()]
        facts = [f for f in map(project_node_facts, self.nodes) if f is not None]
        return build_inventory(facts, placements, CLASSES)


class Instant:
    """An API stand-in answering at once (reads from the world, writes dropped)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.deletes = 0
        self.patches = 0

    async def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self.world.pods[f"{namespace}/{name}"]

    async def patch(self, *args: Any, **kw: Any) -> dict[str, Any]:
        self.patches += 1
        return {}

    async def delete(self, *args: Any, **kw: Any) -> dict[str, Any]:
        self.deletes += 1
        return {}

    async def create(self, *args: Any, **kw: Any) -> Any:
        return None


async def _no_event(*args: Any, **kw: Any) -> bool:
    return True


def sweeper(world: World, gateway: Any, emit: Any, inventory: Callable[[], Any]) -> Sweeper:
    return Sweeper(
        gateway,
        ManualClock(NOW),
        emit,
        pods=lambda: world.views,
        reservations=lambda: world.reservations,
        inventory=inventory,
        ready=lambda: True,
        app=None,
        settings=PreemptionSettings(lead=LEAD, delegate=False),
        rules=RULES,
        zone=None,
        lock=asyncio.Lock(),
        rng=random.Random(1),
    )


def cpu(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.process_time()
    value = fn()
    return time.process_time() - started, value


def repeats() -> int:
    return 5 if os.environ.get("BENCH_MODE") == "full" else 3


def bench_sweep(world: World) -> dict[str, Any]:
    inventory = world.inventory()
    sweeps, plans = [], []
    victims = warned = 0
    for _ in range(repeats()):
        gw = Instant(world)
        s = sweeper(world, gw, _no_event, lambda: inventory)
        took, result = cpu(functools.partial(asyncio.run, s.once()))
        sweeps.append(took)
        victims, warned = len(result.victims), len(result.warnings)
        plan, _ = cpu(lambda: _plan_only(world, inventory))
        plans.append(plan)
    inv, _ = cpu(world.inventory)
    return {
        "sweep_cpu_s": statistics.median(sweeps),
        "plan_cpu_s": statistics.median(plans),
        "inventory_cpu_s": inv,
        "victims": victims,
        "warned": warned,
    }


def _plan_only(world: World, inventory: Any) -> int:
    holders = holders_of(world.views.values(), world.reservations, NOW, use_group=False)
    rooms = rooms_from(inventory)
    return len(holders) + len(rooms)


def bench_forecast(world: World) -> dict[str, Any]:
    inventory = world.inventory()
    computes, encodes = [], []
    size = 0
    for _ in range(repeats()):

        def compute() -> dict[str, Any]:
            holders = holders_of(world.views.values(), world.reservations, NOW, use_group=False)
            bookings = [r.facts for r in world.reservations.values()]
            return forecast(NOW, LEAD, bookings, holders, rooms_from(inventory), delegated=True)

        took, body = cpu(compute)
        computes.append(took)
        enc, text = cpu(functools.partial(json.dumps, body))
        encodes.append(enc)
        size = len(text)
    return {
        "forecast_cpu_s": statistics.median(computes),
        "encode_cpu_s": statistics.median(encodes),
        "body_bytes": size,
    }


async def bench_latency(state: Path) -> dict[str, Any]:
    """50 victims on the kube emulator over real HTTP (module docstring, item 3)."""
    world = World(["g0"], 5, 20)  # 100 pods: 50 overstay, 50 guaranteed
    for r in list(world.reservations.values()):
        if r.facts.start > NOW:
            del world.reservations[r.name]
    start = NOW + timedelta(minutes=10)
    free = 100 - len(world.pods)  # what the class has free: the booking needs 50 more
    big = booking(9999, "dave", "g0", 50 + free, start, start + timedelta(hours=1))
    world.reservations[big.name] = big
    users = sorted({raw["metadata"]["namespace"] for raw in world.pods.values()})
    scenario = {"namespaces": [*users, "dave", vocab.PRODUCT_NAME], "nodes": []}
    ctx = SandboxContext(state_dir=state, scenario=scenario)
    sandbox = Sandbox(ctx, ["kube"])
    await sandbox.start()
    assert ctx.kubeconfig is not None
    config = state / "bench.kubeconfig"
    config.write_text(ctx.kubeconfig, encoding="utf-8")
    gateway = Gateway.from_kubeconfig(str(config))
    try:
        for raw in world.pods.values():
            body = {k: v for k, v in raw.items() if k != "status"}
            body["metadata"] = {k: v for k, v in raw["metadata"].items() if k != "uid"}
            made = await gateway.create(PODS, body, raw["metadata"]["namespace"])
            raw["metadata"]["uid"] = made.body["metadata"]["uid"]
        world.views = {k: v for k, raw in world.pods.items() if (v := project_pod(raw, RULES))}
        inventory = world.inventory()
        emit = functools.partial(events.emit)
        s = sweeper(world, gateway, emit, lambda: inventory)
        result = await s.once()
        lat = sorted(result.latencies_s)
        return {
            "victims": len(result.victims),
            "deleted": len(result.deleted),
            "latency_p50_ms": 1000 * statistics.median(lat) if lat else None,
            "latency_max_ms": 1000 * lat[-1] if lat else None,
            "all_deleted_ms": 1000 * lat[-1] if lat else None,
        }
    finally:
        gateway.close()
        await sandbox.stop()


def write_json(found: Mapping[str, Any]) -> Path:
    folder = Path(os.environ.get("BENCH_OUT", ROOT / ".bench"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "preemption.json"
    path.write_text(json.dumps(found, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def run() -> list[str]:
    built, world = cpu(lambda: World(CLASSES, NODES_PER_CLASS))
    found: dict[str, Any] = {
        "pods": len(world.pods),
        "nodes": len(world.nodes),
        "reservations": len(world.reservations),
        "build_cpu_s": built,
        "cpus": os.cpu_count(),
        "load_average_before": os.getloadavg(),
    }
    found["sweep"] = bench_sweep(world)
    found["forecast"] = bench_forecast(world)
    state = Path(tempfile.mkdtemp(prefix="bench-preemption-"))
    try:
        found["latency"] = asyncio.run(bench_latency(state))
    finally:
        shutil.rmtree(state, ignore_errors=True)
    path = write_json(found)
    sw, fc, lt = found["sweep"], found["forecast"], found["latency"]
    return [
        f"world: {found['pods']} pods, {found['nodes']} nodes, "
        f"{found['reservations']} reservations",
        f"sweep: {sw['sweep_cpu_s'] * 1000:.0f} ms CPU ({sw['victims']} victims, "
        f"{sw['warned']} warned; holders + rooms alone {sw['plan_cpu_s'] * 1000:.0f} ms, "
        f"inventory build {sw['inventory_cpu_s'] * 1000:.0f} ms)",
        f"forecast: {fc['forecast_cpu_s'] * 1000:.0f} ms CPU + {fc['encode_cpu_s'] * 1000:.0f} ms "
        f"JSON ({fc['body_bytes'] / 1e6:.1f} MB body)",
        f"decided -> deleted ({lt['deleted']}/{lt['victims']} victims, kube emulator over "
        f"HTTP): p50 {lt['latency_p50_ms']:.0f} ms, last {lt['latency_max_ms']:.0f} ms",
        f"figures: {path}",
    ]


if __name__ == "__main__":
    print("\n".join(run()))
