"""Group commit with two writes in flight per reservation: the second group is decided
on the first's expected result and its patch tests the token the first sets, so it
lands only after the first, and fails (re-reads, re-decides) when the first did not
land or when it reached the server first."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from shared import ledger, model
from shared.errors import Conflict, Invalid
from shared.ledger import Ask, ClaimResult
from tests.ledger.fakes import NAMESPACE, NOW, FakeStore, facts, server_error
from tests.webhook.claimkit import engine_on
from webhook.claims.engine import ClaimEngine

FAR = 1e12


class Gated:
    """The store's patches wait at a gate each; the test opens them in its own order
    (``fail`` makes the call raise instead of reaching the store)."""

    def __init__(self, store: FakeStore) -> None:
        self.gates: list[asyncio.Future[Exception | None]] = []
        inner = store.patch

        async def patch(*args: Any, **kwargs: Any) -> Any:
            gate: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
            self.gates.append(gate)
            failure = await gate
            if failure is not None:
                raise failure
            return await inner(*args, **kwargs)

        store.patch = patch  # type: ignore[method-assign]

    async def sent(self, count: int) -> None:
        """Until ``count`` patches have reached the gate."""
        for _ in range(200):
            if len(self.gates) >= count:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"{len(self.gates)} patches sent, expected {count}")

    def open(self, index: int, failure: Exception | None = None) -> None:
        self.gates[index].set_result(failure)

    async def drain(self) -> None:
        """Open every gate, now and as new patches arrive, until nothing is sent."""
        idle = 0
        while idle < 50:
            closed = [g for g in self.gates if not g.done()]
            for gate in closed:
                gate.set_result(None)
            idle = 0 if closed else idle + 1
            await asyncio.sleep(0)


def store_with(gpus: int) -> FakeStore:
    store = FakeStore()
    store.put(model.GPUReservation(facts(gpus=gpus)))
    return store


def group_on(store: FakeStore, cached: Any = None) -> ClaimEngine:
    return engine_on(store, cached or (lambda name: copy.deepcopy(store.stored(name))), _ignore)


def _ignore(result: ClaimResult) -> None:
    return None


def claim(group: ClaimEngine, gpus: int, pod: str) -> asyncio.Task[ClaimResult]:
    return asyncio.ensure_future(group.claim("res-1", Ask(gpus, pod, NOW), FAR))


def test_a_second_group_is_sent_before_the_first_answer_and_lands_after_it() -> None:
    store = store_with(8)

    async def run() -> tuple[list[ClaimResult], ClaimEngine]:
        gated, group = Gated(store), group_on(store)
        first = claim(group, 2, "a")
        await gated.sent(1)
        second = claim(group, 3, "b")
        await gated.sent(2)  # both in flight
        gated.open(0)
        gated.open(1)
        return [await first, await second], group

    results, group = asyncio.run(run())
    assert [(r.reason, r.conflicts) for r in results] == [("admitted", 0), ("admitted", 0)]
    assert [h.pod for h in store.reservation("res-1").holds] == ["a", "b"]
    assert (group.writes, group.pipelined) == (2, 1)


def test_a_second_write_that_overtakes_the_first_re_decides_and_lands() -> None:
    store = store_with(8)

    async def run() -> list[ClaimResult]:
        gated, group = Gated(store), group_on(store)
        first = claim(group, 2, "a")
        await gated.sent(1)
        second = claim(group, 3, "b")
        await gated.sent(2)
        gated.open(1)  # the second reaches the server first: its token test fails
        await gated.sent(3)  # ... it re-read (the first not landed) and wrote again
        gated.open(0)
        await gated.drain()
        return [await first, await second]

    first, second = asyncio.run(run())
    assert (first.reason, second.reason) == ("admitted", "admitted")
    assert second.conflicts >= 1
    assert sorted(h.pod or "" for h in store.reservation("res-1").holds) == ["a", "b"]
    assert ledger.used(store.reservation("res-1")) == 5


def test_when_the_first_write_fails_the_second_fails_by_its_test_and_both_re_decide() -> None:
    store = store_with(5)

    async def run() -> list[ClaimResult]:
        gated, group = Gated(store), group_on(store)
        first = claim(group, 3, "a")
        await gated.sent(1)
        second = claim(group, 2, "b")
        await gated.sent(2)
        gated.open(0, Conflict(409, "injected", "Conflict"))
        gated.open(1)  # tests the first's token, which never landed
        await gated.drain()
        return [await first, await second]

    first, second = asyncio.run(run())
    assert (first.reason, second.reason) == ("admitted", "admitted")
    assert first.conflicts == 1
    assert second.conflicts >= 1
    assert ledger.used(store.reservation("res-1")) == 5


def test_a_group_the_expected_ledger_has_no_room_for_waits_for_the_real_answer() -> None:
    store = store_with(2)

    async def run() -> list[ClaimResult]:
        gated, group = Gated(store), group_on(store)
        first = claim(group, 2, "a")
        await gated.sent(1)
        second = claim(group, 1, "b")
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(gated.gates) == 1  # not sent, not refused on an expectation
        gated.open(0, server_error())  # the first write fails for good
        await gated.drain()
        return [await first, await second]

    first, second = asyncio.run(run())
    assert (first.reason, second.reason) == ("error", "admitted")
    assert [h.pod for h in store.reservation("res-1").holds] == ["b"]


def test_without_a_uid_to_test_the_second_group_waits() -> None:
    store = store_with(8)

    def no_uid(name: str) -> dict[str, Any]:
        obj = copy.deepcopy(store.stored(name))
        del obj["metadata"]["uid"]
        return obj

    async def run() -> tuple[list[ClaimResult], ClaimEngine]:
        gated, group = Gated(store), group_on(store, no_uid)
        first = claim(group, 2, "a")
        await gated.sent(1)
        second = claim(group, 3, "b")
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(gated.gates) == 1
        await gated.drain()
        return [await first, await second], group

    results, group = asyncio.run(run())
    assert [r.reason for r in results] == ["admitted", "admitted"]
    assert group.pipelined == 0


def test_a_pipelined_422_whose_tests_hold_on_the_re_read_is_decided_again() -> None:
    """The predecessor landed between the 422 (the follower got there first) and the
    re-read: the tests hold now, and that is a race of order, not an error."""
    store = store_with(8)

    def attempt(pipelined: bool) -> ClaimResult:
        raw = copy.deepcopy(store.stored("res-1"))
        parsed = model.from_object(raw)
        store.faults["patch"] = Invalid(422, "the server rejected our request", "Invalid")
        store.before["get"] = lambda: store.faults.pop("patch")
        (result,) = asyncio.run(
            ledger.write_claims(
                store,
                ledger.ClaimPlan(
                    namespace=NAMESPACE,
                    name="res-1",
                    asks=[Ask(1, "p", NOW)],
                    deadline=FAR,
                    base=raw,
                    parsed=parsed,
                    pipelined=pipelined,
                ),
            )
        )
        return result

    assert (attempt(pipelined=True).reason, store.writes) == ("admitted", 1)
    assert attempt(pipelined=False).reason == "error"


def test_expected_after_is_what_the_server_stores() -> None:
    store = store_with(8)
    raw = copy.deepcopy(store.stored("res-1"))
    parsed = model.from_object(raw)
    seen: list[dict[str, Any]] = []
    (result,) = asyncio.run(
        ledger.write_claims(
            store,
            ledger.ClaimPlan(
                namespace=NAMESPACE,
                name="res-1",
                asks=[Ask(2, "p", NOW)],
                deadline=FAR,
                base=raw,
                parsed=parsed,
            ),
            Seen(seen),
        )
    )
    assert result.admitted
    (expected,) = seen
    stored = store.stored("res-1")
    assert expected["status"] == stored["status"]
    assert ledger.guard_ops(expected) == ledger.guard_ops(stored)


class Seen:
    """A ``WriteLog`` keeping what each write is expected to leave."""

    def __init__(self, seen: list[dict[str, Any]]) -> None:
        self.seen = seen

    def sent(self, write: ledger.Write) -> None:
        self.seen.append(write.after)
