"""Leader election: the pure rule, and two electors on virtual time."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from reconciler.base.settings import LeaderSettings
from reconciler.leader import Action, Elector, LeaseView, decide, format_micro, wait_seconds
from shared import vocab
from shared.clock import ManualClock, utc
from shared.resources import LEASES
from tests.fakekube import FakeKube

T0 = utc(2026, 1, 5, 9)
LEASE = LeaderSettings(enabled=True, lease_s=15.0, renew_s=5.0)


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        pytest.param(None, Action.CREATE, id="no-lease"),
        pytest.param(LeaseView("me", T0, 15), Action.RENEW, id="ours"),
        pytest.param(LeaseView(None, T0, 15), Action.TAKEOVER, id="released"),
        pytest.param(LeaseView("b", None, 15), Action.TAKEOVER, id="never-renewed"),
        pytest.param(LeaseView("b", T0 - timedelta(seconds=14), 15), Action.STANDBY, id="fresh"),
        pytest.param(LeaseView("b", T0 - timedelta(seconds=15), 15), Action.TAKEOVER, id="lapsed"),
    ],
)
def test_decide(view, expected) -> None:
    """``renewed`` stands for when this replica saw the record change (its own clock)."""
    assert decide(view, "me", T0, (view.renewed if view else None) or T0) is expected


def test_the_holders_renew_time_is_never_compared_with_our_clock() -> None:
    """Clock skew: the holder's clock is an hour behind ours, so its fresh renewTime
    looks long lapsed; what counts is when we saw the record change."""
    view = LeaseView("b", T0 - timedelta(hours=1), 15)
    assert decide(view, "me", T0, observed=T0 - timedelta(seconds=3)) is Action.STANDBY
    assert decide(view, "me", T0, observed=T0 - timedelta(seconds=15)) is Action.TAKEOVER


def test_a_standby_looks_again_when_the_lease_would_lapse() -> None:
    view = LeaseView("b", T0 - timedelta(hours=9), 15)
    seen = T0 - timedelta(seconds=13)
    assert wait_seconds(view, Action.STANDBY, T0, 5.0, seen) == pytest.approx(2.01)
    assert wait_seconds(view, Action.RENEW, T0, 5.0, seen) == 5.0


def test_micro_time_has_six_fractional_digits() -> None:
    assert format_micro(T0) == "2026-01-05T09:00:00.000000Z"


class Pair:
    """Two electors sharing one fake apiserver and one virtual clock."""

    def __init__(self) -> None:
        self.kube = FakeKube()
        self.clock = ManualClock(T0)
        self.log: list[tuple[str, bool, float]] = []
        self.a = self._elector("a")
        self.b = self._elector("b")

    def _elector(self, name: str) -> Elector:
        def changed(leading: bool) -> None:
            elapsed = (self.clock.now() - T0).total_seconds()
            self.log.append((name, leading, elapsed))

        return Elector(self.kube, "ns", name, self.clock, LEASE, changed)

    def lease(self) -> dict[str, Any]:
        return self.kube.objects[(LEASES.plural, "ns", vocab.LEADER_LEASE_NAME)]


def test_exactly_one_leads_and_a_watching_standby_takes_over_within_lease_plus_renew() -> None:
    async def scenario() -> None:
        p = Pair()
        task_a = asyncio.create_task(p.a.run())
        await p.clock.advance(0)
        task_b = asyncio.create_task(p.b.run())
        for _ in range(6):
            await p.clock.advance(5)
            assert (p.a.is_leader, p.b.is_leader) == (True, False)
        spec = p.lease()["spec"]
        assert spec["holderIdentity"] == "a"
        assert spec["leaseDurationSeconds"] == 15
        last_renew = (p.clock.now() - T0).total_seconds()
        task_a.cancel()  # "killed": no release, no more renewals
        await asyncio.gather(task_a, return_exceptions=True)
        for _ in range(40):
            await p.clock.advance(0.5)
        assert p.b.is_leader
        took_over = next(t for who, leading, t in p.log if who == "b" and leading)
        # timed from when b saw the last renewal: at most one renew period after it
        assert took_over - last_renew <= LEASE.lease_s + LEASE.renew_s + 0.1
        assert p.lease()["spec"]["holderIdentity"] == "b"
        assert p.lease()["spec"]["leaseTransitions"] == 1
        task_b.cancel()
        await asyncio.gather(task_b, return_exceptions=True)

    asyncio.run(scenario())


def test_release_lets_the_standby_take_over_at_its_next_look() -> None:
    async def scenario() -> None:
        p = Pair()
        await p.a.step()
        await p.b.step()
        assert (p.a.is_leader, p.b.is_leader) == (True, False)
        await p.a.release()
        assert p.a.is_leader is False
        await p.clock.advance(1)
        await p.b.step()
        assert p.b.is_leader

    asyncio.run(scenario())


def test_a_leader_that_cannot_renew_steps_down_before_others_may_take_over() -> None:
    async def scenario() -> None:
        p = Pair()
        await p.a.step()
        assert p.a.is_leader
        p.kube.down = True
        for _ in range(3):
            await p.clock.advance(5)
            await p.a.step()
        assert (p.a.is_leader,) == (False,)
        assert [(w, lead) for w, lead, _ in p.log] == [("a", True), ("a", False)]
        assert p.log[-1][2] <= LEASE.lease_s

    asyncio.run(scenario())


def test_racing_takeovers_have_one_winner() -> None:
    async def scenario() -> None:
        p = Pair()
        await asyncio.gather(p.a.step(), p.b.step())
        assert [p.a.is_leader, p.b.is_leader].count(True) == 1

    asyncio.run(scenario())


def test_a_standby_whose_clock_runs_an_hour_ahead_never_takes_over_a_renewing_leader() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        ours, ahead = ManualClock(T0), ManualClock(T0 + timedelta(hours=1))
        a = Elector(kube, "ns", "a", ours, LEASE, lambda leading: None)
        b = Elector(kube, "ns", "b", ahead, LEASE, lambda leading: None)
        for _ in range(10):
            await a.step()
            await b.step()
            assert (a.is_leader, b.is_leader) == (True, False)
            for clock in (ours, ahead):
                await clock.advance(5)
        # a stops renewing: b takes over a lease duration after it last saw a change
        for _ in range(3):
            await b.step()
            await ahead.advance(5)
        await b.step()
        assert b.is_leader

    asyncio.run(scenario())


class HangingKube(FakeKube):
    """A fake apiserver whose reads, once ``hang`` is set, are never answered."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = False

    async def get(self, res: Any, name: str, namespace: str | None = None) -> Any:
        if self.hang:
            await asyncio.Event().wait()
        return await super().get(res, name, namespace)


def leads(elector: Elector) -> bool:
    """Whether ``elector`` leads now (read through a call: it changes across awaits)."""
    return elector.is_leader


def test_a_leader_whose_step_hangs_steps_down_at_its_renew_deadline() -> None:
    """A request that is never answered must not keep a leader acting while a standby
    may take the lapsed Lease over: ``bounded_step`` gives up at last renew + lease −
    renew, steps down and looks again after ``renew_s``."""

    async def scenario() -> None:
        kube, clock = HangingKube(), ManualClock(T0)
        changes: list[tuple[bool, float]] = []

        def changed(leading: bool) -> None:
            changes.append((leading, (clock.now() - T0).total_seconds()))

        a = Elector(kube, "ns", "a", clock, LEASE, changed)
        await a.bounded_step()
        assert a.is_leader
        kube.hang = True
        step = asyncio.ensure_future(a.bounded_step())
        for _ in range(int(LEASE.lease_s - LEASE.renew_s) - 1):
            await clock.advance(1)
            await asyncio.sleep(0)
        assert not step.done()  # still within its renew deadline
        assert leads(a)
        await clock.advance(1.5)
        await asyncio.wait_for(step, 1.0)
        assert not leads(a)
        assert changes == [(True, 0.0), (False, LEASE.lease_s - LEASE.renew_s + 0.5)]

    asyncio.run(scenario())
