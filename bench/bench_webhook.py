"""Webhook benchmark: the real webhook process against a baseline, in the same run.

In-process figures first (the pure decision; ``Admission.review`` on an in-memory
store), then end to end, as a user's pod creation meets it:

- the sandbox's kube emulator in this process; **one real webhook replica** (``python
  -m webhook``, the chart's RBAC and certificates, ``sandbox.webhook_component``)
  claiming on it over HTTPS;
- the **baseline** (``bench.baseline``): the same server construction doing only the
  parse, copy, patch diff and answer every mutating webhook must do;
- the **load** (``bench.loadgen``) in separate processes over keep-alive TLS, closed
  loop, ``c`` = 1, 10, 50 connections; the measured server pinned to one core, the load
  and the emulator to the other (where the machine has two);
- for each ``c``: the baseline, then the webhook's paths — **claim** (a GPU pod of an
  owner whose booking is open with room: a ledger claim per pod), **named** (the same
  pod with a name of its own), **no match** (a GPU pod
  of a namespace without bookings), **non-GPU** (a plain pod); every pod but the named
  one comes as a controller's do (``generateName``); each figure beside the baseline's
  as a ratio. The claim booking has 256 GPUs, and while each
  cell a stand-in for the reconciler's upkeep, a process of its own
  (``bench.standin``), passes over it back to back (``ledger.amend``, as
  ``reconciler.base.upkeep`` does while pods stream in): the claim load processes feed it
  the claim id of every admitted answer (a UNIX datagram socket), and each pass binds
  the holds fed — those a pod now carries — and drops all but the newest 32 bound
  ones (the older pods finished), keeping holds never fed until the claim TTL, so the
  ledger stays within the booking and its writes are the reconciler's real contention;
- a **burst**: 50 connections each sending one create at once for a booking of exactly
  50 GPUs; every one must be admitted at creation (fail-opens counted from the
  webhook's own ``fail_open_total``).

``BENCH_MODE=full`` (``make bench-full``) measures 10 s per cell after 2 s of warm-up
instead of 2 s after 0.5 s. Results go to ``$BENCH_OUT/webhook.json`` (default
``.bench/``) as well as the table printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import uvloop

from bench import baseline, loadgen
from bench.loadgen import Load, Outcome, Target
from bench.procstat import rss_mib, thread_cpu_s
from sandbox.kube.server import KubeServer, settle_collector
from sandbox.kube.timing import RequestTimes, summary
from sandbox.ports import free_port
from sandbox.reconciler_component import ROOT
from sandbox.runner import Sandbox, SandboxContext
from sandbox.webhook_component import WebhookComponent
from shared import ledger, logs, model, vocab
from shared.clock import ManualClock, SystemClock
from shared.errors import Conflict
from shared.gateway import Gateway, ListResult
from shared.policy.matching import MatchRules
from shared.resources import GPU_RESERVATIONS
from webhook.app import mutate_app
from webhook.cache import ReservationCache
from webhook.decide import Context, decide_create
from webhook.handler import ADMISSION_LINE, Admission
from webhook.metrics import Metrics
from webhook.settings import STRIP, PolicySettings

NOW = datetime(2026, 1, 5, 10, tzinfo=UTC)
NS = vocab.PRODUCT_NAME
POLICY = PolicySettings(
    rules=MatchRules(),
    gate_name=None,
    toleration_policy=STRIP,
    controller_accounts=frozenset(),
    namespace=NS,
)
LEVELS = (1, 10, 50)
PATHS = ("baseline", "claim", "named", "nomatch", "nongpu")
#: GPUs of the claim booking: a large booking (32 nodes of 8 GPUs), with room for every
#: claim the cell makes while the stand-in binds and ends pods (with 128, about 4,000
#: admissions a second filled it and answers turned into cheaper *queued* ones, which
#: measure the decision, not the claim). Its ledger can never hold more than this.
CLAIM_GPUS = 256
BURST = 50


@dataclass(frozen=True)
class Mode:
    name: str
    warmup_s: float
    measure_s: float


MODES = {"short": Mode("short", 0.5, 2.0), "full": Mode("full", 2.0, 10.0)}


def mode() -> Mode:
    return MODES.get(os.environ.get("BENCH_MODE", "short"), MODES["short"])


# --- in-process figures ----------------------------------------------------------------


class MemoryStore:
    """GET / PUT-status / JSON-Patch-status with resourceVersion checks, LIST for the
    cache."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.rv = 1

    async def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        return json.loads(json.dumps(self.objects[name]))  # type: ignore[no-any-return]

    async def replace(
        self,
        res: Any,
        name: str,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        current = self.objects[name]
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "modified", "Conflict")
        self.rv += 1
        meta = {**current["metadata"], "resourceVersion": str(self.rv)}
        self.objects[name] = {**current, "status": body["status"], "metadata": meta}
        return await self.get(res, name)

    async def patch(
        self,
        res: Any,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: str = "json",
        subresource: str | None = None,
        read_answer: bool = True,
    ) -> dict[str, Any]:
        patched = jsonpatch.apply_patch(self.objects[name], patch)
        return await self.replace(res, name, patched, namespace, subresource)

    async def list_all(self, res: Any, namespace: Any = None, **_: Any) -> ListResult:
        return ListResult(list(self.objects.values()), str(self.rv))


def reservations(gpus: int, owner: str = "alice", count: int = 20) -> list[model.GPUReservation]:
    found = []
    for i in range(count):
        start = NOW + timedelta(hours=i - 1)
        facts = model.ReservationFacts(
            id=i + 1,
            owner=owner,
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


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, int(len(ordered) * q + 0.5) - 1)] if ordered else float("nan")


def bench_decide(n: int = 5000) -> dict[str, float]:
    pool, ctx = reservations(10**6), Context(policy=POLICY, now=NOW)
    pod = loadgen.pod("claim", "alice")
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        decide_create(pod, "alice", pool, ctx)
        samples.append(time.perf_counter() - t0)
    return {"p50_us": percentile(samples, 0.5) * 1e6, "p99_us": percentile(samples, 0.99) * 1e6}


#: The in-process claims' instant: the first booking of ``reservations`` is open.
CLAIM_NOW = NOW - timedelta(minutes=30)


async def claim_admission(count: int = 1) -> Admission:
    """A webhook on a memory store whose first booking (of ``count``, alice's, open
    now) has room for every claim."""
    store = MemoryStore(
        [model.to_object(r, NS, CLAIM_NOW) for r in reservations(10**6, count=count)]
    )
    cache = ReservationCache(store, NS, ManualClock(CLAIM_NOW))  # type: ignore[arg-type]
    await cache.relist()
    clock = ManualClock(CLAIM_NOW)
    return Admission(POLICY, cache, store, clock, Metrics(), ledger_deadline_s=5)


def bench_review(n: int = 3000) -> dict[str, float]:
    """``Admission.review`` of a claim that is admitted, its write answered at once
    (``_Written``): the request's own work on the claim path."""

    async def run() -> list[float]:
        adm = await claim_admission(count=20)
        adm.engine = _Written(adm)  # type: ignore[assignment]
        body = loadgen.template("claim", "alice")
        samples = []
        for i in range(n):
            data = body.replace(b"@NAME@", f"p-{i}".encode()).replace(b"@UID@", b"u")
            t0 = time.perf_counter()
            _, doc = await adm.review(data)
            samples.append(time.perf_counter() - t0)
            assert "patch" in doc["response"], doc  # admitted, not queued
        return samples

    samples = asyncio.run(run())
    return {"p50_us": percentile(samples, 0.5) * 1e6, "p99_us": percentile(samples, 0.99) * 1e6}


class _Written:
    """A group commit whose every claim is written at once (admitted under the
    booking as cached): the request's own work without the ledger write."""

    def __init__(self, adm: Admission) -> None:
        self.adm = adm

    async def claim(self, name: str, ask: ledger.Ask, deadline: float) -> ledger.ClaimResult:
        entry = self.adm.cache.entry(name)
        assert entry is not None
        return ledger.ClaimResult(
            admitted=True,
            claim=str(uuid.uuid4()),
            reservation=entry.reservation,
            reason=ledger.Reason.ADMITTED,
        )


def _http_scope(length: int) -> dict[str, Any]:
    """The scope uvicorn hands an app for ``POST /mutate``."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8443),
        "client": ("127.0.0.1", 50000),
        "scheme": "https",
        "method": "POST",
        "root_path": "",
        "path": "/mutate",
        "raw_path": b"/mutate",
        "query_string": b"",
        "headers": [
            (b"host", b"webhook"),
            (b"content-type", b"application/json"),
            (b"content-length", str(length).encode()),
        ],
        "state": {},
    }


async def _asgi_cpu_us(app: Any, bodies: list[bytes], rounds: int) -> float:
    """The least CPU (µs) per request over ``rounds`` passes of ``bodies`` through
    ``app`` called as uvicorn calls it (the server's own work is not in it)."""
    statuses: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for body in bodies:
            message = {"type": "http.request", "body": body, "more_body": False}

            async def receive(message: dict[str, Any] = message) -> dict[str, Any]:
                return message

            await app(_http_scope(len(body)), receive, send)
        best = min(best, (time.process_time() - started) / len(bodies))
    assert set(statuses) == {200}, set(statuses)
    return best * 1e6


def bench_asgi(n: int = 2000, rounds: int = 5) -> dict[str, float]:
    """CPU per request (µs, best of ``rounds``) of each path's ASGI app in-process,
    beside the baseline's app: the webhook's work above the server (the stack's
    layers, the review, its answer and log line) without the ledger write — a claim's
    write is answered at once (``_Written``)."""

    async def run() -> dict[str, float]:
        adm = await claim_admission()
        adm.engine = _Written(adm)  # type: ignore[assignment]
        apps = {"baseline": baseline.app(), "webhook": mutate_app(adm, 1 << 20)}
        found = {}
        for path in PATHS:
            kind = "claim" if path == "baseline" else path
            template = loadgen.template(kind, "alice")
            bodies = [
                template.replace(b"@NAME@", f"p-{i}".encode()).replace(b"@UID@", f"u-{i}".encode())
                for i in range(n)
            ]
            app = apps["baseline" if path == "baseline" else "webhook"]
            await _asgi_cpu_us(app, bodies[:200], 1)  # warm the memos
            found[path] = await _asgi_cpu_us(app, bodies, rounds)
        return found

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    with open(os.devnull, "w", encoding="utf-8") as sink:
        # the webhook process's own log handler (``logs.configure``), writing nowhere
        handler = logs.BufferedHandler(sink, frozenset({ADMISSION_LINE}))
        handler.setFormatter(logs.JsonFormatter())
        root.handlers[:] = [handler]
        root.setLevel(logging.INFO)
        try:
            return asyncio.run(run())
        finally:
            handler.close()
            root.handlers[:], level = saved
            root.setLevel(level)


# --- end to end -------------------------------------------------------------------------


def scenario() -> dict[str, Any]:
    return {"namespaces": ["alice", "nobody", "burst", NS], "nodes": []}


def booking(rid: int, owner: str, gpus: int) -> dict[str, Any]:
    now = SystemClock().now()
    facts = model.ReservationFacts(
        id=rid,
        owner=owner,
        gpu_class="h100",
        gpu_class_name="H100",
        gpu_count=gpus,
        kind=model.Kind.BOOKING,
        start=now - timedelta(hours=1),
        end=now + timedelta(days=1),
        state=model.State.ACTIVE,
        updated_at=now,
    )
    body = model.to_object(model.GPUReservation(facts), NS, now)
    body["metadata"].pop("resourceVersion", None)
    return body


class Upkeep:
    """The stand-in for the reconciler's upkeep (``bench.standin``) in its own process,
    on the load's cores, for one cell."""

    def __init__(self, kubeconfig: Path, name: str, feed: Path) -> None:
        cmd = [sys.executable, "-m", "bench.standin", str(kubeconfig), NS, name, str(feed)]
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, text=True
        )
        loadgen.pin(self._proc.pid, server=False)
        assert self._proc.stdout is not None
        if self._proc.stdout.readline().strip() != "ready":
            self._proc.kill()
            raise RuntimeError("the upkeep stand-in did not start")

    def stop(self) -> int:
        """End its passes; the ledger writes it made."""
        out, _ = self._proc.communicate(timeout=30)
        return int(out.strip() or 0)


def counted(health_url: str, *samples: str) -> list[float]:
    """The webhook's own samples ``gpu_reservation_webhook_<sample>`` (e.g.
    ``requests_total``), each summed over its labels."""
    text = httpx.get(f"{health_url}/metrics", timeout=5).text
    found = []
    for sample in samples:
        name = f"gpu_reservation_webhook_{sample}"
        found.append(
            sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith((name + "{", name + " "))
            )
        )
    return found


#: What a cell reads from the webhook before and after: answers, fail-opens, and the
#: group commits (how many, how many claims they carried).
CELL_SAMPLES = (
    "requests_total",
    "fail_open_total",
    "claim_group_size_count",
    "claim_group_size_sum",
    "ledger_conflicts_total",
    'requests_total{outcome="queued"}',
)


def fail_opens(health_url: str) -> int:
    return int(counted(health_url, "fail_open_total")[0])


def wanted_cells() -> set[tuple[str, int]] | None:
    """``BENCH_CELLS`` (e.g. ``baseline@10,claim@10``): only those cells; None: all."""
    spec = os.environ.get("BENCH_CELLS", "").strip()
    if not spec:
        return None
    cells = set()
    for item in spec.split(","):
        path, _, c = item.strip().partition("@")
        cells.add((path, int(c)))
    return cells


def cpu_per_request(
    before: dict[str, float], after: dict[str, float], requests: int
) -> dict[str, float]:
    """Milliseconds of the server's CPU per request it answered over a cell (warm-up
    included on both sides), by thread and in total (``bench.procstat.thread_cpu_s``
    readings)."""
    if requests <= 0:
        return {}
    per = {
        name: (after[name] - before.get(name, 0.0)) * 1e3 / requests
        for name in sorted(after)
        if after[name] > before.get(name, 0.0)
    }
    per["total"] = sum(per.values())
    return per


def emulator(cpu_s: float, answers: RequestTimes) -> dict[str, Any]:
    """The kube emulator's side of a cell: its thread's CPU per ledger write (every
    PATCH and PUT it answered: the webhook's group commits, the upkeep
    stand-in's writes; the reads and watch events around them included) and its own
    answer times by method (``sandbox.kube.timing``)."""
    writes = sum(len(answers.by_method.get(method, ())) for method in ("PATCH", "PUT"))
    return {
        "cpu_s": cpu_s,
        "writes": writes,
        "cpu_ms_per_write": cpu_s * 1e3 / writes if writes else None,
        "answer": {method: summary(found) for method, found in answers.by_method.items()},
    }


def cell(c: int, path: str, out: Outcome, fails: int | None) -> dict[str, Any]:
    lat = out.latencies
    return {
        "concurrency": c,
        "path": path,
        "requests": len(lat),
        "rps": len(lat) / out.seconds if out.seconds else 0.0,
        "p50_ms": percentile(lat, 0.5) * 1e3,
        "p99_ms": percentile(lat, 0.99) * 1e3,
        "mean_ms": statistics.fmean(lat) * 1e3 if lat else float("nan"),
        "statuses": dict(out.statuses),
        "patched": out.patched,
        "admitted": out.admitted,
        "errors": out.errors,
        "fail_opens": fails,
        "load_cpu_us_per_answer": out.cpu_us_per_answer,
        "unfed": out.unfed,
    }


async def start_baseline(cert: Path, key: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(  # noqa: ASYNC220 - started once, returns at once
        [sys.executable, "-m", "bench.baseline", str(port), str(cert), str(key)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return proc, port
        await asyncio.sleep(0.05)
    proc.kill()
    raise RuntimeError("the baseline server did not start")


async def end_to_end(state: Path, run: Mode) -> dict[str, Any]:
    ctx = SandboxContext(state_dir=state, scenario=scenario())
    ctx.handles["webhook.replicas"] = 1
    box = Sandbox(ctx, ["kube", "webhook"])
    await box.start()
    baseline: subprocess.Popen[bytes] | None = None
    gateway = Gateway.from_kubeconfig(str(state / "kubeconfig"))
    # the stand-in binds it, the claim loads send to it (a short path: AF_UNIX's limit)
    feeds = Path(tempfile.mkdtemp(prefix="bench-feed-"))
    feed = feeds / "upkeep.sock"
    try:
        component: WebhookComponent = ctx.handles["webhook"]
        replica = component.replicas[0]
        assert replica.proc is not None
        assert component.mount is not None
        pid = replica.proc.pid
        kube: KubeServer = ctx.handles["kube"]
        answers = kube.time_requests()
        loadgen.pin(pid, server=True)
        loadgen.pin(os.getpid(), server=False)
        baseline, baseline_port = await start_baseline(
            component.mount.cert_file, component.mount.key_file
        )
        loadgen.pin(baseline.pid, server=True)
        for body in (booking(1, "alice", CLAIM_GPUS), booking(2, "burst", BURST)):
            await gateway.create(GPU_RESERVATIONS, body, NS)
        await asyncio.sleep(1.0)  # the replica's watch delivers them
        settle_collector()  # this process serves the emulator from here on
        webhook = Target("127.0.0.1", replica.port)
        rss_start = rss_mib(pid)
        cells = []
        only = wanted_cells()
        for c in LEVELS:
            for path in PATHS:
                if only is not None and (path, c) not in only:
                    continue
                target = Target("127.0.0.1", baseline_port) if path == "baseline" else webhook
                server_pid = baseline.pid if path == "baseline" else pid
                kind = "claim" if path == "baseline" else path
                fed = str(feed) if path in ("claim", "named") else None
                load = Load(kind, c, run.warmup_s, run.measure_s, feed=fed)
                before = counted(replica.health_url, *CELL_SAMPLES)
                trimmer = await asyncio.to_thread(Upkeep, state / "kubeconfig", "res-1", feed)
                cpu = thread_cpu_s(server_pid)
                emulator_cpu = thread_cpu_s(os.getpid())["main"]
                answers.clear()
                out = await asyncio.to_thread(loadgen.run_load, target, load)
                emulator_cpu = thread_cpu_s(os.getpid())["main"] - emulator_cpu
                cpu_after = thread_cpu_s(server_pid)
                upkeep_writes = await asyncio.to_thread(trimmer.stop)
                after = counted(replica.health_url, *CELL_SAMPLES)
                answered, fails, groups, grouped, conflicts, queued = (
                    int(a - b) for a, b in zip(after, before, strict=True)
                )
                cells.append(cell(c, path, out, None if path == "baseline" else fails))
                cells[-1]["webhook_rss_mib"] = rss_mib(pid) if path != "baseline" else None
                if path == "baseline":  # no counter of its own: scale the measured count
                    answered = round(len(out.latencies) * (1 + run.warmup_s / run.measure_s))
                cells[-1]["cpu_ms_per_request"] = cpu_per_request(cpu, cpu_after, answered)
                cells[-1]["claim_groups"] = {"groups": groups, "claims": grouped}
                cells[-1]["ledger_conflicts"] = conflicts
                cells[-1]["queued"] = queued
                cells[-1]["upkeep_writes"] = upkeep_writes
                cells[-1]["emulator"] = emulator(emulator_cpu, answers)
        fails_before = fail_opens(replica.health_url)
        # fed too (the stand-in's input with every claim load), though no stand-in
        # keeps the burst's booking: its ids are counted unfed
        burst_load = Load("claim", BURST, 0, 0, per_connection=1, owner="burst", feed=str(feed))
        out = await asyncio.to_thread(loadgen.run_load, webhook, burst_load)
        burst = cell(BURST, "burst", out, fail_opens(replica.health_url) - fails_before)
        held = model.from_object(await gateway.get(GPU_RESERVATIONS, "res-2", NS))
        burst["held_gpus"] = ledger.used(held)
        return {
            "cells": cells,
            "burst": burst,
            "webhook_rss_mib": {"start": rss_start, "end": rss_mib(pid)},
        }
    finally:
        gateway.close()
        shutil.rmtree(feeds, ignore_errors=True)
        if baseline is not None:
            baseline.terminate()
            baseline.wait(10)
        await box.stop()


# --- report ------------------------------------------------------------------------------


def ratios(cells: list[dict[str, Any]]) -> None:
    """Each cell's requests/s as a share of the same ``c``'s baseline."""
    base = {c["concurrency"]: c for c in cells if c["path"] == "baseline"}
    for c in cells:
        ref = base.get(c["concurrency"])
        c["ratio"] = c["rps"] / ref["rps"] if ref and ref["rps"] else float("nan")


def table(found: dict[str, Any]) -> list[str]:
    rows = [
        "| c | path | req/s | vs baseline | p50 ms | p99 ms | patched | admitted | fail-opens |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in found["cells"]:
        fails = "–" if c["fail_opens"] is None else str(c["fail_opens"])
        rows.append(
            f"| {c['concurrency']} | {c['path']} | {c['rps']:.0f} | {c['ratio'] * 100:.0f}% "
            f"| {c['p50_ms']:.1f} | {c['p99_ms']:.1f} | {c['patched']} | {c['admitted']} "
            f"| {fails} |"
        )
    for c in found["cells"]:
        if cpu := c.get("cpu_ms_per_request"):
            parts = ", ".join(f"{k} {v:.3f}" for k, v in cpu.items() if k != "total")
            groups = c["claim_groups"]
            mean = (
                f"; {groups['claims'] / groups['groups']:.1f} claims per group commit, "
                f"{c['ledger_conflicts']} 409s, {c['upkeep_writes']} upkeep writes "
                f"({c['unfed']} admissions unfed), {c['queued']} queued"
                if groups["groups"]
                else ""
            )
            rows.append(
                f"server CPU per request, c={c['concurrency']} {c['path']}: "
                f"{cpu['total']:.3f} ms ({parts}){mean}; the load processes' CPU "
                f"{c['load_cpu_us_per_answer']:.0f} µs per answer"
            )
    for c in found["cells"]:
        emu = c.get("emulator")
        if not emu or not emu["writes"]:
            continue
        times = "; ".join(
            f"{method} {t['count']} in {t['mean_ms']:.2f} ms mean, p50 {t['p50_ms']:.2f}, "
            f"p99 {t['p99_ms']:.2f}"
            for method, t in sorted(emu["answer"].items())
            if t["count"]
        )
        rows.append(
            f"emulator, c={c['concurrency']} {c['path']}: {emu['cpu_ms_per_write']:.3f} ms "
            f"of its thread's CPU per ledger write ({emu['writes']} writes, "
            f"{emu['cpu_s']:.2f} s); answers {times}"
        )
    b = found["burst"]
    rows.append(
        f"burst: {BURST} concurrent creates on one booking of {BURST} GPUs: {b['admitted']} "
        f"admitted at creation, {b['fail_opens']} fail-opens, {b['held_gpus']} GPUs held, "
        f"p99 {b['p99_ms']:.0f} ms"
    )
    rss = found["webhook_rss_mib"]
    rows.append(
        f"webhook RSS: {rss['start']:.0f} MiB at start, {rss['end']:.0f} MiB after the load"
    )
    return rows


def conditions() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "placement": loadgen.describe_placement(),
        "load_average_before": os.getloadavg(),
        "python": sys.version.split()[0],
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def write_json(name: str, found: dict[str, Any]) -> Path:
    folder = Path(os.environ.get("BENCH_OUT", ROOT / ".bench"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(found, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def emulator_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop the benchmark's process (so the kube emulator) runs on:
    asyncio's, as in ``make sandbox`` and the tests; ``BENCH_EMULATOR_LOOP=uvloop``
    to compare (docs/developer/performance.md: no CPU saved per write, and reordered writes)."""
    if os.environ.get("BENCH_EMULATOR_LOOP", "asyncio") == "uvloop":
        return uvloop.new_event_loop
    return None


def run() -> list[str]:
    run_mode = mode()
    found: dict[str, Any] = {"mode": run_mode.name, "conditions": conditions()}
    loadgen.placement()  # read the cores before anything is pinned
    found["decide_create"] = bench_decide()
    found["review_in_process"] = bench_review()
    found["asgi_in_process"] = bench_asgi()
    state = Path(tempfile.mkdtemp(prefix="bench-webhook-"))
    try:
        with asyncio.Runner(loop_factory=emulator_loop()) as runner:
            found.update(runner.run(end_to_end(state, run_mode)))
    finally:
        shutil.rmtree(state, ignore_errors=True)
    found["conditions"]["load_average_after"] = os.getloadavg()
    ratios(found["cells"])
    path = write_json("webhook", found)
    d, r = found["decide_create"], found["review_in_process"]
    lines = [
        f"mode {run_mode.name} ({run_mode.measure_s:g} s per cell after {run_mode.warmup_s:g} s "
        f"warm-up); {found['conditions']['placement']}; load average before "
        f"{found['conditions']['load_average_before'][0]:.1f}, after "
        f"{found['conditions']['load_average_after'][0]:.1f}",
        f"decide_create (pure, 20 bookings): p50 {d['p50_us']:.0f} µs, p99 {d['p99_us']:.0f} µs",
        f"Admission.review in-process, an admitted claim (its write answered at once): "
        f"p50 {r['p50_us']:.0f} µs, p99 {r['p99_us']:.0f} µs",
        "ASGI apps in-process, CPU per request (a claim's write answered at once): "
        + ", ".join(f"{k} {v:.1f} µs" for k, v in found["asgi_in_process"].items()),
    ]
    return [*lines, *table(found), f"JSON: {path}"]


if __name__ == "__main__":
    print("\n".join(run()))
