"""The group commit's writer: callbacks instead of a writer task, one deadline timer per
reservation, groups formed once the loop ran what it had ready. Each test drives the
writes through gates it opens itself; nothing waits on wall-clock time but the deadline
test, which only checks that no caller is answered before its own deadline."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from shared import ledger, model
from shared.ledger import Ask, ClaimResult
from tests.ledger.fakes import NOW, FakeStore, facts
from tests.webhook.claimkit import engine_on
from tests.webhook.test_engine_pipeline import Gated
from webhook.claims.engine import SETTLE, ClaimEngine

FAR = 1e12


def store_with(gpus: int) -> FakeStore:
    store = FakeStore()
    store.put(model.GPUReservation(facts(gpus=gpus)))
    return store


def group_on(store: FakeStore, **kwargs: Any) -> ClaimEngine:
    return engine_on(
        store,
        lambda name: copy.deepcopy(store.stored(name)),
        lambda result: None,
        **kwargs,
    )


def claim(
    group: ClaimEngine, gpus: int, pod: str, deadline: float = FAR
) -> asyncio.Task[ClaimResult]:
    return asyncio.ensure_future(group.claim("res-1", Ask(gpus, pod, NOW), deadline))


def test_claims_arriving_in_the_same_pass_of_the_loop_share_the_first_write() -> None:
    store = store_with(8)

    async def run() -> tuple[list[ClaimResult], ClaimEngine, int]:
        gated, group = Gated(store), group_on(store)
        tasks = [claim(group, 1, f"p{i}") for i in range(5)]
        await gated.sent(1)
        for _ in range(20):
            await asyncio.sleep(0)
        sent = len(gated.gates)
        await gated.drain()
        return list(await asyncio.gather(*tasks)), group, sent

    results, group, sent = asyncio.run(run())
    assert sent == 1  # one write for all five; nothing left for a second
    assert [r.reason for r in results] == ["admitted"] * 5
    assert (group.writes, group.asks) == (1, 5)
    assert group.idle


def test_a_claim_made_ready_in_the_next_pass_of_the_loop_still_joins_the_group() -> None:
    """What a request read in the same wake-up looks like: its task runs one pass after
    the first claim's. The group waits for it (``SETTLE``) instead of leaving alone."""
    assert SETTLE >= 2
    store = store_with(8)

    async def run() -> tuple[list[ClaimResult], ClaimEngine, int]:
        gated, group = Gated(store), group_on(store)
        first = claim(group, 1, "a")
        await asyncio.sleep(0)  # the first claim has run and asked for a group
        second = claim(group, 1, "b")
        await gated.sent(1)
        for _ in range(20):
            await asyncio.sleep(0)
        sent = len(gated.gates)
        await gated.drain()
        return [await first, await second], group, sent

    results, group, sent = asyncio.run(run())
    assert sent == 1
    assert [r.reason for r in results] == ["admitted", "admitted"]
    assert (group.writes, group.asks) == (1, 2)


def test_every_caller_is_answered_deadline_at_its_own_deadline_not_before() -> None:
    """One timer per reservation, set for the earliest deadline waiting: a later caller
    with an earlier deadline moves it, and each caller is answered at its own."""
    store = store_with(8)

    async def run() -> list[tuple[str, bool]]:
        loop = asyncio.get_running_loop()
        gated, group = Gated(store), group_on(store, monotonic=loop.time)
        start = loop.time()
        late = claim(group, 1, "late", start + 0.2)
        early = claim(group, 1, "early", start + 0.02)
        never = claim(group, 1, "never", FAR)
        seen: list[tuple[str, bool]] = []
        for task, deadline in ((early, start + 0.02), (late, start + 0.2)):
            result = await task
            seen.append((result.reason, loop.time() >= deadline))
        assert not never.done()
        await gated.drain()
        seen.append(((await never).reason, True))
        await group.close()
        return seen

    assert asyncio.run(run()) == [("deadline", True), ("deadline", True), ("admitted", True)]


def test_a_caller_cancelled_before_its_group_forms_is_left_out() -> None:
    store = store_with(8)

    async def run() -> tuple[list[ClaimResult], ClaimEngine]:
        gated, group = Gated(store), group_on(store)
        first = claim(group, 1, "a")
        await gated.sent(1)
        gone, kept = claim(group, 1, "gone"), claim(group, 1, "kept")
        await asyncio.sleep(0)  # both queued behind the write in flight
        gone.cancel()
        await gated.drain()
        return [await first, await kept], group

    results, group = asyncio.run(run())
    assert [r.reason for r in results] == ["admitted", "admitted"]
    assert [h.pod for h in store.reservation("res-1").holds] == ["a", "kept"]
    assert group.asks == 2
    assert group.idle


def test_a_bug_reaches_the_group_and_the_queued_callers_then_the_next_claim_writes() -> None:
    store = store_with(8)
    broken = [True]

    def written(result: ClaimResult) -> None:
        if broken[0]:
            raise RuntimeError("cache exploded")

    async def run() -> tuple[list[BaseException | ClaimResult], ClaimResult, ClaimEngine]:
        gated = Gated(store)
        group = engine_on(store, lambda name: copy.deepcopy(store.stored(name)), written, depth=1)
        first = claim(group, 1, "a")
        await gated.sent(1)
        queued = claim(group, 1, "b")
        await asyncio.sleep(0)
        gated.open(0)
        outcomes = list(await asyncio.gather(first, queued, return_exceptions=True))
        broken[0] = False
        later = claim(group, 1, "c")
        await gated.drain()
        return outcomes, await later, group

    outcomes, later, group = asyncio.run(run())
    assert [type(o) for o in outcomes] == [RuntimeError, RuntimeError]
    assert later.reason == "admitted"
    assert group.idle


def test_close_cancels_the_queued_and_the_written_callers() -> None:
    store = store_with(8)

    async def run() -> tuple[list[BaseException | ClaimResult], ClaimEngine]:
        gated, group = Gated(store), group_on(store, depth=1)
        first = claim(group, 1, "a")
        await gated.sent(1)
        queued = claim(group, 1, "b")
        await asyncio.sleep(0)
        await group.close()
        return list(await asyncio.gather(first, queued, return_exceptions=True)), group

    outcomes, group = asyncio.run(run())
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes)
    assert group.idle


@pytest.mark.parametrize("depth", [1, 2])
def test_a_long_stream_of_claims_keeps_at_most_depth_writes_in_flight(depth: int) -> None:
    store = store_with(400)
    in_flight = [0, 0]  # now, most
    inner = store.patch

    async def patch(*args: Any, **kwargs: Any) -> Any:
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        try:
            for _ in range(3):
                await asyncio.sleep(0)
            return await inner(*args, **kwargs)
        finally:
            in_flight[0] -= 1

    store.patch = patch  # type: ignore[method-assign]

    async def client(group: ClaimEngine, index: int) -> list[ClaimResult]:
        results = []
        for n in range(30):
            for _ in range((index + n) % 4):  # the clients come back out of step
                await asyncio.sleep(0)
            results.append(await group.claim("res-1", Ask(1, f"p{index}-{n}", NOW), FAR))
        return results

    async def run() -> tuple[list[ClaimResult], ClaimEngine]:
        group = group_on(store, depth=depth)
        done = await asyncio.gather(*(client(group, i) for i in range(10)))
        return [r for rs in done for r in rs], group

    results, group = asyncio.run(run())
    assert all(r.reason == "admitted" for r in results)
    assert ledger.used(store.reservation("res-1")) == 300
    assert in_flight[1] == depth
    assert group.writes < 300
    assert group.idle


def test_the_next_write_is_sent_before_the_finished_groups_callers_resume() -> None:
    """A write's end starts the next group first: its patch leaves before the callers
    of the finished write make their answers (which would otherwise delay it)."""
    store = store_with(8)

    async def run() -> list[int]:
        gated, group = Gated(store), group_on(store, depth=1)
        seen: list[int] = []

        async def caller(pod: str) -> ClaimResult:
            result = await group.claim("res-1", Ask(1, pod, NOW), FAR)
            seen.append(len(gated.gates))  # patches sent when this caller resumed
            return result

        first = asyncio.ensure_future(caller("a"))
        await gated.sent(1)
        second = asyncio.ensure_future(caller("b"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(gated.gates) == 1  # one write at a time: "b" waits for "a"'s
        gated.open(0)
        await gated.sent(2)
        gated.open(1)
        await asyncio.gather(first, second)
        return seen

    assert asyncio.run(run()) == [2, 2]


def test_claims_arriving_in_the_passes_after_a_write_is_sent_share_the_next_write() -> None:
    """The lane looks again ``SETTLE`` passes after a write's first step (when it was
    sent and told what it leaves), not after its start: claims made in that step and
    in the two passes after it go in one pipelined write, not in two."""
    store = store_with(8)

    async def run() -> tuple[list[ClaimResult], ClaimEngine]:
        loop = asyncio.get_running_loop()
        gated, group = Gated(store), group_on(store)
        later: list[asyncio.Task[ClaimResult]] = []
        inner = store.patch

        async def patch(*args: Any, **kwargs: Any) -> Any:
            if not later:  # the first write's first step: a claim now and in each of the
                later.append(claim(group, 1, "b"))  # next two passes
                loop.call_soon(lambda: later.append(claim(group, 1, "c")))
                loop.call_soon(loop.call_soon, lambda: later.append(claim(group, 1, "d")))
            return await inner(*args, **kwargs)

        store.patch = patch  # type: ignore[method-assign]
        first = claim(group, 1, "a")
        await gated.sent(1)
        for _ in range(3 * SETTLE):
            await asyncio.sleep(0)
        await gated.drain()
        return [await first, *[await t for t in later]], group

    results, group = asyncio.run(run())
    assert [r.reason for r in results] == ["admitted"] * 4
    assert (group.writes, group.asks, group.pipelined) == (2, 4, 1)
