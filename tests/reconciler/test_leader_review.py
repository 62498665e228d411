"""Leader election defects found in review: a renew that hangs must not keep a leader."""

from __future__ import annotations

import asyncio
from typing import Any

from reconciler.base.settings import LeaderSettings
from reconciler.leader import Elector
from shared.clock import ManualClock, utc
from shared.resources import Resource
from tests.fakekube import FakeKube

T0 = utc(2026, 1, 5, 9)
LEASE = LeaderSettings(enabled=True, lease_s=15.0, renew_s=5.0)


class Stalling:
    """One replica's view of a shared fake apiserver; its reads can hang."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        self.stalled = False
        self._never = asyncio.Event()

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        if self.stalled:
            await self._never.wait()
        return await self.kube.get(res, name, namespace)

    async def replace(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return await self.kube.replace(*args, **kwargs)

    async def create(self, *args: Any, **kwargs: Any) -> object:
        return await self.kube.create(*args, **kwargs)


def test_a_leader_whose_renew_hangs_steps_down_before_a_standby_may_take_over() -> None:
    async def scenario() -> None:
        kube, clock = FakeKube(), ManualClock(T0)
        gateways = {"a": Stalling(kube), "b": Stalling(kube)}
        log: list[tuple[str, bool, float]] = []

        def elector(name: str) -> Elector:
            def changed(leading: bool) -> None:
                log.append((name, leading, (clock.now() - T0).total_seconds()))

            return Elector(gateways[name], "ns", name, clock, LEASE, changed)

        a, b = elector("a"), elector("b")
        task_a = asyncio.create_task(a.run())
        await clock.advance(0)
        assert a.is_leader
        gateways["a"].stalled = True  # a's next read never answers
        task_b = asyncio.create_task(b.run())
        both = False
        for _ in range(60):
            await clock.advance(0.5)
            both = both or (a.is_leader and b.is_leader)
        assert [a.is_leader, b.is_leader] == [False, True]
        assert not both
        down = next(t for who, leading, t in log if who == "a" and not leading)
        assert down <= LEASE.lease_s - LEASE.renew_s + 0.01
        for task in (task_a, task_b):
            task.cancel()
        await asyncio.gather(task_a, task_b, return_exceptions=True)

    asyncio.run(scenario())


def test_a_leader_renews_before_its_deadline_when_renew_is_more_than_half_the_lease() -> None:
    async def scenario() -> None:
        kube, clock = FakeKube(), ManualClock(T0)
        flips: list[bool] = []
        a = Elector(kube, "ns", "a", clock, LeaderSettings(True, 8.0, 5.0), flips.append)
        task = asyncio.create_task(a.run())
        for _ in range(120):
            await clock.advance(0.5)
        assert flips == [True]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
