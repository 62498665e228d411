"""The scheduler's pass sends its API calls concurrently, bounded, and waits for all.

A stub gateway holds every call until the test releases it, so what is in flight at
once is observed exactly (no timing involved).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox.cluster import scheduler as scheduler_module
from sandbox.cluster.passes import cache
from sandbox.cluster.scheduler import Scheduler
from shared.clock import ManualClock
from shared.errors import ServerError
from shared.resources import NODES, PODS
from tests.cluster.builders import node, pod, reservation_taint, reservation_toleration

pytestmark = pytest.mark.anyio


class HeldGateway:
    """Records each call and holds it until ``release``; ``fail`` makes patches fail."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.in_flight = 0
        self.most = 0
        self.gate = asyncio.Event()
        self.fail = fail

    async def _call(self, what: str, name: str) -> dict[str, Any]:
        self.calls.append((what, name))
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await self.gate.wait()
        finally:
            self.in_flight -= 1
        if self.fail and what == "patch":
            raise ServerError(500, "injected")
        return {}

    async def request(self, method: str, path: str, query: Any, body: Any) -> dict[str, Any]:
        return await self._call("bind", body["metadata"]["name"])

    async def patch(self, res: Any, name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return await self._call("patch", name)

    async def create(self, res: Any, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return await self._call("event", body["involvedObject"]["name"])


def loaded(gateway: HeldGateway, pods: list[dict[str, Any]]) -> Scheduler:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    pod_cache = cache(gateway, PODS, clock)  # type: ignore[arg-type]
    node_cache = cache(gateway, NODES, clock)  # type: ignore[arg-type]
    node_cache.items = {"h100-1": node("h100-1", gpus=8, taints=[reservation_taint()])}
    pod_cache.items = {f"team-a/{p['metadata']['name']}": p for p in pods}
    return Scheduler(gateway, clock, pod_cache, node_cache)  # type: ignore[arg-type]


async def until(check: Any) -> None:
    """Let the loop run until ``check`` holds (every step is immediate: the stub's calls
    only wait for the gate)."""
    for _ in range(10_000):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("the pass never got there")


async def test_a_pass_sends_its_verdicts_and_bindings_at_once_and_waits_for_them() -> None:
    gateway = HeldGateway()
    waiting = [pod(f"w{i}", gpus=1) for i in range(5)]
    fitting = [pod(f"t{i}", gpus=1, tolerations=[reservation_toleration()]) for i in range(3)]
    scheduler = loaded(gateway, waiting + fitting)
    task = asyncio.create_task(scheduler.run_once())
    await until(lambda: gateway.in_flight == 8)  # every call of the pass is under way
    assert not task.done()
    gateway.gate.set()
    await task
    assert gateway.most == 8
    sent = sorted(gateway.calls)
    assert [c for c in sent if c[0] == "bind"] == [("bind", f"t{i}") for i in range(3)]
    assert [c for c in sent if c[0] == "patch"] == [("patch", f"w{i}") for i in range(5)]
    # each verdict and each binding is followed by its Event
    assert len([c for c in sent if c[0] == "event"]) == 8


async def test_a_pass_sends_every_binding_and_verdict_before_any_event() -> None:
    """The Events trail the calls that decide each pod's fate, as kube-scheduler's event
    recorder sends them apart: the last verdict does not wait behind earlier Events."""
    gateway = HeldGateway()
    gateway.gate.set()
    waiting = [pod(f"w{i}", gpus=1) for i in range(5)]
    fitting = [pod(f"t{i}", gpus=1, tolerations=[reservation_toleration()]) for i in range(2)]
    await loaded(gateway, waiting + fitting).run_once()
    kinds = [what for what, _ in gateway.calls]
    assert sorted(kinds[:7]) == ["bind"] * 2 + ["patch"] * 5
    assert kinds[7:] == ["event"] * 7
    assert sorted(n for what, n in gateway.calls if what == "event") == sorted(
        [f"w{i}" for i in range(5)] + [f"t{i}" for i in range(2)]
    )


async def test_the_calls_in_flight_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler_module, "API_CONCURRENCY", 3)
    gateway = HeldGateway()
    scheduler = loaded(gateway, [pod(f"w{i}", gpus=1) for i in range(7)])
    task = asyncio.create_task(scheduler.run_once())
    await until(lambda: gateway.in_flight == 3)
    for _ in range(50):
        await asyncio.sleep(0)
    assert gateway.in_flight == 3
    gateway.gate.set()
    await task
    assert gateway.most == 3
    assert len(gateway.calls) == 14  # seven conditions, seven Events


async def test_an_api_error_ends_the_pass_only_after_every_call_ended() -> None:
    gateway = HeldGateway(fail=True)
    scheduler = loaded(gateway, [pod(f"w{i}", gpus=1) for i in range(4)])
    task = asyncio.create_task(scheduler.run_once())
    await until(lambda: gateway.in_flight == 4)
    gateway.gate.set()
    with pytest.raises(ServerError):
        await task
    assert gateway.in_flight == 0
    assert sorted(gateway.calls) == [("patch", f"w{i}") for i in range(4)]


async def test_a_verdict_is_not_written_again_before_the_cache_shows_the_write() -> None:
    gateway = HeldGateway()
    gateway.gate.set()
    waiting = pod("w", gpus=1)
    waiting["metadata"]["resourceVersion"] = "7"
    scheduler = loaded(gateway, [waiting])
    await scheduler.run_once()
    await scheduler.run_once()  # the cache still holds resourceVersion 7
    assert gateway.calls == [("patch", "w"), ("event", "w")]
    # Someone else rewrote the pod meanwhile (a newer version without our condition):
    # the scheduler judges it again and says so.
    waiting["metadata"]["resourceVersion"] = "9"
    await scheduler.run_once()
    assert gateway.calls[2:] == [("patch", "w"), ("event", "w")]


async def test_a_cancel_that_arrives_with_a_wake_up_ends_the_loop() -> None:
    gateway = HeldGateway()
    gateway.gate.set()
    scheduler = loaded(gateway, [])
    scheduler._pods.synced.set()
    scheduler._nodes.synced.set()
    task = asyncio.create_task(scheduler.run())
    for _ in range(20):  # the empty pass ends; the loop waits for a change
        await asyncio.sleep(0)
    scheduler._wake.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
