"""Property: whatever the interleaving of claims, releases and conflicts, the holds of a
reservation never sum to more than its budget, and every refusal saw a full budget."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared import ledger, model
from shared.errors import Conflict, Invalid
from shared.model import claim_key
from shared.resources import GPU_RESERVATIONS
from tests.ledger.fakes import NAMESPACE, NOW, FakeStore, facts, inject_conflicts

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
        inject_conflicts(self.store, rng, conflict_rate)

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
    admitted = {claim_key(r.claim or ""): g for g, r in run.results if r.admitted}
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


# --- the token protocol: every kind of writer at once ------------------------------------


class Mixed:
    """Claimers (replicas, some deciding on a stale cached copy) racing the reconciler's
    binds, drops and expiries (JSON Patches keeping the token), writes that add holds
    (a PUT with a new token), spec changes of ``gpuCount`` (generation) and status
    wipes, with injected 409s and 422s — on the fake's real ``test`` / resourceVersion
    / generation rules."""

    def __init__(self, budget: int, rng: random.Random, fault_rate: float) -> None:
        self.rng = rng
        self.store = FakeStore(yields=lambda: rng.randint(0, 3))
        self.store.put(model.GPUReservation(facts(gpus=budget)))
        self.seen: list[dict[str, Any]] = [copy.deepcopy(self.store.stored("res-1"))]
        self.admitted: set[str] = set()
        self.removed: set[str] = set()
        self.claim_writes = 0
        patch, put = self.store.patch, self.store.replace
        self.store.patch = self.flaky(self.checked(patch), fault_rate)  # type: ignore[method-assign]
        self.store.replace = self.flaky(put, fault_rate)  # type: ignore[method-assign]
        self.store.on_write = lambda obj: self.seen.append(obj)

    def flaky(self, inner: Any, rate: float) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            roll = self.rng.random()
            if roll < rate / 2:
                raise Conflict(409, "injected", "Conflict")
            if roll < rate:
                raise Invalid(422, "the server rejected our request", "Invalid")
            return await inner(*args, **kwargs)

        return call

    def checked(self, inner: Any) -> Any:
        """A claim's write (it appends holds) must leave the holds within the budget
        of the spec it landed on — a spec that may have shrunk since its read."""

        async def call(*args: Any, **kwargs: Any) -> Any:
            written = await inner(*args, **kwargs)
            ops = args[2]
            if any(op["path"] in ("/status/holds/-", "/status") for op in ops):
                self.claim_writes += 1
                holds = written["status"]["holds"]
                assert sum(h["gpus"] for h in holds) <= written["spec"]["gpuCount"]
            return written

        return call

    async def claimer(self, asks: list[int]) -> None:
        while asks:
            size = self.rng.randint(1, 3)
            group, asks = asks[:size], asks[size:]
            cached = self.rng.choice(self.seen[-4:]) if self.rng.random() < 0.5 else None
            results = await ledger.claim_group(
                self.store,
                NAMESPACE,
                "res-1",
                [ledger.Ask(g, None, NOW) for g in group],
                deadline=1e12,
                cached=copy.deepcopy(cached) if cached else None,
            )
            self.admitted |= {claim_key(r.claim) for r in results if r.claim}

    async def keeper(self, steps: int) -> None:
        for _ in range(steps):
            await asyncio.sleep(0)
            step = [self.bind, self.drop, self.drop, self.add, self.resize, self.resize, self.wipe]
            await self.rng.choice(step)()

    async def bind(self) -> None:
        def change(res: model.GPUReservation) -> model.GPUReservation:
            free = [h for h in res.holds if not h.bound]
            if not free:
                return res
            hold = self.rng.choice(free)
            return ledger.bind(res, hold.claim, f"p-{hold.claim}", f"u-{hold.claim}")

        await ledger.amend(self.store, NAMESPACE, "res-1", change, now=NOW, deadline=1e12)

    async def drop(self) -> None:
        dropped: set[str] = set()

        def change(res: model.GPUReservation) -> model.GPUReservation:
            nonlocal dropped
            dropped = {h.claim for h in res.holds if self.rng.random() < 0.4}
            return ledger.drop(res, dropped)

        if await ledger.amend(self.store, NAMESPACE, "res-1", change, now=NOW, deadline=1e12):
            self.removed |= dropped

    async def add(self) -> None:
        """A rebuild finding a pod without a hold (it fits: the test's own claim)."""
        name = f"orphan-{self.rng.randrange(10**6)}"

        def change(res: model.GPUReservation) -> model.GPUReservation:
            hold = model.Hold(name, 1, NOW, "p", f"u-{name}")
            return ledger.add_hold(res, hold) if ledger.fits(res, 1) else res

        await ledger.amend(self.store, NAMESPACE, "res-1", change, now=NOW, deadline=1e12)

    async def resize(self) -> None:
        """The mirror writing a new ``gpuCount`` (the app shrank or grew the booking)."""
        for _ in range(50):
            obj = await self.store.get(GPU_RESERVATIONS, "res-1", NAMESPACE)
            obj["spec"]["gpuCount"] = self.rng.randint(0, 8)
            with contextlib.suppress(Conflict, Invalid):
                await self.store.replace(GPU_RESERVATIONS, "res-1", obj, NAMESPACE)
                return

    async def wipe(self) -> None:
        """Someone deletes the status (the ledger is rebuilt from pods later)."""
        for _ in range(50):
            obj = await self.store.get(GPU_RESERVATIONS, "res-1", NAMESPACE)
            present = {h["claim"] for h in (obj.get("status") or {}).get("holds", [])}
            obj.pop("status", None)
            with contextlib.suppress(Conflict, Invalid):
                await self.store.replace(GPU_RESERVATIONS, "res-1", obj, NAMESPACE, "status")
                self.removed |= present
                return


@settings(max_examples=120, deadline=None)
@given(
    budget=st.integers(1, 8),
    plans=st.lists(st.lists(st.integers(1, 3), max_size=8), min_size=2, max_size=4),
    steps=st.integers(0, 24),
    fault_rate=st.sampled_from([0.0, 0.1, 0.3]),
    rng=st.randoms(use_true_random=False),
)
def test_the_token_protocol_never_over_admits_nor_loses_a_hold(
    budget, plans, steps, fault_rate, rng
) -> None:
    run = Mixed(budget, rng, fault_rate)

    async def main() -> None:
        await asyncio.gather(*(run.claimer(p) for p in plans), run.keeper(steps))

    asyncio.run(main())
    final = {h.claim for h in run.store.reservation("res-1").holds}
    assert run.admitted - run.removed <= final
