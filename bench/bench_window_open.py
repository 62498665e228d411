"""Window-open benchmark: 500 queued pods across 50 bookings that open at the same instant.

The sandbox's kube, cluster and app emulators run in this process (as in the sandbox
tests), one real reconciler replica as a pod of the chart's release, run by the process
kubelet (``sandbox.release_replicas``). The cluster emulation serves the release's
namespace only (``sandbox.cluster.component.SCOPE``, as ``bench create`` does): the
reconciler's pod runs, the users' pods stay Pending. On a cluster the scheduler and
kubelet spend CPUs of their own; here, scheduling the pods tolerated first would run on
the emulators' event loop while the reconciler patches the rest. "Tolerated" is the
reconciler's work alone.

1. The app emulator gets one class with room for every booking, 50 users (one
   namespace each in the kube emulator) and one group holding them all.
2. Each user books ``GPUS_PER_BOOKING`` GPUs, every booking opening at the same instant
   ``LEAD_WALL_S`` wall seconds ahead (an absolute instant, so all 50 agree exactly).
3. Each user creates ``GPUS_PER_BOOKING`` gated one-GPU pods in their namespace; the
   benchmark waits until the reconciler has told every pod ``WaitingForReservation``
   (its pre-window work is done) before the window opens.
4. Each pod's lag = the instant it first carries the reservation toleration of its
   class − the window start, taken three ways: *committed* (the kube emulator's store,
   in-process, at the write: no delivery delay — the headline figure), *patch
   answered* (the reconciler's ``queue.admitted`` log, ``since_open_s``) and *seen by
   an HTTP watch* consumed on its own thread and event loop.

Lags are in sandbox seconds; ``wall = sandbox / factor`` (``BENCH_CLOCK_FACTOR``,
default 1, where the two are equal). The HTTP watch client runs in a process of its
own. CPU seconds are read from the window start to the last pod tolerated and to
``TAIL_S`` after the start (the announcements trail): the reconciler's process (and its
event loop's thread) from ``/proc``, this process (both emulators) from
``time.process_time`` — per admitted pod, the figure least moved by other work on the
machine. Afterwards the ledgers are checked: no booking may hold more GPUs
than it has. Gives up ``GIVE_UP_S`` wall seconds after the window opened and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.process
import os
import queue
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import httpx

from bench.procstat import cpu_s, thread_cpu_s
from bench.sandboxed import Box, in_fresh_state, rank, with_replica
from sandbox.cluster.component import SCOPE
from sandbox.kube.store import Change
from sandbox.release_replicas import ReconcilerPod
from sandbox.runner import SandboxContext
from shared import ledger, model, vocab
from shared.clock import ScaledClock, format_utc, parse_utc
from shared.errors import KubeError
from shared.gateway import Gateway
from shared.policy.tolerations import is_granted
from shared.resources import EVENTS, GPU_RESERVATIONS, PODS

BOOKINGS = 50
GPUS_PER_BOOKING = 10
GPU_CLASS = "a100"
GROUP = "bench"
#: How far ahead (wall seconds) the windows open; the pre-window work must fit.
LEAD_WALL_S = 40.0
#: Wall seconds to wait, after the window opened, for every pod to be tolerated.
GIVE_UP_S = 180.0
#: Sandbox seconds after the window start at which the tail's CPU is read (the
#: announcements — Events, ledger marks — trail the admissions).
TAIL_S = 3.0
#: Pod creations in flight at once.
CREATE_CONCURRENCY = 16
GATE = vocab.SANDBOX_SCHEDULING_GATE
BENCH_LABEL = "bench"
BENCH_VALUE = "window-open"
ENV = {
    "LEADER_ELECTION_ENABLED": "false",
    "RESERVATION_FETCH_INTERVAL": "3600",
    "POD_SCHEDULING_GATE_NAME": GATE,
}


def users() -> list[str]:
    return [f"u{i:02d}" for i in range(BOOKINGS)]


def scenario() -> dict[str, Any]:
    """Namespaces for every user; a class with room for every booking; one group."""
    names = users()
    return {
        "namespaces": [*names, vocab.PRODUCT_NAME],
        "nodes": [],
        "app": one_class_app(names, GROUP, BOOKINGS * GPUS_PER_BOOKING, GPUS_PER_BOOKING),
    }


def one_class_app(
    names: list[str], group: str, total_gpus: int, per_booking: int | None = None
) -> dict[str, Any]:
    """The app of a bench scenario: one a100 class of ``total_gpus`` (a booking takes
    at most ``per_booking`` when given), ``names`` as its users, all in ``group``."""
    gpu_class: dict[str, Any] = {
        "id": 1,
        "name": "A100",
        "label_value": GPU_CLASS,
        "total_gpus": total_gpus,
    }
    if per_booking is not None:
        gpu_class["max_gpus_per_reservation"] = per_booking
    return {
        "timezone": "UTC",
        "classes": [gpu_class],
        "users": names,
        "groups": [{"name": group, "members": names, "classes": [GPU_CLASS]}],
    }


def manifest(owner: str, index: int) -> dict[str, Any]:
    """A gated one-GPU pod of ``owner``'s, queued until the booking opens."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"p{index:02d}",
            "namespace": owner,
            "labels": {vocab.GPU_CLASS_LABEL: GPU_CLASS, BENCH_LABEL: BENCH_VALUE},
        },
        "spec": {
            "schedulingGates": [{"name": GATE}],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {vocab.GPU_RESOURCE: "1"}},
                }
            ],
        },
    }


def tolerated(pod: dict[str, Any]) -> bool:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    return any(is_granted(t, GPU_CLASS) for t in tolerations)


def key_of(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


class Committed(asyncio.Queue[Change | None]):
    """Fed by the kube emulator's store at each write: notes when a pod is first stored
    tolerated (the instant the apiserver holds the patch; no delivery delay)."""

    def __init__(self, clock: ScaledClock) -> None:
        super().__init__()
        self.clock = clock
        self.seen: dict[str, datetime] = {}

    def put_nowait(self, item: Change | None) -> None:
        if item is None or item.type == "DELETED":
            return
        labels = (item.object.get("metadata") or {}).get("labels") or {}
        key = key_of(item.object)
        if (
            labels.get(BENCH_LABEL) == BENCH_VALUE
            and key not in self.seen
            and tolerated(item.object)
        ):
            self.seen[key] = self.clock.now()


class Flag(Protocol):
    """``threading.Event`` or a ``multiprocessing`` Event."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


@dataclass
class Watcher:
    """Notes when each bench pod is first seen tolerated, in a process of its own
    (``watch_process``): on a thread of the benchmark's process it would contend for
    the interpreter lock with the kube emulator it measures, as no client of a real
    apiserver does."""

    kubeconfig: str
    clock: ScaledClock
    expected: int
    deadline: float  # time.monotonic() (system-wide on Linux)
    ready: Flag
    stop: Flag
    seen: dict[str, datetime] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def main(self) -> None:
        try:
            asyncio.run(self._watch())
        except Exception as exc:  # reported in the figures, never raised
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            self.ready.set()

    def _note(self, pods: Iterable[dict[str, Any]]) -> None:
        now = self.clock.now()
        for pod in pods:
            key = key_of(pod)
            if key not in self.seen and tolerated(pod):
                self.seen[key] = now

    async def _watch(self) -> None:
        gateway = Gateway.from_kubeconfig(self.kubeconfig)
        selector = f"{BENCH_LABEL}={BENCH_VALUE}"
        rv: str | None = None
        try:
            while len(self.seen) < self.expected and not self.stop.is_set():
                if rv is None:  # LIST at the start and after a failed watch only
                    listed = await gateway.list_all(PODS, label_selector=selector)
                    self._note(listed.items)
                    self.ready.set()
                    rv = listed.resource_version
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    return
                try:
                    # Every 5 s the stream is ended to look at the stop flag, and
                    # resumed from the last event's resourceVersion (as an informer
                    # does): a LIST of every pod each time cost the emulator it
                    # measures ≈ 50 ms of CPU, now and then inside the burst.
                    async with asyncio.timeout(min(remaining, 5.0)):
                        async for event in gateway.watch(PODS, rv, label_selector=selector):
                            version = (event.object.get("metadata") or {}).get("resourceVersion")
                            rv = str(version) if version else rv
                            if event.type in {"ADDED", "MODIFIED"}:
                                self._note([event.object])
                            if len(self.seen) >= self.expected or self.stop.is_set():
                                return
                except TimeoutError:
                    pass
                except KubeError:
                    rv = None
        finally:
            gateway.close()


def watch_process(
    kubeconfig: str,
    clock: tuple[float, str, float],
    expected: int,
    deadline: float,
    ready: Flag,
    stop: Flag,
    results: Any,
) -> None:
    """A child process's body: watch, then put ``(seen as ISO instants, errors)`` on
    ``results``. ``clock`` is the parent's (factor, epoch, started_at)."""
    factor, epoch, started_at = clock
    shared_clock = ScaledClock(factor, parse_utc(epoch), started_at)
    watcher = Watcher(kubeconfig, shared_clock, expected, deadline, ready, stop)
    watcher.main()
    results.put(({k: v.isoformat() for k, v in watcher.seen.items()}, watcher.errors))


@dataclass
class WatchChild:
    """The HTTP watch client's process, seen from the benchmark."""

    process: multiprocessing.process.BaseProcess
    ready: Flag
    stop: Flag
    results: Any

    @classmethod
    def start(
        cls, kubeconfig: str, clock: ScaledClock, expected: int, deadline: float
    ) -> WatchChild:
        spawn = multiprocessing.get_context("spawn")  # no fork of a process with threads
        ready, stop, results = spawn.Event(), spawn.Event(), spawn.Queue()
        shared = (clock.factor, clock.epoch.isoformat(), clock.started_at)
        process = spawn.Process(
            target=watch_process,
            args=(kubeconfig, shared, expected, deadline, ready, stop, results),
            name="bench-watch",
            daemon=True,
        )
        process.start()
        return cls(process, ready, stop, results)

    def collect(self, timeout_s: float) -> tuple[dict[str, datetime], list[str]]:
        """Wait for the watcher to finish (blocking); what it saw and its errors."""
        try:
            seen, errors = self.results.get(timeout=timeout_s)
        except queue.Empty:
            self.stop.set()
            return {}, [f"the watch process gave no result within {timeout_s:.0f} s"]
        finally:
            self.process.join(5)
        return {k: datetime.fromisoformat(v) for k, v in seen.items()}, list(errors)

    def close(self) -> None:
        self.stop.set()
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()


async def post(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = await http.post(url, json=body)
    if answer.status_code not in {200, 201}:
        raise RuntimeError(f"POST {url}: {answer.status_code} {answer.text}")
    data: dict[str, Any] = answer.json()
    return data


async def waiting_told(gateway: Gateway) -> int:
    """Distinct pods told WaitingForReservation so far."""
    selector = f"reason={vocab.REASON_WAITING_FOR_RESERVATION}"
    events = (await gateway.list_all(EVENTS, field_selector=selector)).items
    return len({(e.get("involvedObject") or {}).get("uid") for e in events})


async def overbooked(gateway: Gateway, namespace: str) -> tuple[int, int]:
    """(GPUs held in all ledgers, bookings holding more than they have)."""
    items = (await gateway.list_all(GPU_RESERVATIONS, namespace)).items
    held, over = 0, 0
    for obj in items:
        res = model.from_object(obj)
        held += ledger.used(res)
        over += ledger.used(res) > res.facts.gpu_count
    return held, over


@dataclass(frozen=True)
class Cpu:
    """CPU seconds over a span: the reconciler process (and of it, its event loop's
    thread), and this process (both emulators)."""

    reconciler: float
    loop: float
    emulators: float

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(
            self.reconciler - other.reconciler,
            self.loop - other.loop,
            self.emulators - other.emulators,
        )


@dataclass
class Burst:
    """CPU from the window start until every pod was tolerated, and until ``TAIL_S``
    after the start: CPU per admitted pod is the yardstick that the other work on a
    shared machine moves least."""

    admitted: Cpu | None = None
    tail: Cpu | None = None


def cpu_now(pid: int) -> Cpu:
    return Cpu(cpu_s(pid), thread_cpu_s(pid).get("main", 0.0), time.process_time())


async def sample_cpu(
    pid: int, clock: ScaledClock, opens: datetime, committed: Committed, total: int, burst: Burst
) -> None:
    """Fill ``burst``: CPU read at the window start, when all ``total`` pods are
    committed tolerated, and ``TAIL_S`` after the start."""
    while (left := (opens - clock.now()).total_seconds()) > 0:
        await clock.sleep(min(left, 0.005) if left < 0.05 else left - 0.04)
    start = cpu_now(pid)
    tail_at = opens + timedelta(seconds=TAIL_S)
    while burst.admitted is None or burst.tail is None:
        if burst.admitted is None and len(committed.seen) >= total:
            burst.admitted = cpu_now(pid) - start
        if burst.tail is None and clock.now() >= tail_at:
            burst.tail = cpu_now(pid) - start
        await asyncio.sleep(0.01)


def cpu_lines(burst: Burst, total: int) -> list[str]:
    """The burst's CPU, in seconds and per admitted pod."""
    lines = []
    for what, got in (
        ("window start to all tolerated", burst.admitted),
        (f"window start to +{TAIL_S:g} s", burst.tail),
    ):
        if got is None:
            lines.append(f"CPU {what}: not reached")
            continue
        per = 1000 / total
        lines.append(
            f"CPU {what}: reconciler {got.reconciler:.2f} s ({got.reconciler * per:.2f} "
            f"ms/pod; its event loop {got.loop:.2f} s, other threads "
            f"{got.reconciler - got.loop:.2f} s), emulators (bench process) "
            f"{got.emulators:.2f} s ({got.emulators * per:.2f} ms/pod)"
        )
    return lines


@dataclass
class Setup:
    """What happened before the window opened."""

    created_s: float = 0.0
    told: int = 0
    spare_s: float = 0.0
    early: int = 0


async def prepare(
    http: httpx.AsyncClient, gateway: Gateway, app: str, opens: datetime, setup: Setup
) -> None:
    """50 bookings opening at ``opens``, then 10 gated one-GPU pods per owner."""
    for owner in users():
        body = {
            "username": owner,
            "group": GROUP,
            "gpu_class": GPU_CLASS,
            "gpu_count": GPUS_PER_BOOKING,
            "start": format_utc(opens),
            "end": format_utc(opens + timedelta(hours=2)),
        }
        await post(http, f"{app}/_sandbox/bookings", body)
    limit = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def create(owner: str, index: int) -> None:
        async with limit:
            await gateway.create(PODS, manifest(owner, index), owner)

    t0 = time.monotonic()
    await asyncio.gather(*(create(u, i) for u in users() for i in range(GPUS_PER_BOOKING)))
    setup.created_s = time.monotonic() - t0


async def settle(gateway: Gateway, clock: ScaledClock, opens: datetime, setup: Setup) -> None:
    """Wait (at most until 1 s before the window) until every pod was told it waits."""
    total = BOOKINGS * GPUS_PER_BOOKING
    while clock.now() < opens - timedelta(seconds=1):
        setup.told = await waiting_told(gateway)
        if setup.told >= total:
            break
        await asyncio.sleep(0.25)
    setup.spare_s = (opens - clock.now()).total_seconds()


def aligned_clock(factor: float) -> ScaledClock:
    """A scaled clock whose epoch is a whole second (figures read off it line up with
    the app's whole-second booking times). Not needed for agreement with the
    subprocesses: the sandbox passes them the epoch to the fraction."""
    started = float(int(time.time()))
    return ScaledClock(factor, epoch=datetime.fromtimestamp(started, UTC), started_at=started)


async def measure(state: Path, factor: float) -> list[str]:
    # Started at any instant: the sandbox hands the reconciler its epoch to the fraction
    # (sandbox.runner.clock_env), so both processes read the same time.
    clock = ScaledClock(factor)
    ctx = SandboxContext(state_dir=state, scenario=scenario(), clock=clock)
    ctx.handles[SCOPE] = ctx.namespace
    async with with_replica(ctx, ["kube", "app"], ENV) as box:
        store = box.kube.store
        committed = Committed(clock)
        _, subscription = store.subscribe("", PODS.plural, store.resource_version)
        subscription.queue = committed
        watcher: WatchChild | None = None
        try:
            opens = (clock.now() + timedelta(seconds=LEAD_WALL_S * factor)).replace(microsecond=0)
            setup = Setup()
            async with httpx.AsyncClient(timeout=10) as http:
                await prepare(http, box.gateway, ctx.endpoints["app"], opens, setup)
            wall_to_open = (opens - clock.now()).total_seconds() / factor
            deadline = time.monotonic() + wall_to_open + GIVE_UP_S
            watcher = WatchChild.start(str(box.admin), clock, BOOKINGS * GPUS_PER_BOOKING, deadline)
            timeout = wall_to_open + GIVE_UP_S + 5
            return await opening(box, clock, committed, watcher, opens, setup, timeout)
        finally:
            store.unsubscribe(subscription)
            if watcher is not None:
                watcher.close()


async def opening(
    box: Box,
    clock: ScaledClock,
    committed: Committed,
    watcher: WatchChild,
    opens: datetime,
    setup: Setup,
    timeout_s: float,
) -> list[str]:
    """Once every pod was told it waits, the window opens: the figures once all are
    tolerated (or ``timeout_s`` wall seconds have passed)."""
    gateway, replica, factor = box.gateway, box.replica, clock.factor
    total = BOOKINGS * GPUS_PER_BOOKING
    await asyncio.to_thread(watcher.ready.wait, 30)
    await settle(gateway, clock, opens, setup)
    setup.early = len(committed.seen)
    burst = Burst()
    sampler = asyncio.create_task(sample_cpu(replica.pid, clock, opens, committed, total, burst))
    watched, errors = await asyncio.to_thread(watcher.collect, timeout_s)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(30):
            await sampler
    held, over = await overbooked(gateway, box.ctx.namespace)
    await replica.stop()  # flushes its log
    lines = header(opens, factor, setup)
    lines += figures("committed (apiserver store)", committed.seen, opens, factor, total)
    lines += figures(
        "patch answered (reconciler log)", own_view(replica, opens), opens, factor, total
    )
    lines += figures("seen by an HTTP watch client", watched, opens, factor, total)
    lines += cpu_lines(burst, total)
    lines.append(f"ledgers: {held} GPUs held in total, {over} bookings over their count")
    return lines + [f"watch error: {e}" for e in errors]


def header(opens: datetime, factor: float, setup: Setup) -> list[str]:
    total = BOOKINGS * GPUS_PER_BOOKING
    return [
        f"{total} one-GPU pods queued on {BOOKINGS} bookings of {GPUS_PER_BOOKING} "
        f"{GPU_CLASS} GPUs, all opening at {format_utc(opens)}; clock factor {factor:g} "
        f"(lags in sandbox s; wall s = sandbox s / {factor:g})",
        f"setup: pods created in {setup.created_s:.1f} s wall; {setup.told}/{total} told "
        f"{vocab.REASON_WAITING_FOR_RESERVATION} {setup.spare_s:.1f} sandbox s before the "
        f"window; {setup.early} tolerated before it opened",
    ]


def figures(
    what: str, seen: dict[str, datetime], opens: datetime, factor: float, total: int
) -> list[str]:
    """One line of lags (sandbox s, and wall s when the clock is scaled)."""
    lags = sorted((at - opens).total_seconds() for at in seen.values())
    if not lags:
        return [f"{what}: no pod tolerated (gave up {GIVE_UP_S:.0f} wall s after opening)"]

    def both(s: float) -> str:
        return f"{s:.2f}" if factor == 1 else f"{s:.2f} ({s / factor:.3f} wall)"

    marks = [("min", lags[0]), ("p50", rank(lags, 0.5)), ("p99", rank(lags, 0.99))]
    text = ", ".join(f"{name} {both(value)}" for name, value in marks)
    if len(lags) == total:
        end = f"all {total} after {both(lags[-1])}"
    else:
        end = f"only {len(lags)}/{total} by {both(lags[-1])}: GAVE UP after {GIVE_UP_S:.0f} s wall"
    return [f"{what}: {text}, max {both(lags[-1])}; {end}"]


def own_view(replica: ReconcilerPod, opens: datetime) -> dict[str, datetime]:
    """Each pod's admission instant as the reconciler logged it once its patch answered
    (``since_open_s``, on the reconciler's own copy of the sandbox clock)."""
    seen: dict[str, datetime] = {}
    for entry in replica.logs():
        if entry.get("event") == "queue.admitted" and "since_open_s" in entry:
            key = f"{entry.get('namespace')}/{entry.get('pod')}"
            lag = timedelta(seconds=float(entry["since_open_s"]))
            seen.setdefault(key, opens + lag)
    return seen


def run() -> list[str]:
    factor = float(os.environ.get("BENCH_CLOCK_FACTOR", "1"))
    return in_fresh_state("window-open", lambda state: measure(state, factor))


if __name__ == "__main__":
    print("\n".join(run()))
