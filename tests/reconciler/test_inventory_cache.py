"""The leader's inventory accessor: built from the node and pod caches, memoised."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from reconciler.base.caches import Caches
from reconciler.base.inventory import placement_of
from reconciler.base.pods import project_pod
from reconciler.base.settings import load
from shared import vocab
from shared.clock import ManualClock
from shared.logs import fields_of
from shared.policy.inventory import PodPlacement
from shared.policy.matching import MatchRules
from shared.resources import NODES, PODS
from tests.cluster.builders import node, pod, reservation_taint
from tests.fakekube import FakeKube
from tests.reconciler.builders import NS, START, relisting

ENV = {"RESERVATION_API_URL": "http://app", "RESERVATION_API_KEY": "k", "POD_NAMESPACE": NS}


def gpu_node(name: str, gpus: int = 8, **kwargs: Any) -> dict[str, Any]:
    return node(name, gpus=gpus, taints=[reservation_taint("h100")], **kwargs)


def gpu_pod(name: str, gpus: int, node_name: str | None, phase: str = "Running") -> dict[str, Any]:
    obj = pod(name, gpus=gpus, node_name=node_name, phase=phase)
    obj["metadata"]["labels"] = {vocab.GPU_CLASS_LABEL: "h100"}
    return obj


class World:
    def __init__(self, classes: set[str] | None = None) -> None:
        self.kube = FakeKube()
        self.classes = classes
        settings, _ = load(ENV)
        self.caches = Caches(
            relisting(self.kube), settings, ManualClock(START), lambda: self.classes
        )

    async def sync(self) -> None:
        await self.caches.nodes.relist()
        await self.caches.pods.relist()


def test_unknown_until_both_caches_listed_then_counted() -> None:
    async def scenario() -> None:
        w = World({"h100", "a100"})
        w.kube.add(NODES, gpu_node("n1"))
        w.kube.add(NODES, gpu_node("n2", gpus=4))
        w.kube.add(PODS, gpu_pod("p1", 3, "n1"), "team-a")
        w.kube.add(PODS, gpu_pod("done", 4, "n2", phase="Succeeded"), "team-a")
        assert w.caches.inventory() is None
        await w.caches.nodes.relist()
        assert w.caches.inventory() is None  # pods not listed yet: no "all free" guess
        await w.caches.pods.relist()
        inv = w.caches.inventory()
        assert inv is not None
        cap = inv.capacity("h100")
        assert cap is not None
        assert (cap.total, cap.used, cap.free, cap.largest_block) == (
            12,
            3,
            9,
            5,
        )
        zero = inv.capacity("a100")
        assert zero is not None
        assert zero.total == 0
        assert inv.capacity("l40s") is None

    asyncio.run(scenario())


def test_memoised_until_a_node_or_a_placement_or_the_class_list_changes() -> None:
    async def scenario() -> None:
        w = World({"h100"})
        w.kube.add(NODES, gpu_node("n1"))
        w.kube.add(PODS, gpu_pod("p1", 1, None, phase="Pending"), "team-a")
        await w.sync()
        first = w.caches.inventory()
        assert first is not None
        assert w.caches.inventory() is first
        # A change to the pod that does not move GPUs keeps the memo.
        w.kube.objects[(PODS.plural, "team-a", "p1")]["metadata"]["annotations"] = {"x": "y"}
        await w.caches.pods.relist()
        assert w.caches.inventory() is first
        # Bound: the placement changed.
        w.kube.objects[(PODS.plural, "team-a", "p1")]["spec"]["nodeName"] = "n1"
        await w.caches.pods.relist()
        second = w.caches.inventory()
        assert second is not first
        assert second is not None
        cap = second.capacity("h100")
        assert cap is not None
        assert cap.used == 1
        # The node goes NotReady: it leaves the total at once.
        w.kube.objects[(NODES.plural, None, "n1")]["status"]["conditions"][0]["status"] = "False"
        await w.caches.nodes.relist()
        third = w.caches.inventory()
        assert third is not None
        assert third.excluded == {"n1"}
        cap = third.capacity("h100")
        assert cap is not None
        assert cap.total == 0
        # The app's class list grows: the new class is present as zero.
        w.classes = {"h100", "a100"}
        fourth = w.caches.inventory()
        assert fourth is not None
        assert fourth.capacity("a100") is not None

    asyncio.run(scenario())


def test_reset_forgets_the_inventory() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(NODES, gpu_node("n1"))
        await w.sync()
        assert w.caches.inventory() is not None
        w.caches.reset()
        assert w.caches.inventory() is None

    asyncio.run(scenario())


def test_node_changes_are_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="reconciler.base.inventory")

    async def scenario() -> None:
        w = World()
        bad = gpu_node("bad")
        bad["metadata"]["annotations"] = {vocab.FORCE_NODE_CAPACITY: "-3"}
        w.kube.add(NODES, bad)
        forced = gpu_node("forced")
        forced["metadata"]["annotations"] = {vocab.FORCE_NODE_CAPACITY: "0"}
        w.kube.add(NODES, forced)
        w.kube.add(NODES, gpu_node("down", ready="False"))
        junk = gpu_node("junk")
        junk["status"]["allocatable"][vocab.GPU_RESOURCE] = "lots"
        w.kube.add(NODES, junk)
        await w.sync()
        await w.sync()  # nothing changed: nothing logged again

    asyncio.run(scenario())
    seen = sorted(
        (r.getMessage(), fields_of(r)["node"], r.levelname)
        for r in caplog.records
        if r.name == "reconciler.base.inventory"
    )
    assert seen == [
        ("k8s.node_allocatable_invalid", "junk", "WARNING"),
        ("k8s.node_capacity_forced", "forced", "INFO"),
        ("k8s.node_capacity_forced_invalid", "bad", "WARNING"),
        ("k8s.node_excluded", "down", "DEBUG"),
    ]


def test_placement_of_a_pod_view() -> None:
    rules = MatchRules()
    running = project_pod(gpu_pod("a", 2, "n1"), rules)
    assert placement_of(running) == PodPlacement("n1", 2, True)
    finished = project_pod(gpu_pod("b", 2, "n1", phase="Failed"), rules)
    assert placement_of(finished) == PodPlacement("n1", 2, False)
    terminating = gpu_pod("c", 2, "n1")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-05T09:00:00Z"
    assert placement_of(project_pod(terminating, rules)) == PodPlacement("n1", 2, False)
    assert placement_of(project_pod(gpu_pod("d", 1, None, "Pending"), rules)) == PodPlacement(
        None, 1, False
    )
    assert placement_of(None) is None


def test_the_per_node_sums_kept_from_pod_events_match_a_full_rebuild() -> None:
    from random import Random

    from shared.policy.inventory import build_inventory

    async def scenario() -> None:
        w = World({"h100"})
        for name in ("n1", "n2", "n3"):
            w.kube.add(NODES, gpu_node(name))
        rand = Random(11)
        for step in range(60):
            name = f"p{rand.randrange(8)}"
            key = (PODS.plural, "team-a", name)
            choice = rand.random()
            if key in w.kube.objects and choice < 0.3:
                del w.kube.objects[key]
            elif key in w.kube.objects and choice < 0.5:
                w.kube.objects[key]["metadata"]["deletionTimestamp"] = "2026-01-05T09:00:00Z"
            else:
                on = rand.choice([None, "n1", "n2", "n3", "gone"])
                phase = rand.choice(["Pending", "Running", "Succeeded"])
                w.kube.objects.pop(key, None)
                w.kube.add(PODS, gpu_pod(name, rand.randrange(1, 4), on, phase), "team-a")
            await w.sync()
            views = w.caches.pods.items.values()
            placements = [p for p in map(placement_of, views) if p is not None]
            expected = build_inventory(w.caches.nodes.items.values(), placements, {"h100"})
            assert w.caches.inventory() == expected, step

    asyncio.run(scenario())
