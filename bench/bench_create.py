"""Pod creation as a user meets it: the whole system against the API server alone.

``python -m bench create``. Two arms, alternating in one run, each cell the same load:

- **system**: the sandbox as ``python -m sandbox up`` runs it — the kube emulator, the
  cluster emulation, the reservation app emulator (in this process) and the chart's
  release with the sandbox's values: one webhook and one reconciler replica, processes
  the process kubelet runs from the rendered Deployments, called through the Service —
  with 20 owners, each with an open 200-GPU booking of class a100 (this benchmark's
  scenario). The cluster emulation serves the release's namespace only
  (``sandbox.cluster.component.SCOPE``): on a cluster the scheduler, kubelet and
  controllers run on CPUs of their own, here their passes over every pod would run on
  the emulator's event loop; the benchmark's pods stay Pending, as in the other arm;
- **alone**: a second kube emulator in this process with the same namespaces, users and
  admission plugin but no webhook configuration and nothing of ours watching it — the
  API server without the product.

The load (``bench.createload``): separate processes, keep-alive HTTPS, closed loop at
``c`` = 1, 10 and 50 connections; each request creates a 1-GPU a100 pod as its owner
(half with a name of their own, half with ``generateName``; owners in turn). Per ``c``
the arms alternate system, alone, alone, system, … (``ROUNDS`` each); after every cell
the pods are deleted and the benchmark waits until the system is quiet (no write for
``QUIET_S``: the reconciler has dropped the holds and said what it says), so no cell
pays for the one before. Nothing is pinned to a core.

Printed per ``c``: p50 and p99 of each arm, the difference (the latency the system
adds), creates per second, and the share of the system's pods admitted at creation
(the created pod came back with its booking reference), and the CPU per pod created of
this process's loop and of the webhook and reconciler processes, and per round the
share of the vCPUs' time the hypervisor took (steal: on a shared host, the rounds a
neighbour slowed). ``c`` = 50 is a stress cell. Both arms run on ``LOOP`` (uvloop).
``BENCH_MODE=full``: 6 s cells after 1 s of warm-up, 3 rounds, instead of 2 s / 0.5 s, 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import httpx
import uvloop

from bench.bench_window_open import one_class_app
from bench.createload import CreateLoad, CreateOutcome, run_creates
from bench.procstat import cpu_s, host_times, steal_share, thread_cpu_s
from bench.sandboxed import measured, rank
from sandbox.cluster.component import SCOPE
from sandbox.kube.admission import WebhookDispatcher
from sandbox.kube.admission.dispatcher import DispatchTimes
from sandbox.kube.admission.install import install as install_admission
from sandbox.kube.seed import seed
from sandbox.kube.server import KubeServer, settle_collector
from sandbox.runner import Sandbox, SandboxContext
from sandbox.users import grant_edit
from shared import vocab

OWNERS = 20
GPU_CLASS = "a100"
GROUP = "bench"
GPUS_PER_BOOKING = 200
CONCURRENCY = (1, 10, 50)
STRESS = frozenset({50})
#: What ``python -m sandbox up`` starts: our processes come from the chart's release.
COMPONENTS = ["kube", "cluster", "app", "release"]
#: The release's processes whose CPU the system arm counts.
PARTS = ("webhook", "reconciler")
#: Seconds without any write to the system's store that count as quiet, and the most
#: to wait for it.
QUIET_S = 0.5
QUIET_GIVE_UP_S = 30.0
#: Seconds to wait for the webhook to admit a probe pod (bookings synced, caches warm).
READY_GIVE_UP_S = 120.0
FULL = os.environ.get("BENCH_MODE") == "full"
#: The event loop of this process — both emulators and the sandbox's components: uvloop
#: (its TLS and transports in C: the emulator spent ≈ 40% more CPU per create on
#: asyncio's), or ``BENCH_EMULATOR_LOOP=asyncio``.
LOOP = os.environ.get("BENCH_EMULATOR_LOOP", "uvloop")
WARMUP_S, MEASURE_S, ROUNDS = (1.0, 6.0, 3) if FULL else (0.5, 2.0, 2)


def owners() -> list[str]:
    return [f"o{i:02d}" for i in range(OWNERS)]


def scenario() -> dict[str, Any]:
    """20 owners, each with an open booking of ``GPUS_PER_BOOKING`` a100 GPUs."""
    names = owners()
    app = one_class_app(names, GROUP, OWNERS * GPUS_PER_BOOKING, GPUS_PER_BOOKING)
    app["bookings"] = [
        {
            "username": name,
            "group": GROUP,
            "gpu_class": GPU_CLASS,
            "gpu_count": GPUS_PER_BOOKING,
            "start": "+0s",
            "end": "+2h",
        }
        for name in names
    ]
    return {"namespaces": [*names, vocab.PRODUCT_NAME], "nodes": [], "app": app}


def system_context(state: Path) -> SandboxContext:
    """The system arm's sandbox: the scenario, the chart's release with the sandbox's
    values, and the cluster emulation confined to the release's namespace (its pods
    run; the benchmark's stay Pending, as in the alone arm, which has no scheduler)."""
    ctx = SandboxContext(state_dir=state, scenario=scenario())
    ctx.handles[SCOPE] = ctx.namespace
    return ctx


def tokens(server: KubeServer) -> dict[str, str]:
    """Each owner's token, with ``edit`` in their namespace (as ``sandbox up`` grants)."""
    for owner in owners():
        grant_edit(server, owner)
    return {owner: server.mint_token(owner) for owner in owners()}


def admin(server: KubeServer) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    return httpx.AsyncClient(base_url=server.url, headers=headers, trust_env=False)


async def wait_admitting(server: KubeServer) -> float:
    """Seconds until a probe pod is admitted at creation (then deleted)."""
    started = time.monotonic()
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "probe-", "labels": {vocab.GPU_CLASS_LABEL: GPU_CLASS}},
        "spec": {
            "containers": [
                {"name": "m", "image": "x", "resources": {"limits": {vocab.GPU_RESOURCE: "1"}}}
            ]
        },
    }
    async with admin(server) as client:
        while time.monotonic() - started < READY_GIVE_UP_S:
            answer = await client.post(f"/api/v1/namespaces/{owners()[0]}/pods", json=probe)
            answer.raise_for_status()
            if vocab.BOOKING_REFERENCE in (answer.json()["metadata"].get("annotations") or {}):
                await clean(server)
                return time.monotonic() - started
            await asyncio.sleep(0.5)
    raise RuntimeError(f"no pod admitted within {READY_GIVE_UP_S:.0f} s")


async def clean(server: KubeServer) -> None:
    """Delete every owner's pods (a collection delete per namespace)."""
    async with admin(server) as client:
        for owner in owners():
            (await client.delete(f"/api/v1/namespaces/{owner}/pods")).raise_for_status()


async def quiet(server: KubeServer) -> float:
    """Seconds until ``server``'s store saw no write for ``QUIET_S``."""
    started = time.monotonic()
    last, since = server.store.resource_version, time.monotonic()
    while time.monotonic() - started < QUIET_GIVE_UP_S:
        await asyncio.sleep(0.05)
        now = server.store.resource_version
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= QUIET_S:
            break
    return time.monotonic() - started


def dispatch_times(server: KubeServer) -> DispatchTimes:
    """A copy of the webhook dispatch's time counters of ``server``."""
    for plugin in server.mutating_admission:
        if isinstance(plugin, WebhookDispatcher):
            return dataclasses.replace(plugin.times)
    return DispatchTimes()


@dataclasses.dataclass
class Cpu:
    """CPU seconds a cell cost, by part, and the pods it created (warm-up included):
    ``loop`` is this process's event loop (the emulator of the arm; for the system arm
    the cluster emulation and the app emulator too), ``webhook`` and ``reconciler`` the
    release's processes (system arm only), counted until the load ends."""

    pods: int = 0
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)


def cpu_now(pids: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds so far: this process's loop thread and each part's processes."""
    found = {"loop": thread_cpu_s(os.getpid()).get("main", 0.0)}
    for part, ids in pids.items():
        found[part] = 0.0
        for pid in ids:
            with contextlib.suppress(OSError):  # a process that ended: not counted
                found[part] += cpu_s(pid)
    return found


async def cell(
    server: KubeServer,
    system: KubeServer,
    owner_tokens: dict[str, str],
    c: int,
    tag: str,
    pids: dict[str, list[int]],
) -> tuple[CreateOutcome, DispatchTimes, Cpu, float]:
    """One cell: the load, then its pods deleted and the system quiet again; with the
    dispatch's time spent during the load (warm-up included), the CPU it cost and the
    share of the vCPUs' time the host took meanwhile (``steal_share``)."""
    load = CreateLoad(server.secure_port, owner_tokens, GPU_CLASS, c, WARMUP_S, MEASURE_S, tag)
    before, cpu_before, host_before = dispatch_times(server), cpu_now(pids), host_times()
    outcome = await asyncio.to_thread(run_creates, load)
    after, cpu_after, host_after = dispatch_times(server), cpu_now(pids), host_times()
    pods = sum(len(server.store.peek_list("", "pods", owner)) for owner in owners())
    await clean(server)
    await quiet(system)
    spent = DispatchTimes(
        after.requests - before.requests,
        after.matching_s - before.matching_s,
        after.calls - before.calls,
        after.calls_s - before.calls_s,
    )
    cpu = Cpu(pods, {k: cpu_after[k] - cpu_before[k] for k in cpu_after})
    return outcome, spent, cpu, steal_share(host_before, host_after)


def figures(
    outcomes: list[CreateOutcome], spent: list[DispatchTimes], cpu: list[Cpu] | None = None
) -> dict[str, Any]:
    """p50/p99 (ms) of all rounds together, per-round p50s, rate, admitted share, the
    dispatch's mean time per request (ms): deciding (matchConditions) and calling, and
    the CPU per pod created (ms) of each part."""
    requests = sum(t.requests for t in spent)
    pods = sum(c.pods for c in cpu or [])
    parts = sorted({part for c in cpu or [] for part in c.seconds})
    cpu_ms = {p: sum(c.seconds.get(p, 0.0) for c in cpu or []) * 1e3 / pods for p in parts}
    merged = CreateOutcome()
    for outcome in outcomes:
        merged.merge({**outcome.__dict__, "statuses": dict(outcome.statuses)})
    got = sorted(merged.latencies)
    created = merged.statuses.get(201, 0)
    return {
        "n": len(got),
        "p50_ms": rank(got, 0.5) * 1e3 if got else float("nan"),
        "p99_ms": rank(got, 0.99) * 1e3 if got else float("nan"),
        "round_p50_ms": [rank(sorted(o.latencies), 0.5) * 1e3 for o in outcomes if o.latencies],
        "per_s": len(got) / (MEASURE_S * len(outcomes)),
        "created": created,
        "admitted_share": merged.admitted / created if created else float("nan"),
        "statuses": dict(merged.statuses),
        "errors": merged.errors,
        "matching_ms": sum(t.matching_s for t in spent) * 1e3 / requests if requests else 0.0,
        "calls_ms": sum(t.calls_s for t in spent) * 1e3 / requests if requests else 0.0,
        "calls_per_request": sum(t.calls for t in spent) / requests if requests else 0.0,
        "cpu_ms_per_pod": cpu_ms if pods else {},
    }


async def measure(state: Path) -> dict[str, Any]:
    load_before = os.getloadavg()
    ctx = system_context(state)
    box = Sandbox(ctx, COMPONENTS)
    bare = KubeServer()
    await box.start()
    try:
        system: KubeServer = ctx.handles["kube"]
        install_admission(bare)
        await seed(bare.cluster, {"namespaces": owners()})
        await bare.start()
        ready_s = await wait_admitting(system)
        await quiet(system)
        settle_collector()  # this process serves both emulators from here on
        arms = {"system": (system, tokens(system)), "alone": (bare, tokens(bare))}
        release = ctx.handles["release"]
        pids: dict[str, dict[str, list[int]]] = {"system": {}, "alone": {}}
        for part in PARTS:
            pids["system"][part] = [r.pid for r in await release.replicas(part)]
        cells: dict[str, Any] = {}
        for c in CONCURRENCY:
            seen: dict[str, list[tuple[CreateOutcome, DispatchTimes, Cpu, float]]] = {
                "system": [],
                "alone": [],
            }
            for index in range(ROUNDS):
                order = ("system", "alone") if index % 2 == 0 else ("alone", "system")
                for arm in order:
                    server, owner_tokens = arms[arm]
                    tag = f"{c}{arm[0]}{index}"
                    seen[arm].append(await cell(server, system, owner_tokens, c, tag, pids[arm]))
            cells[str(c)] = {
                arm: figures([f[0] for f in found], [f[1] for f in found], [f[2] for f in found])
                | {"steal_shares": [f[3] for f in found]}
                for arm, found in seen.items()
            }
            cells[str(c)]["stress"] = c in STRESS
    finally:
        await bare.stop()
        await box.stop()
    return {
        "mode": "full" if FULL else "quick",
        "loop": LOOP,
        "warmup_s": WARMUP_S,
        "measure_s": MEASURE_S,
        "rounds": ROUNDS,
        "ready_s": ready_s,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "cells": cells,
    }


def ms(value: float, signed: bool = False) -> str:
    """A figure in ms; "none in time" when no create was answered within its cell."""
    if value != value:  # NaN
        return "none in time"
    return f"{value:+.2f} ms" if signed else f"{value:.2f} ms"


def lines(found: dict[str, Any]) -> list[str]:
    out = [
        f"{found['mode']}: {found['rounds']} rounds of {found['measure_s']:.0f} s per arm and c "
        f"(system, alone alternating); load average {found['loadavg_before'][0]:.2f} → "
        f"{found['loadavg_after'][0]:.2f}"
    ]
    for c, arms in found["cells"].items():
        system, alone = arms["system"], arms["alone"]
        stress = ", stress" if arms["stress"] else ""
        out.append(
            f"c = {c}{stress}: system p50 {ms(system['p50_ms'])} p99 {ms(system['p99_ms'])} "
            f"({system['per_s']:.0f}/s); alone p50 {ms(alone['p50_ms'])} "
            f"p99 {ms(alone['p99_ms'])} ({alone['per_s']:.0f}/s); added p50 "
            f"{ms(system['p50_ms'] - alone['p50_ms'], True)}, p99 "
            f"{ms(system['p99_ms'] - alone['p99_ms'], True)}; admitted at creation "
            f"{system['admitted_share']:.1%} of {system['created']}"
        )
        rounds = ", ".join(
            f"{arm} " + "/".join(f"{v:.2f}" for v in arms[arm]["round_p50_ms"])
            for arm in ("system", "alone")
        )
        odd = {
            arm: {k: v for k, v in arms[arm]["statuses"].items() if k != 201}
            for arm in ("system", "alone")
        }
        errors = sum(arms[arm]["errors"] for arm in ("system", "alone"))
        out.append(f"   p50 per round (ms): {rounds}; non-201 {odd}; errors {errors}")
        steal = ", ".join(
            f"{arm} " + "/".join(f"{v:.1%}" for v in arms[arm]["steal_shares"])
            for arm in ("system", "alone")
        )
        out.append(f"   host steal per round (the vCPUs' time the host took): {steal}")
        out.append(
            f"   system's dispatch per create: deciding (matchConditions, the emulator's CEL "
            f"interpreter) {system['matching_ms']:.2f} ms, webhook calls "
            f"{system['calls_ms']:.2f} ms ({system['calls_per_request']:.2f} per create); "
            f"added p50 less the deciding: "
            f"{ms(system['p50_ms'] - alone['p50_ms'] - system['matching_ms'], True)}"
        )
        out.append(
            "   CPU per pod created (ms): "
            + "; ".join(
                f"{arm} "
                + ", ".join(f"{k} {v:.2f}" for k, v in arms[arm]["cpu_ms_per_pod"].items())
                for arm in ("system", "alone")
            )
        )
    return out


def run() -> list[str]:
    """Both arms on ``LOOP`` (the policy restored afterwards for the next benchmark)."""
    previous = asyncio.get_event_loop_policy()
    if LOOP == "uvloop":
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        return lines(measured("create", measure))
    finally:
        asyncio.set_event_loop_policy(previous)
