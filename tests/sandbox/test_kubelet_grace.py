"""The emulated kubelet honours a grace period shortened by a repeat delete.

A pod deleted gracefully and then deleted again with a shorter grace gets an earlier
``deletionTimestamp`` and a lower ``deletionGracePeriodSeconds`` from the API server; a
real kubelet then kills it sooner (its effective grace period only ever decreases:
``calculateEffectiveGracePeriod`` in pod_workers.go). The kubelet is driven pass by pass
on a ``ManualClock`` with a recording gateway, and once end to end against the API
emulator (grace periods of a second there, on the wall clock).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sandbox.cluster.kubelet import Kubelet
from sandbox.cluster.passes import cache
from shared.clock import ManualClock, format_utc
from shared.errors import NotFound
from shared.gateway import Gateway
from shared.resources import NODES, PODS
from tests.cluster.builders import node, pod
from tests.cluster.running import cluster_gateway

pytestmark = [
    pytest.mark.anyio,
    # see tests/admission/test_emulator.py: the emulator leaks a socket per error answer
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

NS = "team-a"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class DeleteRecorder:
    """The kubelet's gateway: records each DELETE with the clock's instant."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.deleted: list[tuple[str, datetime]] = []

    async def delete(self, res: Any, name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.deleted.append((name, self.clock.now()))
        return {}

    async def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}


def kubelet_on(clock: ManualClock) -> tuple[Kubelet, DeleteRecorder]:
    gateway = DeleteRecorder(clock)
    pods = cache(gateway, PODS, clock)  # type: ignore[arg-type]
    nodes = cache(gateway, NODES, clock)  # type: ignore[arg-type]
    nodes.items = {"n1": node("n1")}
    return Kubelet(gateway, clock, pods, nodes), gateway  # type: ignore[arg-type]


def terminating(grace: int, since: datetime) -> dict[str, Any]:
    """The running pod ``p`` as the API shows it after a delete with ``grace`` at ``since``."""
    p = pod("p", node_name="n1", phase="Running")
    p["metadata"]["deletionTimestamp"] = format_utc(since + timedelta(seconds=grace))
    p["metadata"]["deletionGracePeriodSeconds"] = grace
    return p


async def sync(kubelet: Kubelet, clock: ManualClock, shown: dict[str, Any]) -> None:
    """One kubelet pass over the cache showing ``shown``; then its timer waits on the clock."""
    kubelet._pods.items = {f"{NS}/p": shown}
    await kubelet.run_once()
    for _ in range(100):
        if clock.pending_sleepers() == 1:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{clock.pending_sleepers()} timers wait on the clock, not one")


async def test_kubelet_removes_sooner_when_a_repeat_delete_shortens_the_grace() -> None:
    """Rule: deleted with grace 3600, then again with grace 1 ten seconds later, the pod
    is removed one second after the kubelet sees the second delete."""
    clock = ManualClock(T0)
    kubelet, gateway = kubelet_on(clock)
    await sync(kubelet, clock, terminating(3600, T0))
    await clock.advance(10)
    assert gateway.deleted == []
    await sync(kubelet, clock, terminating(1, clock.now()))
    await clock.advance(0.9)
    assert gateway.deleted == []
    await clock.advance(0.1)
    assert gateway.deleted == [("p", T0 + timedelta(seconds=11))]
    await clock.advance(3600)
    assert gateway.deleted == [("p", T0 + timedelta(seconds=11))]  # the old timer is gone


async def test_kubelet_never_puts_a_removal_off() -> None:
    """Rule: later passes (now plus the same grace is later each time) and a longer grace
    (which the API would not even take) leave the first deadline as it was."""
    clock = ManualClock(T0)
    kubelet, gateway = kubelet_on(clock)
    await sync(kubelet, clock, terminating(1, T0))
    await clock.advance(0.5)
    await sync(kubelet, clock, terminating(1, T0))
    await sync(kubelet, clock, terminating(3600, T0))
    await clock.advance(0.5)
    assert gateway.deleted == [("p", T0 + timedelta(seconds=1))]


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with cluster_gateway(tmp_path, NS) as client:
        await client.create(NODES, node("n1"))
        yield client


async def running_pod(gateway: Gateway) -> None:
    """Create ``p`` on node ``n1`` and wait until the kubelet runs it."""
    created = pod("p", node_name="n1")
    del created["status"], created["metadata"]["uid"]
    await gateway.create(PODS, created, NS)
    deadline = asyncio.get_running_loop().time() + 30
    while (await gateway.get(PODS, "p", NS)).get("status", {}).get("phase") != "Running":
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)


async def seconds_until_gone(gateway: Gateway, bound: float) -> float:
    """Wall seconds until ``p`` is gone from the API (failing after ``bound``)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        try:
            await gateway.get(PODS, "p", NS)
        except NotFound:
            return loop.time() - start
        assert loop.time() - start < bound, "the pod is still there"
        await asyncio.sleep(0.05)


async def test_kubelet_honours_a_shortened_grace_end_to_end(gateway: Gateway) -> None:
    """Rule: a running pod deleted with grace 3600 and then with grace 1 is gone from
    the API within a couple of seconds."""
    await running_pod(gateway)
    await gateway.delete(PODS, "p", NS, grace_period_s=3600)
    await asyncio.sleep(0.2)  # the kubelet takes the long grace first
    await gateway.delete(PODS, "p", NS, grace_period_s=1)
    shortened = (await gateway.get(PODS, "p", NS))["metadata"]
    assert shortened["deletionGracePeriodSeconds"] == 1
    assert await seconds_until_gone(gateway, 5) >= 0.5


async def test_kubelet_keeps_the_short_grace_after_a_longer_repeat_end_to_end(
    gateway: Gateway,
) -> None:
    """Rule: a running pod deleted with grace 1 and then with grace 3600 is still gone
    within a couple of seconds."""
    await running_pod(gateway)
    await gateway.delete(PODS, "p", NS, grace_period_s=1)
    await gateway.delete(PODS, "p", NS, grace_period_s=3600)
    assert await seconds_until_gone(gateway, 5) >= 0.5
