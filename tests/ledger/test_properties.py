"""Property: whatever the interleaving of claims, releases and conflicts, the holds of a
reservation never sum to more than its budget, and every refusal saw a full budget."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared import ledger, model
from shared.errors import Conflict
from tests.ledger.fakes import NAMESPACE, NOW, FakeStore, facts

claims_st = st.lists(st.lists(st.integers(1, 3), max_size=8), min_size=1, max_size=4)


class Run:
    """Concurrent claimers and a releaser on one store, with random scheduling."""

    def __init__(self, budget: int, rng: random.Random, conflict_rate: float) -> None:
        self.budget = budget
        self.rng = rng
        self.store = FakeStore(yields=lambda: rng.randint(0, 3))
        self.store.put(model.GPUReservation(facts(gpus=budget)))
        self.store.on_write = self.check
        self.results: list[tuple[int, ledger.ClaimResult]] = []
        # Claims write by JSON Patch, releases by PUT: both meet injected conflicts.
        self.store.replace = self.flaky(self.store.replace, conflict_rate)  # type: ignore[method-assign]
        self.store.patch = self.flaky(self.store.patch, conflict_rate)  # type: ignore[method-assign]

    def flaky(self, inner: Any, conflict_rate: float) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.rng.random() < conflict_rate:
                raise Conflict(409, "injected", "Conflict")
            return await inner(*args, **kwargs)

        return call

    def check(self, obj: dict[str, Any]) -> None:
        assert sum(h["gpus"] for h in obj["status"]["holds"]) <= self.budget

    async def claimer(self, sizes: list[int]) -> None:
        for gpus in sizes:
            result = await ledger.claim(
                self.store, NAMESPACE, "res-1", gpus, pod=None, now=NOW, deadline=1e12
            )
            self.results.append((gpus, result))

    async def releaser(self, rounds: int) -> None:
        for _ in range(rounds):
            await asyncio.sleep(0)

            def release_one(res: model.GPUReservation) -> model.GPUReservation:
                if not res.holds:
                    return res
                return ledger.drop(res, {self.rng.choice(res.holds).claim})

            await ledger.amend(self.store, NAMESPACE, "res-1", release_one, now=NOW, deadline=1e12)

    async def run(self, plans: list[list[int]], releases: int) -> None:
        await asyncio.gather(*(self.claimer(p) for p in plans), self.releaser(releases))


@settings(max_examples=150, deadline=None)
@given(
    budget=st.integers(1, 8),
    plans=claims_st,
    releases=st.integers(0, 10),
    conflict_rate=st.sampled_from([0.0, 0.2, 0.5]),
    rng=st.randoms(use_true_random=False),
)
def test_holds_never_exceed_the_budget(budget, plans, releases, conflict_rate, rng) -> None:
    run = Run(budget, rng, conflict_rate)
    asyncio.run(run.run(plans, releases))
    final = run.store.reservation("res-1")
    assert ledger.used(final) <= budget
    for gpus, result in run.results:
        assert result.reason in {"admitted", "full", "too_small"}, result
        if result.reason == "full":
            assert result.reservation is not None
            assert ledger.used(result.reservation) + gpus > budget
        if result.reason == "too_small":
            assert gpus > budget


@settings(max_examples=100, deadline=None)
@given(budget=st.integers(1, 8), plans=claims_st, rng=st.randoms(use_true_random=False))
def test_without_releases_admitted_claims_are_exactly_the_holds(budget, plans, rng) -> None:
    run = Run(budget, rng, conflict_rate=0.2)
    asyncio.run(run.run(plans, releases=0))
    admitted = {r.claim: g for g, r in run.results if r.admitted}
    holds = {h.claim: h.gpus for h in run.store.reservation("res-1").holds}
    assert admitted == holds


@given(
    holds=st.lists(st.integers(0, 4), max_size=6),
    budget=st.integers(0, 12),
    gpus=st.integers(0, 6),
)
def test_add_hold_keeps_the_invariant_or_refuses(holds, budget, gpus) -> None:
    res = model.GPUReservation(
        facts(gpus=budget),
        tuple(model.Hold(f"c{i}", g, NOW) for i, g in enumerate(holds)),
    )
    try:
        after = ledger.add_hold(res, model.Hold("new", gpus, NOW))
    except ledger.LedgerFull:
        assert ledger.used(res) + gpus > budget
    else:
        assert ledger.used(after) <= budget
