"""What the webhook adds to a pod's creation, in a cluster like ours.

``python -m bench webhook``. The system as ``python -m sandbox up`` installs it — the
kube emulator and the cluster emulation (process kubelet, controllers) in this process,
the reservation app emulator, the chart's release with **three webhook replicas**
(``webhook.replicas=3``) and its reconciler, each a process the kubelet runs — reached
as a user's create reaches it: the API server calls the webhook through its Service,
balanced per round trip. Beside it, **alone**: a second kube emulator in this process
with the same namespaces, users and admission plugin and no webhook configuration.
Each cell runs on both arms, ``ROUNDS`` rounds, alternating (system first when the
cell's and the round's numbers add up even), and reports the latency the system adds
(system − alone, p50 and p99).

**The bookings**: 50 owners (namespaces ``u00``…``u49``), each with one open h100
booking from the app, sizes as GPU nodes come (``SIZES``): five of 1 GPU, five of 2,
ten of 4, fifteen of 8 (a node), fifteen of 16 (two nodes): 415 GPUs.

**The pods** ask for 1 GPU each and carry a scheduling gate of the benchmark's own
(``HELD``), in both arms, so no scheduler writes for them: creation is what is measured.

- **Job-controller bursts** (open loop): 500 pods released by a client-go-like token
  bucket at 20, 50 and 200 pods/s (burst 30, kube-controller-manager's default
  ``--kube-api-burst``), sent on a pool of ``POOL`` keep-alive connections; a pod's
  latency runs from its release. All ``generateName`` (a Job's pods), spread over the
  bookings in proportion to their size (≈ 1.2 pods per GPU: each booking gets a few
  pods more than it holds, which must be refused), in a seeded random order.
- **Users** (closed loop): 1, 10 and 50 concurrent users create 415 pods — each
  booking exactly its size, owners in turn — one after another; 1 in 5 named
  (``kubectl apply`` of a bare pod), the rest ``generateName`` (controllers').

Per cell: p50/p99 of both arms and their difference; the share of pods **admitted at
creation** out of those that had room (per booking at most its GPUs); **over-admitted
GPUs**, computed after the cell from the pods the API server holds: for every booking,
the GPUs of the pods that carry its reference beyond its ``gpuCount`` (must be 0);
and the three webhook processes' CPU (``/proc``) per request they answered. After a
system cell the pods are deleted and the benchmark waits until every ledger is empty
(the reconciler drops the holds), so no cell starts on another's holds.

**Direct cells** (AdmissionReviews sent straight to one replica by ``bench.loadgen``,
closed loop at ``c`` = 1, 10, 50): the **baseline** (``bench.baseline``: the webhook's
server construction answering every review with a trivial patch) for the CPU per
request of any webhook, and the **stress** cells — many claims on one booking, far
faster than controllers create pods: *named* and *claim* (``generateName``) pods on a
256-GPU booking kept from filling by the upkeep stand-in (``bench.standin``), and a
burst of 50 concurrent claims on a 50-GPU booking (all must be admitted).

``BENCH_MODE=full``: 3 rounds and 10 s direct cells after 2 s of warm-up, instead of
1 round and 2 s after 0.5 s. Results go to ``$BENCH_OUT/webhook.json`` (default
``.bench/``) as well as the lines printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench import loadgen
from bench.createload import Answer, PlanMaker, Planned, PlanOutcome, run_plan
from bench.loadgen import Load, Outcome, Shape, Target
from bench.procstat import cpu_s
from sandbox.cluster.ratelimit import BURST as CLIENT_BURST
from sandbox.kube.admission import WebhookDispatcher
from sandbox.kube.admission.dispatcher import DispatchTimes
from sandbox.kube.admission.install import install as install_admission
from sandbox.kube.seed import seed
from sandbox.kube.server import KubeServer
from sandbox.ports import free_port
from sandbox.release_component import ReleaseComponent, Replica
from sandbox.runner import Sandbox, SandboxContext
from sandbox.users import grant_edit
from shared import model, vocab
from shared.clock import SystemClock
from shared.gateway import Gateway
from shared.policy.gpus import Unreadable, charged_gpus
from shared.resources import GPU_RESERVATIONS, PODS

ROOT = Path(__file__).resolve().parent.parent
NS = vocab.PRODUCT_NAME
GPU_CLASS = "h100"
GROUP = "bench"
COMPONENTS = ["kube", "cluster", "app", "release"]
REPLICAS = 3
#: Booking sizes, one per owner: as GPU nodes come (1–16 GPUs, most one or two nodes).
SIZES = (1,) * 5 + (2,) * 5 + (4,) * 10 + (8,) * 15 + (16,) * 15
OWNERS = tuple(f"u{i:02d}" for i in range(len(SIZES)))
#: The stress cells' owners and their bookings' GPUs.
STRESS_OWNER, STRESS_GPUS = "stress", 256
BURST_OWNER, BURST_GPUS = "burst", 50
#: Pods of a Job-controller burst, its rates (pods/s), the pool of connections.
BURST_PODS = 500
RATES = (20.0, 50.0, 200.0)
POOL = 32
USERS = (1, 10, 50)
#: One pod in ``NAMED_EVERY`` of the users' has a name of its own.
NAMED_EVERY = 5
SEED = 29
#: A scheduling gate nobody lifts: the pods stay unscheduled in both arms.
HELD = "bench.local/held"
#: Seconds to wait for every ledger to be empty after a cell, and for a quiet store.
DRAIN_GIVE_UP_S = 150.0
QUIET_S = 0.5
QUIET_GIVE_UP_S = 10.0
READY_GIVE_UP_S = 120.0
FULL = os.environ.get("BENCH_MODE") == "full"
ROUNDS = 3 if FULL else 1
WARMUP_S, MEASURE_S = (2.0, 10.0) if FULL else (0.5, 2.0)


# --- what a cell means (pure) --------------------------------------------------------------


def users_plan(sizes: Mapping[str, int], named_every: int = NAMED_EVERY) -> list[Planned]:
    """The users' pods: each owner exactly as many 1-GPU pods as their booking holds,
    owners in turn (one pod of each, then the next round), every ``named_every``-th
    named."""
    left = dict(sizes)
    plan: list[Planned] = []
    while any(left.values()):
        for owner in sizes:
            if left[owner]:
                left[owner] -= 1
                plan.append(Planned(owner, GPU_CLASS, 1, len(plan) % named_every == 0))
    return plan


def shares(sizes: Mapping[str, int], pods: int) -> dict[str, int]:
    """``pods`` split over the owners in proportion to their bookings' sizes (largest
    remainders first, ties by owner)."""
    total = sum(sizes.values())
    exact = {owner: pods * size / total for owner, size in sizes.items()}
    found = {owner: math.floor(value) for owner, value in exact.items()}
    order = sorted(sizes, key=lambda owner: (found[owner] - exact[owner], owner))
    for owner in order[: pods - sum(found.values())]:
        found[owner] += 1
    return found


def burst_plan(sizes: Mapping[str, int], pods: int = BURST_PODS, seed: int = SEED) -> list[Planned]:
    """A Job controller's burst: ``pods`` 1-GPU ``generateName`` pods over the owners in
    proportion to their bookings (``shares``), in a seeded random order."""
    plan = [
        Planned(owner, GPU_CLASS, 1, False)
        for owner, count in shares(sizes, pods).items()
        for _ in range(count)
    ]
    random.Random(seed).shuffle(plan)
    return plan


def with_room(plan: Iterable[Planned], sizes: Mapping[str, int]) -> int:
    """How many of ``plan``'s pods (1 GPU each) their owner's booking has room for: per
    owner, at most its size. An owner without a booking has room for none."""
    asked = Counter(pod.owner for pod in plan)
    return sum(min(count, sizes.get(owner, 0)) for owner, count in asked.items())


def over_admitted(pods: Iterable[Mapping[str, Any]], capacity: Mapping[str, int]) -> dict[str, int]:
    """GPUs admitted beyond each reservation's ``gpuCount``: for every reservation named
    by a pod's ``vocab.BOOKING_REFERENCE`` annotation, the GPUs charged by its live pods
    (``charged_gpus``) minus ``capacity[name]`` where positive. A reference to a
    reservation not in ``capacity`` counts against 0; a pod being deleted or whose GPUs
    cannot be read counts as a reservation's whole request (1 GPU when unreadable) —
    never in the reservations' favour."""
    charged: Counter[str] = Counter()
    for pod in pods:
        meta = pod.get("metadata")
        notes = meta.get("annotations") if isinstance(meta, Mapping) else None
        reference = notes.get(vocab.BOOKING_REFERENCE) if isinstance(notes, Mapping) else None
        if not isinstance(reference, str):
            continue
        spec = pod.get("spec")
        try:
            gpus = charged_gpus(spec) if isinstance(spec, Mapping) else 1
        except Unreadable:
            gpus = 1
        charged[reference] += gpus
    return {
        name: gpus - capacity.get(name, 0)
        for name, gpus in sorted(charged.items())
        if gpus > capacity.get(name, 0)
    }


def rank(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; NaN without samples."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else math.nan


def latency_ms(answers: Iterable[Answer]) -> dict[str, float]:
    """p50 and p99 (ms) of the counted answers."""
    got = [a.latency for a in answers if a.counted]
    return {"n": len(got), "p50_ms": rank(got, 0.5) * 1e3, "p99_ms": rank(got, 0.99) * 1e3}


# --- the system ------------------------------------------------------------------------


def system_scenario() -> dict[str, Any]:
    """Namespaces, no nodes (the release adds its system node), the app's bookings."""
    names = [*OWNERS, STRESS_OWNER, BURST_OWNER]
    gpus = [*SIZES, STRESS_GPUS, BURST_GPUS]
    app = {
        "timezone": "UTC",
        "classes": [
            {"id": 1, "name": "H100", "label_value": GPU_CLASS, "total_gpus": 2 * sum(gpus)}
        ],
        "users": names,
        "groups": [{"name": GROUP, "members": names, "classes": [GPU_CLASS]}],
        "bookings": [
            {
                "username": name,
                "group": GROUP,
                "gpu_class": GPU_CLASS,
                "gpu_count": count,
                "start": "+0s",
                "end": "+4h",
            }
            for name, count in zip(names, gpus, strict=True)
        ],
    }
    return {"namespaces": [*names, NS], "nodes": [], "app": app}


def tokens(server: KubeServer, owners: Iterable[str]) -> dict[str, str]:
    """Each owner's token, with ``edit`` in their namespace (as ``sandbox up`` grants)."""
    found = {}
    for owner in owners:
        grant_edit(server, owner)
        found[owner] = server.mint_token(owner)
    return found


@dataclass
class System:
    """The running system: the sandbox, its kube emulator, an admin gateway, the release,
    the webhook replicas and their metrics port, the bookings by owner."""

    ctx: SandboxContext
    kube: KubeServer
    gateway: Gateway
    release: ReleaseComponent
    replicas: list[Replica]
    reconciler: Replica
    health_port: int
    bookings: dict[str, model.GPUReservation]

    def capacity(self) -> dict[str, int]:
        return {res.name: res.facts.gpu_count for res in self.bookings.values()}

    def cpu_s(self) -> float:
        return sum(cpu_s(r.pid) for r in self.replicas)

    def others_cpu_s(self) -> dict[str, float]:
        """CPU seconds of this process (the emulators and the cluster emulation) and of
        the reconciler."""
        return {"emulators": time.process_time(), "reconciler": cpu_s(self.reconciler.pid)}

    def requests(self) -> int:
        return int(self.samples()[0])

    def samples(self) -> list[float]:
        """``CELL_SAMPLES`` summed over the replicas."""
        found = [counted(self.health_url(r), *CELL_SAMPLES) for r in self.replicas]
        return [sum(column) for column in zip(*found, strict=True)]

    def health_url(self, replica: Replica) -> str:
        return f"http://{replica.ip}:{self.health_port}"


#: What a system cell reads from every replica before and after: answers, fail-opens,
#: group commits (how many, how many claims they carried), 409s met.
CELL_SAMPLES = (
    "requests_total",
    "fail_open_total",
    "claim_group_size_count",
    "claim_group_size_sum",
    "ledger_conflicts_total",
)


def counted(health_url: str, *samples: str) -> list[float]:
    """The webhook's own samples ``gpu_reservation_webhook_<sample>``, each summed over
    its labels."""
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


def dry_run(owner: str) -> bytes:
    """A dry-run AdmissionReview of an owner's GPU pod (claims nothing)."""
    review = json.loads(loadgen.template("claim", owner))
    review["request"].update(uid="probe", dryRun=True)
    return json.dumps(review).encode()


async def wait_seen(replicas: list[Replica], owners: Iterable[str]) -> float:
    """Seconds until every replica would admit a pod of every owner (its cache holds
    the owner's open booking)."""
    started = time.monotonic()
    async with httpx.AsyncClient(verify=False, timeout=10) as http:  # loopback, the chart's own CA
        for replica in replicas:
            url = f"https://{replica.ip}:{replica.port}/mutate"
            for owner in owners:
                while (
                    b"admitted under" not in (await http.post(url, content=dry_run(owner))).content
                ):
                    if time.monotonic() - started > READY_GIVE_UP_S:
                        raise RuntimeError(f"{replica.name} never saw {owner}'s booking")
                    await asyncio.sleep(0.2)
    return time.monotonic() - started


async def bookings(gateway: Gateway) -> dict[str, model.GPUReservation]:
    found = (await gateway.list_all(GPU_RESERVATIONS, NS)).items
    return {res.facts.owner: res for res in map(model.from_object, found)}


async def start_system(state: Path) -> tuple[Sandbox, System]:
    ctx = SandboxContext(state_dir=state, scenario=system_scenario())
    ctx.handles["release.user"] = ((), (f"webhook.replicas={REPLICAS}",))
    box = Sandbox(ctx, COMPONENTS)
    await box.start()
    try:
        release: ReleaseComponent = ctx.handles["release"]
        await release.settle()
        gateway = Gateway.from_kubeconfig(str(state / "kubeconfig"))
        owners = [*OWNERS, STRESS_OWNER, BURST_OWNER]
        started = time.monotonic()
        while len(found := await bookings(gateway)) < len(owners):
            if time.monotonic() - started > READY_GIVE_UP_S:
                raise RuntimeError(f"{len(found)} of {len(owners)} bookings mirrored")
            await asyncio.sleep(0.5)
        replicas = await release.replicas("webhook")
        assert release.rendered is not None
        port = int(release.rendered.effective["webhook"]["healthPort"])
        await wait_seen(replicas, owners)
        (reconciler,) = await release.replicas("reconciler")
        kube = ctx.handles["kube"]
        return box, System(ctx, kube, gateway, release, replicas, reconciler, port, found)
    except BaseException:
        await box.stop()
        raise


async def pods_of(gateway: Gateway, owners: Iterable[str]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for owner in owners:
        found += (await gateway.list_all(PODS, owner)).items
    return found


async def clean(gateway: Gateway, owners: Iterable[str]) -> None:
    """Delete every owner's pods (a collection delete per namespace)."""
    for owner in owners:
        await gateway.request("DELETE", PODS.path(owner, None), None, None)


async def drained(system: System) -> float:
    """Seconds until no booking holds anything (the reconciler dropped the holds of the
    deleted pods) and the store has been quiet for ``QUIET_S``."""
    started = time.monotonic()
    while time.monotonic() - started < DRAIN_GIVE_UP_S:
        found = await bookings(system.gateway)
        if all(not res.holds for res in found.values() if res.facts.owner in OWNERS):
            break
        await asyncio.sleep(0.2)
    await quiet(system.kube)
    return time.monotonic() - started


async def quiet(server: KubeServer) -> None:
    """Until ``server``'s store saw no write for ``QUIET_S`` (at most ``QUIET_GIVE_UP_S``)."""
    started = time.monotonic()
    last, since = server.store.resource_version, time.monotonic()
    while time.monotonic() - started < QUIET_GIVE_UP_S:
        await asyncio.sleep(0.05)
        if server.store.resource_version != last:
            last, since = server.store.resource_version, time.monotonic()
        elif time.monotonic() - since >= QUIET_S:
            return


def dispatch_times(server: KubeServer) -> DispatchTimes:
    """A copy of the webhook dispatch's time counters of ``server``."""
    for plugin in server.mutating_admission:
        if isinstance(plugin, WebhookDispatcher):
            return dataclasses.replace(plugin.times)
    return DispatchTimes()


# --- the cells -------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """A plan and how it arrives: ``rate`` pods/s (open loop) or ``users`` (closed)."""

    name: str
    plan: list[Planned]
    shape: Shape


def cells() -> list[Cell]:
    sizes = dict(zip(OWNERS, SIZES, strict=True))
    found = [
        Cell(f"burst {rate:g}/s", burst_plan(sizes), Shape(POOL, rate=rate, burst=CLIENT_BURST))
        for rate in RATES
    ]
    found += [Cell(f"users c={c}", users_plan(sizes), Shape(c)) for c in USERS]
    return found


async def system_arm(
    system: System, cell: Cell, owner_tokens: dict[str, str], tag: str
) -> dict[str, Any]:
    cpu, before = system.cpu_s(), await asyncio.to_thread(system.samples)
    others, calls = system.others_cpu_s(), dispatch_times(system.kube)
    writes = system.kube.store.resource_version
    maker = PlanMaker(cell.plan, owner_tokens, tag, HELD)
    out = await asyncio.to_thread(run_plan, system.kube.secure_port, maker, cell.shape)
    writes = system.kube.store.resource_version - writes
    cpu, after_ = system.cpu_s() - cpu, await asyncio.to_thread(system.samples)
    answered, fails, groups, grouped, conflicts = (
        int(a - b) for a, b in zip(after_, before, strict=True)
    )
    others = {k: v - others[k] for k, v in system.others_cpu_s().items()}
    after = dispatch_times(system.kube)
    calls = DispatchTimes(
        after.requests - calls.requests,
        after.matching_s - calls.matching_s,
        after.calls - calls.calls,
        after.calls_s - calls.calls_s,
    )
    pods = await pods_of(system.gateway, OWNERS)
    over = over_admitted(pods, system.capacity())
    sizes = {owner: system.bookings[owner].facts.gpu_count for owner in OWNERS}
    admitted = sum(a.admitted for a in out.answers)
    await clean(system.gateway, OWNERS)
    drain_s = await drained(system)
    return {
        **figures(out),
        "with_room": with_room(cell.plan, sizes),
        "admitted": admitted,
        "admitted_pods_listed": sum(
            vocab.BOOKING_REFERENCE in (p["metadata"].get("annotations") or {}) for p in pods
        ),
        "over_admitted": over,
        "webhook_requests": answered,
        "fail_opens": fails,
        "claim_groups": groups,
        "claims_grouped": grouped,
        "ledger_conflicts": conflicts,
        "store_writes_per_pod": writes / len(cell.plan),
        "webhook_cpu_ms_per_request": cpu * 1e3 / answered if answered else math.nan,
        "webhook_cpu_ms_per_admitted": cpu * 1e3 / admitted if admitted else math.nan,
        "drain_s": drain_s,
        "others_cpu_ms_per_pod": {k: v * 1e3 / len(cell.plan) for k, v in others.items()},
        "call_ms_per_create": calls.calls_s * 1e3 / calls.requests if calls.requests else math.nan,
        "matching_ms_per_create": (
            calls.matching_s * 1e3 / calls.requests if calls.requests else math.nan
        ),
    }


async def alone_arm(
    server: KubeServer, admin: Gateway, cell: Cell, owner_tokens: dict[str, str], tag: str
) -> dict[str, Any]:
    maker = PlanMaker(cell.plan, owner_tokens, tag, HELD)
    out = await asyncio.to_thread(run_plan, server.secure_port, maker, cell.shape)
    await clean(admin, OWNERS)
    await quiet(server)
    return figures(out)


def figures(out: PlanOutcome) -> dict[str, Any]:
    return {
        **latency_ms(out.answers),
        "answers": [[a.latency, a.status, a.admitted, a.counted] for a in out.answers],
        "statuses": dict(Counter(a.status for a in out.answers)),
        "errors": out.errors,
        "seconds": out.seconds,
        "sent": out.sent,
    }


def pooled(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm's rounds of a cell together: p50/p99 over every counted answer, sums."""
    answers = [Answer(0, lat, st, adm, cnt) for r in rounds for lat, st, adm, cnt in r["answers"]]
    found: dict[str, Any] = {**latency_ms(answers), "rounds": len(rounds)}
    found["round_p50_ms"] = [r["p50_ms"] for r in rounds]
    statuses: Counter[int] = Counter()
    for r in rounds:
        statuses.update({int(k): v for k, v in r["statuses"].items()})
    found["statuses"] = dict(statuses)
    for key in (
        "errors",
        "sent",
        "with_room",
        "admitted",
        "admitted_pods_listed",
        "webhook_requests",
        "fail_opens",
        "claim_groups",
        "claims_grouped",
        "ledger_conflicts",
    ):
        if key in rounds[0]:
            found[key] = sum(r[key] for r in rounds)
    if "over_admitted" in rounds[0]:
        found["over_admitted_gpus"] = sum(sum(r["over_admitted"].values()) for r in rounds)
        found["over_admitted"] = [r["over_admitted"] for r in rounds]
        found["webhook_cpu_ms_per_request"] = [r["webhook_cpu_ms_per_request"] for r in rounds]
        found["webhook_cpu_ms_per_admitted"] = [r["webhook_cpu_ms_per_admitted"] for r in rounds]
        found["drain_s"] = [r["drain_s"] for r in rounds]
        found["store_writes_per_pod"] = [r["store_writes_per_pod"] for r in rounds]
        found["others_cpu_ms_per_pod"] = [r["others_cpu_ms_per_pod"] for r in rounds]
        found["call_ms_per_create"] = [r["call_ms_per_create"] for r in rounds]
        found["matching_ms_per_create"] = [r["matching_ms_per_create"] for r in rounds]
    return found


async def realistic(system: System, bare: KubeServer, bare_admin: Gateway) -> list[dict[str, Any]]:
    arms = {"system": tokens(system.kube, OWNERS), "alone": tokens(bare, OWNERS)}
    found = []
    for index, cell in enumerate(cells()):
        seen: dict[str, list[dict[str, Any]]] = {"system": [], "alone": []}
        for round_ in range(ROUNDS):
            order = ("system", "alone") if (index + round_) % 2 == 0 else ("alone", "system")
            for arm in order:
                tag = f"c{index}{arm[0]}{round_}"
                if arm == "system":
                    seen[arm].append(await system_arm(system, cell, arms[arm], tag))
                else:
                    seen[arm].append(await alone_arm(bare, bare_admin, cell, arms[arm], tag))
        found.append({"cell": cell.name, **{arm: pooled(r) for arm, r in seen.items()}})
    return found


# --- direct cells: the baseline and the stress cells ------------------------------------


class Upkeep:
    """The stand-in for the reconciler's upkeep (``bench.standin``) in its own process,
    for one stress cell."""

    def __init__(self, kubeconfig: Path, name: str, feed: Path) -> None:
        cmd = [sys.executable, "-m", "bench.standin", str(kubeconfig), NS, name, str(feed)]
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, text=True
        )
        assert self._proc.stdout is not None
        if self._proc.stdout.readline().strip() != "ready":
            self._proc.kill()
            raise RuntimeError("the upkeep stand-in did not start")

    def stop(self) -> int:
        """End its passes; the ledger writes it made."""
        out, _ = self._proc.communicate(timeout=30)
        return int(out.strip() or 0)


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


def direct(c: int, path: str, out: Outcome, cpu: float, answered: int) -> dict[str, Any]:
    lat = out.latencies
    return {
        "concurrency": c,
        "path": path,
        "requests": len(lat),
        "rps": len(lat) / out.seconds if out.seconds else 0.0,
        "p50_ms": rank(lat, 0.5) * 1e3,
        "p99_ms": rank(lat, 0.99) * 1e3,
        "admitted": out.admitted,
        "errors": out.errors,
        "cpu_ms_per_request": cpu * 1e3 / answered if answered else math.nan,
        "unfed": out.unfed,
    }


async def direct_cells(system: System, state: Path) -> dict[str, Any]:
    """The baseline and the stress cells, AdmissionReviews straight to one replica."""
    pair = system.release.serving_pair()
    cert, key = state / "baseline.crt", state / "baseline.key"
    cert.write_bytes(pair.cert_pem)
    key.write_bytes(pair.key_pem)
    key.chmod(0o600)
    baseline, port = await start_baseline(cert, key)
    replica = system.replicas[0]
    health = system.health_url(replica)
    feeds = Path(tempfile.mkdtemp(prefix="bench-feed-"))  # short: AF_UNIX's path limit
    feed = feeds / "upkeep.sock"
    found: list[dict[str, Any]] = []
    try:
        for c in USERS:
            for path in ("baseline", "named", "claim"):
                is_base = path == "baseline"
                target = Target("127.0.0.1", port) if is_base else Target(replica.ip, replica.port)
                pid = baseline.pid if is_base else replica.pid
                kind = "claim" if is_base else path
                load = Load(
                    kind,
                    c,
                    WARMUP_S,
                    MEASURE_S,
                    owner=STRESS_OWNER,
                    feed=None if is_base else str(feed),
                )
                upkeep = None
                if not is_base:
                    name = system.bookings[STRESS_OWNER].name
                    upkeep = await asyncio.to_thread(Upkeep, state / "kubeconfig", name, feed)
                before = 0 if is_base else int(counted(health, "requests_total")[0])
                cpu = cpu_s(pid)
                out = await asyncio.to_thread(loadgen.run_load, target, load)
                cpu = cpu_s(pid) - cpu
                if is_base:  # no counter of its own: scale the measured count
                    answered = round(len(out.latencies) * (1 + WARMUP_S / MEASURE_S))
                else:
                    answered = int(counted(health, "requests_total")[0]) - before
                found.append(direct(c, path, out, cpu, answered))
                found[-1]["stress"] = not is_base
                if upkeep is not None:
                    found[-1]["upkeep_writes"] = await asyncio.to_thread(upkeep.stop)
        fails = int(counted(health, "fail_open_total")[0])
        load = Load("claim", BURST_GPUS, 0, 0, per_connection=1, owner=BURST_OWNER)
        out = await asyncio.to_thread(loadgen.run_load, Target(replica.ip, replica.port), load)
        held = model.from_object(
            await system.gateway.get(GPU_RESERVATIONS, system.bookings[BURST_OWNER].name, NS)
        )
        burst = {
            "creates": BURST_GPUS,
            "admitted": out.admitted,
            "fail_opens": int(counted(health, "fail_open_total")[0]) - fails,
            "held_gpus": held.used_gpus,
            "p99_ms": rank(out.latencies, 0.99) * 1e3,
        }
    finally:
        shutil.rmtree(feeds, ignore_errors=True)
        baseline.terminate()
        baseline.wait(10)
    return {"cells": found, "burst": burst}


# --- what other benchmarks take from this one ------------------------------------------


@dataclass(frozen=True)
class Mode:
    name: str
    warmup_s: float
    measure_s: float


MODES = {"short": Mode("short", 0.5, 2.0), "full": Mode("full", 2.0, 10.0)}


def mode() -> Mode:
    return MODES.get(os.environ.get("BENCH_MODE", "short"), MODES["short"])


def scenario() -> dict[str, Any]:
    """A kube emulator's namespaces for a benchmark of its own (no app, no nodes)."""
    return {"namespaces": ["alice", "nobody", "burst", NS], "nodes": []}


def booking(rid: int, owner: str, gpus: int) -> dict[str, Any]:
    """A GPUReservation object of an open booking, to create in ``NS``."""
    now = SystemClock().now()
    facts = model.ReservationFacts(
        id=rid,
        owner=owner,
        gpu_class=GPU_CLASS,
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


def conditions() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
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


# --- the run ---------------------------------------------------------------------------


async def measure(state: Path) -> dict[str, Any]:
    load_before = os.getloadavg()
    bare = KubeServer()
    box, system = await start_system(state)
    bare_admin: Gateway | None = None
    try:
        install_admission(bare)
        await seed(bare.cluster, {"namespaces": list(OWNERS)})
        await bare.start()
        bare_config = state / "alone.kubeconfig"
        bare_config.write_text(bare.kubeconfig(), encoding="utf-8")
        bare_admin = Gateway.from_kubeconfig(str(bare_config))
        await quiet(system.kube)
        found: dict[str, Any] = {
            "mode": "full" if FULL else "quick",
            "rounds": ROUNDS,
            "loadavg_before": load_before,
            "realistic": await realistic(system, bare, bare_admin),
        }
        found["direct"] = await direct_cells(system, state)
        found["loadavg_after"] = os.getloadavg()
        return found
    finally:
        if bare_admin is not None:
            bare_admin.close()
        system.gateway.close()
        await bare.stop()
        await box.stop()


def ms(value: float, signed: bool = False) -> str:
    if value != value:  # NaN
        return "–"
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def spread(values: Sequence[float]) -> str:
    got = [v for v in values if v == v]
    if not got:
        return "–"
    low, high = min(got), max(got)
    return f"{low:.3f}" if math.isclose(low, high) else f"{low:.3f}–{high:.3f}"


def lines(found: dict[str, Any]) -> list[str]:
    out = [
        f"{found['mode']}: {found['rounds']} round(s) per arm and cell (system, alone "
        f"alternating), {REPLICAS} webhook replicas; load average "
        f"{found['loadavg_before'][0]:.2f} → {found['loadavg_after'][0]:.2f}",
        "| cell | system p50 / p99 ms | alone p50 / p99 ms | added p50 / p99 ms | admitted at "
        "creation (of those with room) | over-admitted GPUs | webhook CPU ms per request |",
        "|---|---|---|---|---|---|---|",
    ]
    for cell in found["realistic"]:
        s, a = cell["system"], cell["alone"]
        share = s["admitted"] / s["with_room"] if s["with_room"] else math.nan
        out.append(
            f"| {cell['cell']} | {ms(s['p50_ms'])} / {ms(s['p99_ms'])} | {ms(a['p50_ms'])} / "
            f"{ms(a['p99_ms'])} | {ms(s['p50_ms'] - a['p50_ms'], True)} / "
            f"{ms(s['p99_ms'] - a['p99_ms'], True)} | {share:.1%} ({s['admitted']} of "
            f"{s['with_room']}; {s['sent']} sent) | {s['over_admitted_gpus']} | "
            f"{spread(s['webhook_cpu_ms_per_request'])} |"
        )
    for cell in found["realistic"]:
        s, a = cell["system"], cell["alone"]
        odd = {
            arm: {k: v for k, v in x["statuses"].items() if int(k) != 201}
            for arm, x in (("system", s), ("alone", a))
        }
        out.append(
            f"   {cell['cell']}: non-201 {odd}, errors {s['errors']} / {a['errors']}; pods "
            f"listed admitted {s['admitted_pods_listed']}; webhook CPU per admitted pod "
            f"{spread(s['webhook_cpu_ms_per_admitted'])} ms; drained in "
            f"{spread(s['drain_s'])} s; the API server's webhook call "
            f"{spread(s['call_ms_per_create'])} ms and matchConditions "
            f"{spread(s['matching_ms_per_create'])} ms per create (mean); {s['fail_opens']} "
            f"fail-opens, {s['claims_grouped'] / max(1, s['claim_groups']):.1f} claims per "
            f"group commit, {s['ledger_conflicts']} 409s, "
            f"{spread(s['store_writes_per_pod'])} store writes per pod; CPU ms per pod: "
            + ", ".join(
                f"{k} {spread([r[k] for r in s['others_cpu_ms_per_pod']])}"
                for k in ("emulators", "reconciler")
            )
        )
    direct_ = found["direct"]
    for cell in direct_["cells"]:
        label = f"{cell['path']}, stress" if cell["stress"] else cell["path"]
        out.append(
            f"direct c={cell['concurrency']} {label}: {cell['rps']:.0f} req/s, p50 "
            f"{ms(cell['p50_ms'])} ms, p99 {ms(cell['p99_ms'])} ms, server CPU "
            f"{cell['cpu_ms_per_request']:.3f} ms per request, admitted {cell['admitted']}"
        )
    b = direct_["burst"]
    out.append(
        f"burst, stress: {b['creates']} concurrent claims on one booking of {BURST_GPUS} "
        f"GPUs: {b['admitted']} admitted at creation, {b['fail_opens']} fail-opens, "
        f"{b['held_gpus']} GPUs held, p99 {ms(b['p99_ms'])} ms"
    )
    return out


def run() -> list[str]:
    state = Path(tempfile.mkdtemp(prefix="bench-webhook-"))
    try:
        found = asyncio.run(measure(state))
    finally:
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(state, ignore_errors=True)
    return [*lines(found), f"JSON: {write_json('webhook', found)}"]
