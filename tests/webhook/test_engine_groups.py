"""``webhook.claims.engine.ClaimEngine``: concurrent claims on one reservation, one write.

Correctness first: whatever the interleaving, two replicas' group commits, a releaser
and injected conflicts never make the holds exceed the budget, and each caller's
outcome is exactly what was written (property). Then the point of it: 50 concurrent
claims on a booking with room for all are all admitted in a handful of writes.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import ledger, model
from shared.ledger import Ask, ClaimResult
from shared.model import claim_key
from tests.ledger.fakes import NAMESPACE, NOW, FakeStore, facts, inject_conflicts, server_error
from tests.policy.builders import gpu_pod, reservation
from tests.webhook.claimkit import engine_on
from tests.webhook.helpers import call, review, wired
from webhook.claims.engine import ClaimEngine
from webhook.claims.lanes import MAX_GROUP

FAR = 1e12


def commit(store: FakeStore, seen: list[ClaimResult] | None = None) -> ClaimEngine:
    """A group commit reading its first copy from the store (as a fresh cache would)."""
    told = seen if seen is not None else []
    return engine_on(store, lambda name: None, told.append)


def store_with(gpus: int) -> FakeStore:
    store = FakeStore(yields=lambda: 1)
    store.put(model.GPUReservation(facts(gpus=gpus)))
    return store


async def burst(group: ClaimEngine, sizes: list[int], deadline: float = FAR) -> list[ClaimResult]:
    return list(
        await asyncio.gather(
            *(group.claim("res-1", Ask(g, f"p{i}", NOW), deadline) for i, g in enumerate(sizes))
        )
    )


def test_fifty_concurrent_claims_with_room_for_all_are_all_admitted_in_few_writes() -> None:
    store = store_with(50)
    group = commit(store)
    results = asyncio.run(burst(group, [1] * 50))
    assert [r.reason for r in results] == ["admitted"] * 50
    assert len({r.claim for r in results}) == 50
    assert ledger.used(store.reservation("res-1")) == 50
    assert store.writes == group.writes <= 3
    assert all(r.conflicts == 0 for r in results)


def test_more_claims_than_room_admit_exactly_the_budget() -> None:
    store = store_with(50)
    results = asyncio.run(burst(commit(store), [1] * 60))
    assert sum(r.admitted for r in results) == 50
    assert {r.reason for r in results if not r.admitted} == {"full"}
    assert ledger.used(store.reservation("res-1")) == 50


def test_the_cache_hears_each_write_before_the_next_group_reads_it() -> None:
    """The next group starts from ``cached(name)``: it must already be the written
    version, or every group after the first would meet a 409 on our own write."""
    store = store_with(50)
    cache: dict[str, Any] = {"res-1": store.stored("res-1")}

    def written(result: ClaimResult) -> None:
        if result.raw is not None:
            cache["res-1"] = result.raw

    group = engine_on(store, cache.get, written)
    results = asyncio.run(burst(group, [1] * 40))
    assert all(r.admitted for r in results)
    assert all(r.conflicts == 0 for r in results)
    assert store.gets == 0


def test_a_group_is_at_most_max_group_asks() -> None:
    store = store_with(10_000)
    group = commit(store)
    asyncio.run(burst(group, [1] * (MAX_GROUP + 5)))
    assert group.writes >= 2
    assert ledger.used(store.reservation("res-1")) == MAX_GROUP + 5


def test_a_caller_past_its_deadline_is_told_deadline() -> None:
    store = store_with(8)

    async def hang(*args: Any, **kwargs: Any) -> dict[str, Any]:
        await asyncio.sleep(60)
        raise AssertionError("not reached")

    store.get = hang  # type: ignore[method-assign]

    async def run() -> ClaimResult:
        loop = asyncio.get_running_loop()
        group = engine_on(store, lambda n: None, lambda r: None, monotonic=loop.time)
        result = await group.claim("res-1", Ask(1, "p", NOW), loop.time() + 0.05)
        await group.close()
        return result

    assert asyncio.run(run()).reason == "deadline"


def test_an_api_error_reaches_every_caller_of_the_group() -> None:
    store = store_with(8)
    store.fail_next = [server_error()]
    results = asyncio.run(burst(commit(store), [1, 1, 1]))
    assert results[0].reason == "error"
    assert store.writes == sum(r.admitted for r in results)


def test_a_bug_in_the_writer_is_raised_to_its_callers_not_swallowed() -> None:
    store = store_with(8)

    def broken(result: ClaimResult) -> None:
        raise RuntimeError("cache exploded")

    group = engine_on(store, lambda n: None, broken)
    with pytest.raises(RuntimeError, match="cache exploded"):
        asyncio.run(burst(group, [1, 1]))


# --- property: two replicas, a releaser, injected conflicts ---------------------------


class Run:
    def __init__(self, budget: int, rng: random.Random, conflict_rate: float) -> None:
        self.budget = budget
        self.store = FakeStore(yields=lambda: rng.randint(0, 3))
        self.store.put(model.GPUReservation(facts(gpus=budget)))
        self.store.on_write = self.check
        self.rng = rng
        inject_conflicts(self.store, rng, conflict_rate)
        self.replicas = [commit(self.store), commit(self.store)]
        self.results: list[tuple[int, ClaimResult]] = []

    def check(self, obj: dict[str, Any]) -> None:
        assert sum(h["gpus"] for h in obj["status"]["holds"]) <= self.budget

    async def claimer(self, replica: ClaimEngine, sizes: list[int]) -> None:
        for gpus in sizes:
            await asyncio.sleep(0)
            self.results.append((gpus, await replica.claim("res-1", Ask(gpus, None, NOW), FAR)))

    async def releaser(self, rounds: int) -> None:
        def release_one(res: model.GPUReservation) -> model.GPUReservation:
            if not res.holds:
                return res
            return ledger.drop(res, {self.rng.choice(res.holds).claim})

        for _ in range(rounds):
            await asyncio.sleep(0)
            await ledger.amend(self.store, NAMESPACE, "res-1", release_one, now=NOW, deadline=FAR)

    async def run(self, plans: list[list[int]], releases: int) -> None:
        claimers = [self.claimer(self.replicas[i % 2], p) for i, p in enumerate(plans)]
        await asyncio.gather(*claimers, self.releaser(releases))


plans_st = st.lists(st.lists(st.integers(1, 3), max_size=6), min_size=1, max_size=8)


@settings(max_examples=120, deadline=None)
@given(
    budget=st.integers(1, 8),
    plans=plans_st,
    releases=st.integers(0, 8),
    conflict_rate=st.sampled_from([0.0, 0.2, 0.5]),
    seed=st.integers(0, 2**32),
)
def test_grouped_claims_never_exceed_the_budget(budget, plans, releases, conflict_rate, seed):
    run = Run(budget, random.Random(seed), conflict_rate)
    asyncio.run(run.run(plans, releases))
    assert ledger.used(run.store.reservation("res-1")) <= budget
    for gpus, result in run.results:
        assert result.reason in {"admitted", "full", "too_small"}, result
        if result.reason == "full":
            assert result.reservation is not None
            assert ledger.used(result.reservation) + gpus > budget


@settings(max_examples=80, deadline=None)
@given(budget=st.integers(1, 8), plans=plans_st, seed=st.integers(0, 2**32))
def test_without_releases_admitted_callers_are_exactly_the_holds(budget, plans, seed) -> None:
    run = Run(budget, random.Random(seed), conflict_rate=0.2)
    asyncio.run(run.run(plans, releases=0))
    admitted = {claim_key(r.claim or ""): g for g, r in run.results if r.admitted}
    holds = {h.claim: h.gpus for h in run.store.reservation("res-1").holds}
    assert admitted == holds


# --- through the handler ----------------------------------------------------------------


@pytest.mark.anyio
async def test_concurrent_admissions_share_a_write_and_count_its_409_once() -> None:
    admission, store = await wired(reservation(1, gpus=8))

    def other_writer() -> None:
        store.bump("res-1", lambda r: ledger.add_hold(r, model.Hold("elsewhere", 1, NOW)))

    store.before["patch"] = other_writer
    docs = await asyncio.gather(*(call(admission, review(gpu_pod(1).build())) for _ in range(3)))
    assert all(d["response"]["warnings"][0].startswith("admitted under") for d in docs)
    assert ledger.used(store.reservation("res-1")) == 4
    assert admission.engine.writes == 1
    conflicts = admission.metrics.registry.get_sample_value(
        "gpu_reservation_webhook_ledger_conflicts_total"
    )
    assert conflicts == 1
    sizes = admission.metrics.registry.get_sample_value
    assert sizes("gpu_reservation_webhook_claim_group_size_count") == 1
    assert sizes("gpu_reservation_webhook_claim_group_size_sum") == 3
