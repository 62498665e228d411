"""The leader's usage keeper (reconciler.usage): pods in, status.usage and counters
out; a new term starts from the stored record and gives the same figures."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from reconciler.base import caches
from reconciler.base import mirroring as mirror
from reconciler.base.metrics import UsageMetrics
from reconciler.base.pods import PodView, project_pod
from reconciler.base.settings import UsageSettings
from reconciler.usage import UsageKeeper
from shared import model, vocab
from shared.clock import ManualClock as _Clock
from shared.clock import format_utc, utc
from shared.model import GPUReservation, Kind, ReservationFacts, State
from shared.policy import usage, usagerecord
from shared.policy.matching import MatchRules
from shared.resources import GPU_RESERVATIONS
from tests.fakekube import FakeKube

NS = vocab.PRODUCT_NAME
START = utc(2026, 3, 2, 10)
END = START + timedelta(hours=1)


class ManualClock(_Clock):
    """A manual clock a test sets directly (no sleeper is waiting here)."""

    def set(self, instant: datetime) -> None:
        self._now = instant


def facts(rid: int = 1, owner: str = "alice", gpus: int = 4, **kw: Any) -> ReservationFacts:
    base: dict[str, Any] = {
        "id": rid,
        "owner": owner,
        "gpu_class": "h100",
        "gpu_class_name": "H100",
        "gpu_count": gpus,
        "kind": Kind.BOOKING,
        "start": START,
        "end": END,
        "state": State.ACTIVE,
        "updated_at": START - timedelta(days=1),
        "group": "lab",
    }
    base.update(kw)
    return ReservationFacts(**base)


def pod_obj(
    name: str, ref: str, gpus: int, started: datetime | None, finished: datetime | None = None
) -> dict[str, Any]:
    phase = "Pending" if started is None else ("Succeeded" if finished else "Running")
    state: dict[str, Any] = {}
    if started is not None and finished is None:
        state = {"running": {"startedAt": format_utc(started)}}
    elif started is not None and finished is not None:
        state = {
            "terminated": {"startedAt": format_utc(started), "finishedAt": format_utc(finished)}
        }
    return {
        "metadata": {
            "name": name,
            "namespace": "alice",
            "uid": f"uid-{name}",
            "labels": {vocab.GPU_CLASS_LABEL: "h100"},
            "annotations": {vocab.BOOKING_REFERENCE: ref},
        },
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {vocab.GPU_RESOURCE: gpus}}}]
        },
        "status": {"phase": phase, "containerStatuses": [{"name": "c", "state": state}]},
    }


def view(obj: dict[str, Any]) -> PodView:
    found = project_pod(obj, MatchRules())
    assert found is not None
    return found


class World:
    def __init__(self, clock: ManualClock, kube: FakeKube | None = None) -> None:
        self.clock = clock
        self.kube = kube or FakeKube()
        self.registry = CollectorRegistry()
        self.keeper = UsageKeeper(
            self.kube,
            NS,
            clock,
            self.reservations,
            lambda: True,
            UsageMetrics(self.registry),
            UsageSettings(interval_s=30, checkpoint_s=600),
        )

    def reservations(self) -> dict[str, GPUReservation]:
        found = {}
        for obj in self.kube.items(GPU_RESERVATIONS, NS):
            res = model.from_object(obj)
            found[res.name] = res
        return found

    def stored(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.kube.read(GPU_RESERVATIONS, name, NS)["status"].get(
            "usage", {}
        )
        return found

    def counter(self, kind: str) -> float:
        value = self.registry.get_sample_value(
            f"gpu_reservation_usage_{kind}_gpu_seconds_total",
            {"gpu_class": "h100", "kind": "booking", "owner": "alice", "group": "lab"},
        )
        return value or 0.0


def synchronously(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test body to completion (the suite runs no async plugin)."""

    @functools.wraps(test)
    def wrapper() -> None:
        asyncio.run(test())

    return wrapper


def install(kube: FakeKube, f: ReservationFacts, now: datetime) -> None:
    kube.add(GPU_RESERVATIONS, model.to_object(GPUReservation(f), NS, now), NS)


@synchronously
async def test_running_pod_is_counted_written_and_survives_a_new_term() -> None:
    clock = ManualClock(START - timedelta(minutes=5))
    w = World(clock)
    install(w.kube, facts(), clock.now())
    ref = model.reference(1)
    running = view(pod_obj("p", ref, 2, START + timedelta(minutes=10)))
    await w.keeper.once()
    assert w.stored(ref) == {}  # upcoming, no pod: nothing to write
    clock.set(START + timedelta(minutes=10))
    w.keeper.pod_changed("alice/p", None, running)
    assert await w.keeper.once() == 1
    assert w.stored(ref)["open"] == [
        {"uid": "uid-p", "gpus": 2, "since": format_utc(START + timedelta(minutes=10))}
    ]
    clock.set(START + timedelta(minutes=30))
    await w.keeper.once()
    assert w.counter("used") == 2 * 20 * 60
    assert w.counter("booked") == 4 * 30 * 60  # counted from the first look (before the start)

    # A new term (another replica): the stored record and the pods as listed.
    other = World(clock, w.kube)
    other.keeper.pod_changed("alice/p", None, running)
    clock.set(START + timedelta(minutes=40))
    await other.keeper.once()
    record = usagerecord.record_from_status(w.kube.read(GPU_RESERVATIONS, ref, NS)["status"])
    fig = usage.figures(record, usage.window_of(other.reservations()[ref]), clock.now())
    assert fig.used == 2 * 30 * 60
    # The pod finishes at minute 50; it is folded once, whoever sees it again.
    done = view(pod_obj("p", ref, 2, START + timedelta(minutes=10), START + timedelta(minutes=50)))
    clock.set(START + timedelta(minutes=55))
    other.keeper.pod_changed("alice/p", running, done)
    await other.keeper.once()
    stored = w.stored(ref)
    assert stored["closedGpuSeconds"] == 2 * 40 * 60
    assert stored["folded"] == ["uid-p"]
    assert stored["open"] == []
    third = World(clock, w.kube)
    third.keeper.pod_changed("alice/p", None, done)
    clock.set(END + timedelta(minutes=5))
    await third.keeper.once()
    final = w.stored(ref)
    assert final["usedGpuSeconds"] == 2 * 40 * 60
    assert final["bookedGpuSeconds"] == 4 * 3600
    assert final["idleGpuSeconds"] == 4 * 3600 - 2 * 40 * 60
    assert final["firstPodStart"] == format_utc(START + timedelta(minutes=10))


@synchronously
async def test_a_deleted_running_pod_stops_when_it_was_seen_gone() -> None:
    clock = ManualClock(START)
    w = World(clock)
    install(w.kube, facts(), clock.now())
    ref = model.reference(1)
    running = view(pod_obj("p", ref, 1, START))
    w.keeper.pod_changed("alice/p", None, running)
    await w.keeper.once()
    clock.set(START + timedelta(minutes=12))
    w.keeper.pod_changed("alice/p", running, None)  # preempted: deleted while running
    await w.keeper.once()
    clock.set(START + timedelta(minutes=30))
    await w.keeper.once()
    assert w.stored(ref)["closedGpuSeconds"] == 12 * 60
    assert w.stored(ref)["folded"] == []  # gone pods are not kept
    assert w.counter("used") == 12 * 60


@synchronously
async def test_pending_pods_and_other_reservations_are_not_counted() -> None:
    clock = ManualClock(START)
    w = World(clock)
    install(w.kube, facts(), clock.now())
    install(w.kube, facts(rid=2), clock.now())
    pending = view(pod_obj("q", model.reference(1), 2, None))
    w.keeper.pod_changed("alice/q", None, pending)
    w.keeper.pod_changed("alice/r", None, view(pod_obj("r", model.reference(2), 1, START)))
    clock.set(START + timedelta(minutes=20))
    await w.keeper.once()
    pending_only = w.stored(model.reference(1))
    assert (pending_only["usedGpuSeconds"], pending_only["open"]) == (0, [])
    assert pending_only["bookedGpuSeconds"] == 4 * 20 * 60
    assert w.stored(model.reference(2))["open"][0]["uid"] == "uid-r"


@synchronously
async def test_a_malformed_stored_record_starts_afresh() -> None:
    clock = ManualClock(START + timedelta(minutes=5))
    w = World(clock)
    obj = model.to_object(GPUReservation(facts()), NS, clock.now())
    obj["status"]["usage"] = {"open": "garbage"}
    w.kube.add(GPU_RESERVATIONS, obj, NS)
    w.keeper.pod_changed("alice/p", None, view(pod_obj("p", model.reference(1), 1, START)))
    assert await w.keeper.once() == 1
    assert w.stored(model.reference(1))["usedGpuSeconds"] == 300


@synchronously
async def test_a_failed_write_is_counted_and_retried() -> None:
    clock = ManualClock(START + timedelta(minutes=5))
    w = World(clock)
    install(w.kube, facts(), clock.now())
    w.kube.down = True
    w.keeper.pod_changed("alice/p", None, view(pod_obj("p", model.reference(1), 1, START)))
    assert await w.keeper.once() == 0
    assert w.registry.get_sample_value(
        "gpu_reservation_usage_record_writes_total", {"outcome": "failed"}
    )
    w.kube.down = False
    assert await w.keeper.once() == 1


def test_a_usage_only_change_wakes_no_loop() -> None:
    res = GPUReservation(facts(), status_extra={"noShow": {"declaredAt": "x"}})
    written = GPUReservation(facts(), status_extra={**res.status_extra, "usage": {"asOf": "y"}})
    assert caches.same_reservation(res, written)
    assert caches.ledger_only(res, written)
    other = GPUReservation(facts(), status_extra={"noShow": {"declaredAt": "z"}})
    assert not caches.same_reservation(res, other)


def test_ended_mirrors_are_kept_for_the_retention() -> None:
    ended = GPUReservation(facts())
    existing = {ended.name: ended}
    now = END + timedelta(days=3)
    kept = mirror.plan([], existing, {}, set(), now, retention=timedelta(days=7))
    assert kept.deletes == ()
    later = mirror.plan([], existing, {}, set(), END + timedelta(days=7), timedelta(days=7))
    assert later.deletes == (ended.name,)
    assert mirror.plan([], existing, {}, set(), now).deletes == (ended.name,)


def test_an_open_booking_is_checkpointed_and_a_new_term_counts_on_from_it() -> None:
    asyncio.run(_checkpoints())


async def _checkpoints() -> None:
    clock = ManualClock(START)
    w = World(clock)
    install(w.kube, facts(), clock.now())
    ref = model.reference(1)
    await w.keeper.once()
    first = w.stored(ref)["asOf"]
    clock.set(START + timedelta(minutes=5))
    assert await w.keeper.once() == 0  # no pod, no change: not a checkpoint yet
    clock.set(START + timedelta(minutes=10))
    assert await w.keeper.once() == 1  # 600 s after the last write
    assert w.stored(ref)["asOf"] != first
    assert w.stored(ref)["bookedGpuSeconds"] == 4 * 600
    # The old leader counted on to minute 12; a new one counts from the record's asOf
    # (minute 10): the two minutes are counted twice, never lost.
    clock.set(START + timedelta(minutes=12))
    await w.keeper.once()
    other = World(clock, w.kube)
    clock.set(START + timedelta(minutes=20))
    await other.keeper.once()
    assert other.counter("booked") == 4 * 600
    assert w.counter("booked") + other.counter("booked") == 4 * 22 * 60


def test_a_write_carries_the_phase_and_a_phase_change_is_written() -> None:
    asyncio.run(_phases())


async def _phases() -> None:
    clock = ManualClock(START - timedelta(minutes=1))
    w = World(clock)
    install(w.kube, facts(), clock.now())
    ref = model.reference(1)
    await w.keeper.once()  # upcoming, nothing to write
    clock.set(START + timedelta(minutes=1))
    assert await w.keeper.once() == 1
    status = w.kube.read(GPU_RESERVATIONS, ref, NS)["status"]
    # The display values with it: this write may be the first status the object has.
    assert (status["phase"], status["usedGpus"]) == ("Open", 0)
    # The booking is cancelled (a spec write whose status write may have lost its race
    # to ours): the next pass writes the new phase, whatever the record.
    obj = w.kube.read(GPU_RESERVATIONS, ref, NS)
    obj["spec"]["state"] = "cancelled"
    obj["status"]["phase"] = "Open"
    w.kube.add(GPU_RESERVATIONS, obj, NS)
    clock.set(START + timedelta(minutes=1, seconds=5))
    assert await w.keeper.once() == 1
    assert w.kube.read(GPU_RESERVATIONS, ref, NS)["status"]["phase"] == "Cancelled"


def test_changes_of_a_burst_share_one_pass_when_the_keeper_gathers() -> None:
    """With ``gather_s``, the changes that follow the one that woke the keeper share its
    pass; without it, the first has a pass of its own."""

    async def scenario(gather_s: float) -> list[bool]:
        w = World(ManualClock(START))
        w.keeper = UsageKeeper(
            w.kube,
            NS,
            w.clock,
            w.reservations,
            lambda: True,
            UsageMetrics(CollectorRegistry()),
            UsageSettings(interval_s=30, checkpoint_s=600),
            gather_s=gather_s,
        )
        passes: list[bool] = []

        async def once(*, full: bool = True) -> int:
            passes.append(full)
            return 0

        w.keeper.once = once  # type: ignore[method-assign]
        task = asyncio.create_task(w.keeper.run())
        try:
            for _ in range(20):
                await asyncio.sleep(0)
            w.keeper.reservation_changed("k1", None, GPUReservation(facts(1)))
            for _ in range(20):
                await asyncio.sleep(0)
            w.keeper.reservation_changed("k2", None, GPUReservation(facts(2)))
            await asyncio.sleep(gather_s + 0.05)
            return passes
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    assert asyncio.run(scenario(0.05)) == [True, False]
    assert asyncio.run(scenario(0.0)) == [True, False, False]
