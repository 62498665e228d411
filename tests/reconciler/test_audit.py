"""The capacity audit on the leader: log, metrics, the Lease Events, guard 4's deficit."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from reconciler.base.caches import Caches
from reconciler.base.metrics import Metrics
from reconciler.base.settings import load
from reconciler.capacity.audit import CapacityAuditor
from shared import vocab
from shared.appclient import GpuClass
from shared.clock import ManualClock
from shared.logs import fields_of
from shared.resources import EVENTS, LEASES, NODES
from tests.cluster.builders import node, reservation_taint
from tests.fakekube import FakeKube
from tests.reconciler.builders import NS, START, relisting

ENV = {"RESERVATION_API_URL": "http://app", "RESERVATION_API_KEY": "k", "POD_NAMESPACE": NS}
H100 = GpuClass(id=1, name="H100", label_value="h100", total_gpus=12)


class World:
    def __init__(self, classes: dict[int, GpuClass] | None) -> None:
        self.kube = FakeKube()
        self.classes = classes
        self.metrics = Metrics()
        settings, _ = load(ENV)
        labels = lambda: {c.label_value for c in (self.classes or {}).values() if c.label_value}  # noqa: E731
        self.caches = Caches(relisting(self.kube), settings, ManualClock(START), labels)
        self.auditor = CapacityAuditor(
            self.kube, NS, ManualClock(START), self.metrics, self.caches.inventory,
            lambda: self.classes, 3600.0,
        )  # fmt: skip
        for i in (1, 2, 3):
            self.kube.add(NODES, node(f"h100-r{i}", gpus=4, taints=[reservation_taint()]))

    async def sync(self) -> None:
        await self.caches.nodes.relist()
        await self.caches.pods.relist()

    def force(self, name: str, value: str | None) -> None:
        meta = self.kube.objects[(NODES.plural, None, name)]["metadata"]
        meta["annotations"] = {} if value is None else {vocab.FORCE_NODE_CAPACITY: value}

    def sample(self, metric: str, cls: str = "h100") -> float | None:
        return self.metrics.registry.get_sample_value(
            f"gpu_reservation_{metric}", {"gpu_class": cls}
        )

    def events(self) -> list[dict[str, Any]]:
        return self.kube.items(EVENTS, NS)


def test_overcommit_is_logged_exported_and_shown_on_the_lease_then_cleared(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="reconciler.capacity.audit")

    async def scenario(w: World) -> None:
        body = {"metadata": {"name": vocab.LEADER_LEASE_NAME}, "spec": {}}
        lease = (await w.kube.create(LEASES, body, NS)).body
        await w.sync()
        assert (await w.auditor.once())["h100"].mismatch is False
        assert w.events() == []
        w.force("h100-r1", "0")
        await w.sync()
        assert w.auditor.deficit("h100") == 4  # live: guard 4 sees it before the audit
        assert w.auditor.deficits() == {"h100": 4}
        rows = await w.auditor.once()
        assert (rows["h100"].app, rows["h100"].physical, rows["h100"].deficit) == (12, 8, 4)
        assert (w.sample("capacity_physical_gpus"), w.sample("capacity_app_gpus")) == (8, 12)
        assert w.sample("capacity_deficit_gpus") == 4
        [event] = w.events()
        assert (event["reason"], event["type"]) == (vocab.AUDIT_REASON_OVERCOMMITTED, "Warning")
        assert event["involvedObject"]["uid"] == lease["metadata"]["uid"]
        assert event["involvedObject"]["kind"] == "Lease"
        assert "12" in event["message"]
        assert "4 short" in event["message"]
        await w.auditor.once()  # still overcommitted: said again, as a repeat of it
        [again] = w.events()
        assert again["metadata"]["name"] == event["metadata"]["name"]
        assert again["count"] == 2
        assert again["firstTimestamp"] == event["firstTimestamp"]
        w.force("h100-r1", None)
        await w.sync()
        assert w.auditor.deficit("h100") == 0
        assert w.auditor.deficits() == {}
        await w.auditor.once()
        reasons = sorted(e["reason"] for e in w.events())
        assert reasons == [vocab.AUDIT_REASON_OVERCOMMITTED, vocab.AUDIT_REASON_RESTORED]
        assert w.sample("capacity_deficit_gpus") == 0

    asyncio.run(scenario(World({1: H100})))
    seen = [(r.getMessage(), fields_of(r)) for r in caplog.records]
    mismatches = [f for e, f in seen if e == "capacity_audit.mismatch"]
    assert len(mismatches) == 2
    assert mismatches[0] == {
        "gpu_class": "h100", "app": 12, "physical": 8, "deficit": 4, "overcommitted": True,
    }  # fmt: skip
    assert [e for e, _ in seen if e.startswith("capacity_audit.")] == [
        "capacity_audit.done",
        "capacity_audit.mismatch",
        "capacity_audit.paused",
        "capacity_audit.done",
        "capacity_audit.mismatch",
        "capacity_audit.done",
        "capacity_audit.resumed",
        "capacity_audit.done",
    ]


def test_more_physical_than_the_app_counts_is_a_mismatch_but_no_overcommit() -> None:
    async def scenario(w: World) -> None:
        await w.sync()
        rows = await w.auditor.once()
        assert rows["h100"].mismatch
        assert not rows["h100"].overcommitted
        assert w.events() == []

    small = GpuClass(id=1, name="H100", label_value="h100", total_gpus=12, effective_gpus_today=8)
    asyncio.run(scenario(World({1: small})))


def test_no_audit_and_no_deficit_before_the_class_list_and_the_inventory() -> None:
    async def scenario(w: World) -> None:
        assert await w.auditor.once() == {}
        assert w.auditor.deficit("h100") == 0
        await w.sync()
        assert await w.auditor.once() == {}  # the class list is still unknown

    asyncio.run(scenario(World(None)))


def test_without_a_lease_the_event_is_still_written_by_name() -> None:
    async def scenario(w: World) -> None:
        w.force("h100-r2", "1")
        await w.sync()
        await w.auditor.once()
        [event] = w.events()
        assert event["involvedObject"]["name"] == vocab.LEADER_LEASE_NAME
        assert "uid" not in event["involvedObject"]

    asyncio.run(scenario(World({1: H100})))


def test_the_live_inventory_is_exported_at_each_scrape() -> None:
    async def scenario(w: World) -> None:
        w.metrics.watch_inventory(w.caches.inventory)
        assert b"inventory_gpus{" not in w.metrics.render()
        await w.sync()
        total = {"gpu_class": "h100", "figure": "total"}
        assert w.metrics.registry.get_sample_value("gpu_reservation_inventory_gpus", total) == 12
        w.kube.objects[(NODES.plural, None, "h100-r3")]["spec"]["unschedulable"] = True
        await w.caches.nodes.relist()
        assert w.metrics.registry.get_sample_value("gpu_reservation_inventory_gpus", total) == 8

    asyncio.run(scenario(World({1: H100})))
