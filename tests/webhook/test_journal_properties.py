"""Properties of the claim path over event sequences: the engine, the write journal and
the cache against the ledger's fake store, the watch's lines delivered early or late.

Each example runs a random sequence of steps — claims arriving, passes of the loop,
watch lines delivered, the reconciler dropping a hold (token kept) or adding one (a
new token), a writer getting in just before our write (a lost race), a write failing
before it lands, a write landing whose answer is lost — then lets everything finish.
Invariants:

- never over-admit: no state the server stores holds more than the budget;
- our holds are hidden from a decision at most until the next event: after every step
  the cache holds every hold of ours the server holds and whose caller was told
  "admitted" (here not even until the next event: the engine tells the cache before
  its callers);
- every caller is told its own outcome: each gets one result; admitted ones name
  distinct claims, each held (with its GPUs and pod) unless the reconciler dropped it;
  a hold nobody was told of is one whose answer was lost;
- once the watch delivered everything, the journal is empty and the cache is the store.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import replace
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from shared import ledger, model
from shared.errors import ServerError
from shared.gateway import WatchEvent
from shared.ledger import Ask, ClaimResult
from tests.policy.builders import NOW, reservation
from tests.webhook.helpers import StoreGateway, wired
from webhook.handler import Admission

NAME = "res-1"
FAR = 1e12


class Watch:
    """The store's states in order, delivered to the cache when a step says so."""

    def __init__(self, admission: Admission, store: StoreGateway) -> None:
        self.admission = admission
        self.states: list[dict[str, Any]] = []
        store.on_write = self.states.append

    def deliver(self, count: int) -> None:
        cache = self.admission.cache
        for state in self.states[:count]:
            line = json.dumps({"type": "MODIFIED", "object": state}, separators=(",", ":"))
            raw = line.encode()
            event = cache.peek(raw) or WatchEvent("MODIFIED", json.loads(raw)["object"])
            cache.watched.apply(event)
        del self.states[:count]


class Run:
    """One example: the wiring, the callers, what was dropped."""

    def __init__(self, admission: Admission, store: StoreGateway, budget: int) -> None:
        self.admission, self.store, self.budget = admission, store, budget
        self.watch = Watch(admission, store)
        self.calls: list[tuple[Ask, asyncio.Task[ClaimResult]]] = []
        self.dropped: set[str] = set()
        self.lost_answers = 0
        self.others = 0
        self.foreign: set[str] = set()
        self.inner_patch = store.patch
        store.on_write = self.check

    def check(self, state: dict[str, Any]) -> None:
        held = sum(h["gpus"] for h in state["status"]["holds"])
        assert held <= self.budget, f"over-admitted: {held} > {self.budget}"
        self.watch.states.append(state)

    def held(self) -> dict[str, model.Hold]:
        return {h.claim: h for h in self.store.reservation(NAME).holds}

    async def step(self, kind: str, value: int, rng: random.Random) -> None:
        if kind == "claim":
            ask = Ask(value, f"p-{len(self.calls)}", NOW)
            task = asyncio.ensure_future(self.admission.engine.claim(NAME, ask, FAR))
            self.calls.append((ask, task))
        elif kind == "pass":
            for _ in range(value):
                await asyncio.sleep(0)
        elif kind == "deliver":
            self.watch.deliver(value)
        elif kind == "drop":
            await self.drop(rng)
        elif kind == "add":
            await self.add_other()
        elif kind == "race":
            self.store.before["patch"] = self.race
        elif kind == "fail":
            self.store.fail_next.append(ServerError(503, "etcd unavailable"))
        elif kind == "lose":
            self.store.patch = self.lose  # type: ignore[method-assign]

    async def drop(self, rng: random.Random) -> None:
        holds = list(self.held())
        if not holds:
            return
        key = rng.choice(holds)
        self.dropped.add(key)
        await ledger.amend(self.store, self.store.namespace, NAME, _dropping(key), **_TERMS)

    async def add_other(self) -> None:
        """A room-taking write of the reconciler (a hold of no GPUs: a new token)."""
        self.others += 1
        hold = model.Hold(f"other-{self.others}", 0, NOW)
        self.foreign.add(hold.claim)
        await ledger.amend(self.store, self.store.namespace, NAME, _adding(hold), **_TERMS)

    def race(self) -> None:
        """Someone writes just before our write: a new token, so our test fails."""
        self.store.bump(NAME, lambda res: res)
        self.check(self.store.read(ledger_resource(), NAME, self.store.namespace))

    async def lose(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The write lands; its answer never arrives."""
        self.store.patch = self.inner_patch  # type: ignore[method-assign]
        await self.inner_patch(*args, **kwargs)
        self.lost_answers += 1
        raise ServerError(503, "the answer was lost")

    def assert_ours_shown(self) -> None:
        """Every hold of ours the server holds, whose caller was told, is cached."""
        entry = self.admission.cache.entry(NAME)
        assert entry is not None
        cached = {h.claim for h in entry.reservation.holds}
        held = self.held()
        for _, task in self.calls:
            if task.done() and task.result().admitted:
                key = model.claim_key(task.result().claim or "")
                assert key not in held or key in cached, "a hold of ours hidden"

    async def finish(self) -> None:
        self.store.patch = self.inner_patch  # type: ignore[method-assign]
        self.store.before.pop("patch", None)
        self.store.fail_next.clear()
        for _ in range(200):
            if all(task.done() for _, task in self.calls) and self.admission.engine.idle:
                break
            await asyncio.sleep(0)
        self.watch.deliver(len(self.watch.states))

    def assert_outcomes(self) -> None:
        held = self.held()
        told: set[str] = set()
        errors = 0
        for ask, task in self.calls:
            assert task.done(), "a caller was never told"
            result = task.result()
            if not result.admitted:
                assert result.reason in {"full", "error", "too_small"}, result.reason
                errors += result.reason == "error"
                continue
            key = model.claim_key(result.claim or "")
            assert key not in told, "two callers told the same claim"
            told.add(key)
            if key in self.dropped:
                continue
            assert key in held, "a caller told admitted holds nothing"
            assert (held[key].gpus, held[key].pod) == (ask.gpus, ask.pod)
        strangers = set(held) - told - self.foreign
        assert len(strangers) <= errors * len(self.calls)
        assert not strangers or self.lost_answers

    def assert_settled(self) -> None:
        assert self.admission.cache.journal.names == []
        entry = self.admission.cache.entry(NAME)
        assert entry is not None
        assert entry.reservation.holds == self.store.reservation(NAME).holds


_TERMS: ledger.AmendTerms = {"now": NOW, "deadline": FAR}


def ledger_resource() -> Any:
    from shared.resources import GPU_RESERVATIONS

    return GPU_RESERVATIONS


def _dropping(key: str) -> Any:
    return lambda res: ledger.drop(res, {key})


def _adding(hold: model.Hold) -> Any:
    return lambda res: replace(res, holds=(*res.holds, hold))


steps_st = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.integers(1, 3)),
        st.tuples(st.just("pass"), st.integers(1, 12)),
        st.tuples(st.just("deliver"), st.integers(1, 4)),
        st.tuples(st.sampled_from(["drop", "add", "race", "fail", "lose"]), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
# A drop landing before our write, its event delivered after our answer: our hold must
# be put back on top of it.
@example(
    budget=4, steps=[("drop", 0), ("claim", 1), ("pass", 6), ("deliver", 1)], seed=0, yields=False
)
# Our write's event delivered before its answer (the store yields before answering).
@example(
    budget=4, steps=[("claim", 2), ("pass", 4), ("deliver", 1), ("claim", 1)], seed=1, yields=True
)
# A write landing whose answer is lost, then its event; a lost race, then a failure.
@example(
    budget=2,
    steps=[
        ("lose", 0),
        ("claim", 1),
        ("pass", 6),
        ("deliver", 2),
        ("race", 0),
        ("claim", 1),
        ("pass", 9),
        ("fail", 0),
        ("claim", 1),
    ],
    seed=2,
    yields=False,
)
@given(budget=st.integers(1, 8), steps=steps_st, seed=st.integers(0, 2**32), yields=st.booleans())
def test_the_claim_path_holds_its_invariants_over_any_sequence_of_events(
    budget: int, steps: list[tuple[str, int]], seed: int, yields: bool
) -> None:
    rng = random.Random(seed)

    async def run() -> None:
        # Two holds of no GPUs from elsewhere: something to drop from the start.
        admission, store = await wired(reservation(1, gpus=budget, holds=(0, 0)))
        if yields:
            store.yields = lambda: rng.randint(0, 2)
        one = Run(admission, store, budget)
        one.foreign.update(one.held())
        for kind, value in steps:
            await one.step(kind, value, rng)
            one.assert_ours_shown()
        await one.finish()
        one.assert_ours_shown()
        one.assert_outcomes()
        one.assert_settled()

    asyncio.run(run())
