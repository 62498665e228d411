"""Reconciler at cluster scale: startup, memory and CPU as the cluster grows.

For each size *N* pods (1,000, 3,000, 10,000): N/20 nodes (a tenth of them tainted
``a100`` GPU nodes), N/5 reservations and N/5 GPU pods, the other pods plain, spread
over N/50 user namespaces. The app emulator holds the N/5 one-GPU bookings (one user
each, windows starting one to six days ahead, inside the mirror's look-ahead); the kube
emulator holds the nodes and the pods (GPU pods labelled with the class, queued on
their owner's upcoming booking; no scheduler serves their ``schedulerName``, so they
stay Pending as the emulated scheduler finds them). One real reconciler replica then
starts against them, a pod of the chart's release (``sandbox.release_replicas``, leader
election off) run by the process kubelet; measured:

- **ready**: seconds from the process's start (``/proc``) to ``leader.loops_started`` (the first
  LISTs, the startup sync, caches synced) — on the first start, whose sync creates the
  N/5 GPUReservation mirrors, and on a restart (a second pod after the first was
  scaled away), whose sync finds them in place;
- **status after ready**: seconds from ``leader.loops_started`` to the N/5-th
  ``mirror.status`` line, when the first start's deferred status writes (phase, empty
  ledger) are done and ``kubectl get gpures`` shows every phase (the CPU interval
  below starts a tick after that);
- **RSS** after it is ready and after the measured interval;
- **CPU per periodic pass**: the process's CPU seconds (``/proc/<pid>/stat``) over an
  idle interval of ``PASSES`` backstop ticks (``QUEUE_PROCESSOR_INTERVAL`` = ``TICK_S``),
  divided by the ticks: every loop's periodic work (queue pass, ledger upkeep, guarantees,
  watches) per tick.
- **usage share**: the CPU the usage passes took over that interval (the reconciler's
  ``gpu_reservation_usage_pass_cpu_seconds_total``, read from ``/metrics`` before and
  after; a full pass every tick: ``USAGE_INTERVAL_SECONDS`` = ``TICK_S``, six times the
  default rate) as a share of the process's CPU. The scenario's bookings are upcoming and
  its pods queued, so it is also measured in-process on the worst steady case: N/5
  bookings all open, N pods all running under them (``usage_pass_cost``): the CPU of one
  full pass, and that cost at the default interval as a share of the process's CPU per
  second measured above.

Waiting Events are off (``RESERVATION_WAIT_EVENT_ENABLED=false``): N/5 first Events
are a one-off burst, not steady state. Growth from 1k to 10k is printed as the ratio
of each figure to the pod ratio (1.0 = linear). The short mode runs 1k and 10k, the full
mode 1k, 3k and 10k (``BENCH_SCALE_SIZES`` overrides, e.g. ``1000,3000``). JSON in
``$BENCH_OUT/scale.json``.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from bench.bench_webhook import conditions, write_json
from bench.bench_window_open import one_class_app
from bench.procstat import cpu_s, rss_mib, started_at
from reconciler.base.metrics import UsageMetrics
from reconciler.base.pods import PodView
from reconciler.base.settings import UsageSettings
from reconciler.usage import UsageKeeper
from sandbox import chart
from sandbox.install import install_base
from sandbox.release_replicas import ReconcilerPod, Reconcilers
from sandbox.runner import Sandbox, SandboxContext
from shared import model, vocab
from shared.clock import ManualClock, SystemClock, format_utc
from shared.gateway import Gateway
from shared.model import GPUReservation, Kind, ReservationFacts, State
from shared.policy.gpus import GpuRequest
from shared.policy.matching import PodProfile
from shared.resources import GPU_RESERVATIONS, PODS

GPU_CLASS = "a100"
GROUP = "scale"
#: The pods' scheduler: none serves it, so they stay Pending, unbound.
UNSERVED_SCHEDULER = "bench-unscheduled"
TICK_S = 5
PASSES = 3
CREATE_CONCURRENCY = 32
ENV = {
    "LEADER_ELECTION_ENABLED": "false",
    "RESERVATION_FETCH_INTERVAL": "3600",
    "QUEUE_PROCESSOR_INTERVAL": str(TICK_S),
    "RESERVATION_WAIT_EVENT_ENABLED": "false",
    "POD_PROBLEM_EVENT_ENABLED": "false",
    "USAGE_INTERVAL_SECONDS": str(TICK_S),
}
#: The default usage pass interval (``USAGE_INTERVAL_SECONDS``).
USAGE_DEFAULT_S = 30.0
USAGE_CPU = "gpu_reservation_usage_pass_cpu_seconds_total"


def sizes() -> list[int]:
    full = os.environ.get("BENCH_MODE") == "full"
    text = os.environ.get("BENCH_SCALE_SIZES", "1000,3000,10000" if full else "1000,10000")
    return [int(s) for s in text.split(",") if s.strip()]


def users(n: int) -> list[str]:
    return [f"u{i:04d}" for i in range(max(1, n // 50))]


def scenario(n: int) -> dict[str, Any]:
    names = users(n)
    reservations = n // 5
    nodes = []
    for i in range(max(1, n // 20)):
        allocatable = {"cpu": "64", "memory": "256Gi"}
        node: dict[str, Any] = {"name": f"node-{i:04d}", "allocatable": allocatable}
        if i % 10 == 0:
            allocatable[vocab.GPU_RESOURCE] = "8"
            node["taints"] = [f"{vocab.RESERVATION_TAINT_KEY}={GPU_CLASS}:NoSchedule"]
        nodes.append(node)
    bookings = [
        {
            "username": names[i % len(names)],
            "group": GROUP,
            "gpu_class": GPU_CLASS,
            "gpu_count": 1,
            "start": f"+{24 + (i % 5) * 24}h",
            "end": f"+{26 + (i % 5) * 24}h",
        }
        for i in range(reservations)
    ]
    return {
        "namespaces": [*names, vocab.PRODUCT_NAME],
        "nodes": nodes,
        "app": {**one_class_app(names, GROUP, reservations), "bookings": bookings},
    }


def pod(n: int, i: int, gpu: bool) -> dict[str, Any]:
    names = users(n)
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    labels = {"app": "scale"}
    if gpu:
        container["resources"] = {"limits": {vocab.GPU_RESOURCE: "1"}}
        labels[vocab.GPU_CLASS_LABEL] = GPU_CLASS
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i:05d}", "namespace": names[i % len(names)], "labels": labels},
        "spec": {"containers": [container], "schedulerName": UNSERVED_SCHEDULER},
    }


async def create_pods(gateway: Gateway, n: int) -> float:
    limit = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def one(i: int) -> None:
        body = pod(n, i, gpu=i % 5 == 0)
        async with limit:
            await gateway.create(PODS, body, body["metadata"]["namespace"])

    t0 = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(n)))
    return time.monotonic() - t0


async def ready_after(replica: ReconcilerPod, timeout_s: float) -> float:
    """Seconds from the process's start to its ``leader.loops_started`` log line."""
    started = started_at(replica.pid)
    waited = 0.0
    while waited < timeout_s:
        ready = [e["ts"] for e in replica.logs() if e.get("event") == "leader.loops_started"]
        if ready:
            return datetime.fromisoformat(ready[0]).timestamp() - started
        await asyncio.sleep(0.1)
        waited += 0.1
    return float("nan")


async def status_after_ready(replica: ReconcilerPod, count: int, timeout_s: float) -> float:
    """Seconds from ``leader.loops_started`` to the ``count``-th ``mirror.status`` log
    line (waited for, up to ``timeout_s``; NaN when it never came)."""
    waited = 0.0
    while waited < timeout_s:
        entries = replica.logs()
        ready = [e["ts"] for e in entries if e.get("event") == "leader.loops_started"]
        written = [e["ts"] for e in entries if e.get("event") == "mirror.status"]
        if ready and len(written) >= count:
            end = datetime.fromisoformat(written[count - 1])
            return (end - datetime.fromisoformat(ready[0])).total_seconds()
        await asyncio.sleep(0.5)
        waited += 0.5
    return float("nan")


async def measure(n: int, state: Path) -> dict[str, Any]:
    ctx = SandboxContext(state_dir=state, scenario=scenario(n), clock=SystemClock())
    box = Sandbox(ctx, ["kube", "cluster", "app"])
    t0 = time.monotonic()
    await box.start()
    seeded_s = time.monotonic() - t0
    kit = Reconcilers(ctx)
    assert ctx.kubeconfig is not None
    admin = state / "admin.kubeconfig"
    admin.write_text(ctx.kubeconfig, encoding="utf-8")
    gateway = Gateway.from_kubeconfig(str(admin))
    try:
        await install_base(gateway, chart.objects(ctx.namespace))
        created_s = await create_pods(gateway, n)
        replica = await kit.add("r0", ENV)
        pid = replica.pid
        ready_s = await ready_after(replica, 120)
        status_s = await status_after_ready(replica, n // 5, 120)
        await asyncio.sleep(TICK_S)  # the first passes after the start settle
        rss_ready = rss_mib(pid)
        before = cpu_s(pid)
        usage_before = await scraped(replica.url, USAGE_CPU)
        await asyncio.sleep(TICK_S * PASSES)
        spent = cpu_s(pid) - before
        usage_spent = await scraped(replica.url, USAGE_CPU) - usage_before
        per_pass = spent / PASSES
        mirrors = len((await gateway.list_all(GPU_RESERVATIONS, ctx.namespace)).items)
        rss_after = rss_mib(pid)
        await replica.stop()
        replica = await kit.add("r1", ENV)  # a restart: the mirrors exist
        restart_s = await ready_after(replica, 120)
        return {
            "pods": n,
            "gpu_pods": n // 5,
            "reservations": n // 5,
            "mirrored": mirrors,
            "nodes": max(1, n // 20),
            "setup_s": {"emulators": seeded_s, "pods": created_s},
            "ready_s": ready_s,
            "restart_ready_s": restart_s,
            "status_after_ready_s": status_s,
            "rss_mib": {"ready": rss_ready, "after": rss_after},
            "cpu_s_per_pass": per_pass,
            "usage_cpu_share": usage_spent / spent if spent > 0 else float("nan"),
        }
    finally:
        await kit.close()
        gateway.close()
        await box.stop()
        gc.collect()


async def scraped(url: str, name: str) -> float:
    """The value of the unlabelled series ``name`` on ``url``/metrics (0 when absent)."""
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(f"{url}/metrics")).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def usage_pass_cost(bookings: int, pods: int, process_cpu_per_s: float) -> dict[str, float]:
    """The usage keeper in-process on ``bookings`` open bookings and ``pods`` running
    pods under them: CPU seconds of the first full pass (every record built), of a
    steady full pass (nothing changed), and the steady pass at the default interval as
    a share of ``process_cpu_per_s`` (the reconciler's measured CPU per second)."""
    now = datetime(2026, 3, 2, 12, tzinfo=UTC)
    start = now - timedelta(hours=1)
    reservations = {}
    for i in range(bookings):
        facts = ReservationFacts(
            id=i,
            owner=f"u{i % 200}",
            gpu_class=GPU_CLASS,
            gpu_class_name="A100",
            gpu_count=8,
            kind=Kind.BOOKING,
            start=start,
            end=start + timedelta(hours=8),
            state=State.ACTIVE,
            updated_at=start,
            group=GROUP,
        )
        reservations[facts.name] = GPUReservation(facts)
    keeper = UsageKeeper(
        None,  # type: ignore[arg-type]  # the in-process pass writes nothing here
        vocab.PRODUCT_NAME,
        ManualClock(now),
        lambda: reservations,
        lambda: True,
        UsageMetrics(CollectorRegistry()),
        UsageSettings(checkpoint_s=10**6),
    )
    started = format_utc(start + timedelta(minutes=5))
    for i in range(pods):
        name = model.reference(i % bookings)
        view = PodView(
            namespace="u",
            name=f"p{i}",
            uid=f"uid{i}",
            phase="Running",
            profile=PodProfile(owner="u", gpu_class=GPU_CLASS, group=GROUP, gpus=GpuRequest(1)),
            notes=((vocab.BOOKING_REFERENCE, name),),
            tolerated=True,
            gates=(),
            deleting=False,
            node="n",
            resource_version="1",
            ran=(started, ""),
        )
        keeper.pod_changed(view.key, None, view)

    async def written(*_: Any, **__: Any) -> dict[str, Any]:
        return {}

    keeper._gateway = type("NoWrites", (), {"patch": staticmethod(written)})()
    t0 = time.thread_time()
    asyncio.run(keeper.once())
    first = time.thread_time() - t0
    t0 = time.thread_time()
    asyncio.run(keeper.once())
    steady = time.thread_time() - t0
    share = steady / USAGE_DEFAULT_S / process_cpu_per_s if process_cpu_per_s > 0 else float("nan")
    return {"first_pass_cpu_s": first, "steady_pass_cpu_s": steady, "share": share}


def lines(found: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| pods | GPU pods | reservations (mirrored) | nodes | ready s (first start / restart)"
        " | status s after ready | RSS MiB ready / after | CPU s per tick"
        " | usage share: pass every tick / at the default 30 s"
        " | usage worst case: pass s first / steady, share |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in found:
        rss = f["rss_mib"]
        worst = f["usage_worst"]
        rows.append(
            f"| {f['pods']} | {f['gpu_pods']} | {f['reservations']} ({f['mirrored']}) "
            f"| {f['nodes']} | {f['ready_s']:.1f} / {f['restart_ready_s']:.1f} "
            f"| {f['status_after_ready_s']:.1f} "
            f"| {rss['ready']:.0f} / {rss['after']:.0f} "
            f"| {f['cpu_s_per_pass']:.2f} "
            f"| {100 * f['usage_cpu_share']:.2f} % / "
            f"{100 * f['usage_cpu_share'] * TICK_S / USAGE_DEFAULT_S:.2f} % "
            f"| {worst['first_pass_cpu_s']:.3f} / {worst['steady_pass_cpu_s']:.3f}, "
            f"{100 * worst['share']:.2f} % |"
        )
    if len(found) >= 2:
        small, big = found[0], found[-1]
        k = big["pods"] / small["pods"]

        def grow(a: float, b: float) -> str:
            return f"×{b / a:.1f} ({b / a / k:.2f} of linear)" if a > 0 else "n/a"

        rows.append(
            f"growth {small['pods']} → {big['pods']} pods (×{k:.0f}): ready "
            f"{grow(small['ready_s'], big['ready_s'])}, RSS "
            f"{grow(small['rss_mib']['after'], big['rss_mib']['after'])}, CPU per tick "
            f"{grow(small['cpu_s_per_pass'], big['cpu_s_per_pass'])}"
        )
    return rows


def run() -> list[str]:
    found = []
    for n in sizes():
        state = Path(tempfile.mkdtemp(prefix=f"bench-scale-{n}-"))
        try:
            measured = asyncio.run(measure(n, state))
            per_s = measured["cpu_s_per_pass"] / TICK_S
            measured["usage_worst"] = usage_pass_cost(n // 5, n, per_s)
            found.append(measured)
        finally:
            shutil.rmtree(state, ignore_errors=True)
    path = write_json("scale", {"conditions": conditions(), "sizes": found, "tick_s": TICK_S})
    return [*lines(found), f"JSON: {path}"]


if __name__ == "__main__":
    print("\n".join(run()))
