"""The reserved queue's pass costs what changed: counted (passes, pods routed), never timed.

A pod event re-routes the pods touched; a reservation whose holds alone moved re-routes
its owner's waiting pods; the first sync, the tick, a window start and a facts change
are full passes. The depth gauges stay what a full pass would count."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from reconciler.admission.announce import Admitted
from reconciler.admission.step import Admission
from reconciler.admission.waiting import Knowledge
from reconciler.base.metrics import QueueMetrics
from reconciler.queue.admit import Admitter
from shared import vocab
from shared.resources import GPU_RESERVATIONS, PODS
from tests.reconciler.builders import NS, START
from tests.reconciler.test_admit import BEFORE, World, facts, gpu_pod

OPEN = START + timedelta(minutes=1)


class Queue(World):
    """A world whose queue reports to a registry the test reads."""

    def __init__(self, now: Any = OPEN) -> None:
        super().__init__(now=now)
        self.metrics = QueueMetrics(CollectorRegistry())
        admission = Admission(
            self.kube, self.caches, self.settings, self.clock, self.metrics,
            Knowledge(lambda: True, lambda: {"a100"}),
        )  # fmt: skip
        self.admitter = Admitter(admission, self.caches, self.settings, self.clock, self.metrics)

    def depth(self) -> dict[str, float]:
        samples = next(iter(self.metrics.depth.collect())).samples
        return {s.labels["wait"]: s.value for s in samples if s.value}

    async def touched(self) -> list[Any]:
        """Sync the caches, then one pass over what the queue was touched by."""
        await self.sync()
        return await self.admitter.once(self.admitter.touched.take_all())

    def admitted(self, name: str, namespace: str = "alice") -> bool:
        raw = self.kube.objects[(PODS.plural, namespace, name)]
        return vocab.BOOKING_REFERENCE in (raw["metadata"].get("annotations") or {})


def bob_pod(name: str) -> dict[str, Any]:
    """A waiting pod of another owner (bob holds no booking: it goes nowhere)."""
    raw = gpu_pod(name)
    raw["metadata"]["namespace"] = "bob"
    raw["metadata"]["uid"] = f"uid-bob-{name}"
    return raw


async def full_booking(waiting: int = 3, others: int = 4) -> Queue:
    """alice's 1-GPU booking held by ``first``, ``waiting`` of her pods queued behind
    it, ``others`` of bob's pods waiting too; the first full pass made."""
    w = Queue()
    w.book(facts(gpus=1))
    w.kube.add(PODS, gpu_pod("first", gated=False))
    await w.step()
    assert w.admitted("first")
    for i in range(waiting):
        w.kube.add(PODS, gpu_pod(f"wait-{i}"))
    for i in range(others):
        w.kube.add(PODS, bob_pod(f"b-{i}"), "bob")
    await w.sync()
    assert w.admitter.touched.take_all() is None  # never drained: the first pass is full
    await w.admitter.once()
    await w.sync()
    w.admitter.touched.take_all()  # the pass's own announcement mark
    return w


def test_a_pod_event_re_routes_the_pods_touched_only() -> None:
    async def scenario() -> None:
        w = await full_booking()
        routed, passes = w.admitter.routed, w.admitter.passes
        w.kube.add(PODS, bob_pod("late"), "bob")
        w.kube.add(PODS, gpu_pod("wait-late"))
        assert await w.touched() == []
        assert w.admitter.passes == passes + 1
        assert w.admitter.routed == routed + 2  # not the 3 + 4 waiting before them
        full = w.kube.events(vocab.REASON_RESERVATION_FULL)
        assert {e["involvedObject"]["name"] for e in full} == {f"wait-{i}" for i in range(3)} | {
            "wait-late"
        }
        assert "first" in full[-1]["message"]  # the holder named, from the index

    asyncio.run(scenario())


def test_a_holder_leaving_admits_a_waiting_pod_of_its_booking_in_a_pass_over_its_owner() -> None:
    async def scenario() -> None:
        w = await full_booking(waiting=3, others=4)
        routed = w.admitter.routed
        del w.kube.objects[(PODS.plural, "alice", "first")]
        await w.sync()
        # The holder's own event: routed nobody (it waits no more), admits nobody (its
        # hold is still in the ledger: the booking is behind until upkeep ran).
        assert await w.admitter.once(w.admitter.touched.take_all()) == []
        assert w.admitter.routed == routed
        assert await w.caches.keeper.once() == ["res-1"]  # upkeep frees the hold
        await w.sync()
        touched = w.admitter.touched.take_all()
        assert touched == (set(), {f"{NS}/res-1"})  # holds alone moved: not a full pass
        got = await w.admitter.once(touched)
        assert [a.pod.name for a in got] == ["wait-0"]  # the oldest first
        assert w.admitter.routed == routed + 3  # alice's waiting pods, not bob's

    asyncio.run(scenario())


def test_a_holder_leaving_admits_at_once_without_waiting_for_the_tick() -> None:
    async def scenario() -> None:
        w = await full_booking(waiting=1, others=0)
        task = asyncio.create_task(w.admitter.run(300.0))
        try:
            await settle()
            assert not w.admitted("wait-0")
            del w.kube.objects[(PODS.plural, "alice", "first")]
            await w.caches.pods.relist()
            await w.caches.keeper.once()
            await w.caches.reservations.relist()
            await settle()  # the clock never moves: no tick, no window start
            assert w.admitted("wait-0")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


async def settle() -> None:
    for _ in range(100):
        await asyncio.sleep(0)


def test_a_window_start_is_a_full_pass_that_admits_all_its_waiting_pods() -> None:
    async def scenario() -> None:
        w = Queue(now=BEFORE)
        w.book(facts(gpus=4))
        for i in range(4):
            w.kube.add(PODS, gpu_pod(f"p{i}"))
        w.kube.add(PODS, bob_pod("b"), "bob")
        await w.sync()
        task = asyncio.create_task(w.admitter.run(3600.0))
        try:
            await settle()
            assert w.depth() == {"opens_later": 4}
            routed = w.admitter.routed
            await w.clock.advance((START - BEFORE).total_seconds())
            for _ in range(20):
                await settle()
                if all(w.admitted(f"p{i}") for i in range(4)):
                    break
            assert all(w.admitted(f"p{i}") for i in range(4))
            assert w.admitter.routed >= routed + 5  # the timer's pass: every waiting pod
            await w.sync()
            await settle()
            assert w.depth() == {}
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


def test_a_pass_that_runs_past_a_window_start_is_followed_by_its_full_pass() -> None:
    async def scenario() -> None:
        w = Queue(now=BEFORE)
        w.book(facts(gpus=4))
        for i in range(2):
            w.kube.add(PODS, gpu_pod(f"p{i}"))
        w.kube.add(PODS, bob_pod("b"), "bob")
        await w.sync()
        passes: list[bool] = []
        once = w.admitter.once

        async def slow_once(touched: tuple[set[str], set[str]] | None = None) -> list[Admitted]:
            passes.append(touched is None)
            if touched is not None and w.clock.now() < START:
                # This pass, over bob's pod, runs until after the window start.
                await w.clock.advance((START - w.clock.now()).total_seconds() + 1.0)
            return await once(touched)

        w.admitter.once = slow_once  # type: ignore[method-assign]
        task = asyncio.create_task(w.admitter.run(3600.0))
        try:
            await settle()
            assert passes == [True]
            assert w.depth() == {"opens_later": 2}
            w.admitter.touched.touch("bob/b")
            await settle()
            assert passes == [True, False, True]  # the window start's full pass, owed
            assert all(w.admitted(f"p{i}") for i in range(2))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


def test_a_change_of_facts_is_a_full_pass_and_of_holds_alone_the_owners() -> None:
    async def scenario() -> None:
        w = await full_booking()
        res = w.ledger_of()
        key = f"{NS}/{res.name}"
        moved = replace(res, holds=(), resource_version="x")
        for listener in w.caches.reservations.listeners:
            listener(key, res, moved)
        assert w.admitter.touched.take_all() == (set(), {key})
        bigger = replace(moved, facts=replace(res.facts, gpu_count=2))
        for listener in w.caches.reservations.listeners:
            listener(key, moved, bigger)
        assert w.admitter.touched.take_all() is None

    asyncio.run(scenario())


def test_the_depth_gauges_after_passes_over_what_changed_match_a_full_count() -> None:
    async def scenario() -> None:
        w = await full_booking(waiting=3, others=2)
        assert w.depth() == {"full": 3}
        w.kube.add(PODS, gpu_pod("big", gpus=2))  # too small
        del w.kube.objects[(PODS.plural, "alice", "wait-1")]
        await w.touched()
        assert w.depth() == {"full": 2, "too_small": 1}
        leaving = gpu_pod("wait-2")
        leaving["metadata"]["deletionTimestamp"] = "2026-01-05T09:00:00Z"  # waits no more
        w.kube.add(PODS, leaving)
        await w.touched()
        assert w.depth() == {"full": 1, "too_small": 1}
        counted = w.depth()
        await w.admitter.once()  # a full pass counts afresh
        assert w.depth() == counted

    asyncio.run(scenario())


def test_a_reservation_gone_before_the_pass_is_skipped() -> None:
    async def scenario() -> None:
        w = await full_booking(waiting=1, others=0)
        got = await w.admitter.once((set(), {f"{NS}/res-404"}))
        assert got == []
        assert (GPU_RESERVATIONS.plural, NS, "res-404") not in w.kube.objects

    asyncio.run(scenario())
