"""``webhook.groupcommit.GroupCommit``'s spare holds: a burst's write appends unbound
holds ahead of demand, and the next claims of that size are answered from them.

What must hold whatever the interleaving (property, two replicas, a releaser, injected
conflicts): the budget is never exceeded, each spare goes to one caller, every caller
admitted holds a hold, and the holds nobody was given are this replica's spares. Then
each rule of giving them back: unused for ``idle_s``, older than ``max_age_s``, a claim
of another size, shutdown, a booking shrunk below its holds. Writes are held in flight
by the store's gates (``test_groupcommit_pipeline.Gated``); nothing asserts wall-clock
durations (the idle tests sleep only to let a timer fire).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import ledger, model, vocab
from shared.clock import ManualClock
from shared.ledger import Ask, ClaimResult
from tests.ledger.fakes import NAMESPACE, NOW, FakeStore, facts, inject_conflicts
from tests.policy import builders
from tests.webhook.helpers import CONTROLLER_NS, StoreGateway, call, patched, policy, review
from tests.webhook.test_groupcommit_pipeline import Gated
from webhook.cache import ReservationCache
from webhook.groupcommit import GroupCommit, SpareRules
from webhook.handler import Admission
from webhook.metrics import Metrics

FAR = 1e12
NAME = "res-1"
#: A booking with room for spares (``min_room`` 32, at most a quarter of the room).
BIG = 100
#: idle_s of the idle tests: a power of two, so the fake clock's sums are exact.
IDLE = 2.0**-5


class Wall:
    """The ``now`` clock the spares are aged by; moves only when a test sets ``at``."""

    def __init__(self, at: datetime = NOW) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


class Ticks:
    """A monotonic clock that moves only when a test advances it (never at 0, which the
    spares take for "never touched")."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def store_with(gpus: int, yields: Callable[[], int] = lambda: 1) -> FakeStore:
    store = FakeStore(yields=yields)
    store.put(model.GPUReservation(facts(gpus=gpus)))
    return store


def spare_commit(
    store: FakeStore,
    *,
    most: int = 4,
    idle_s: float = 3600.0,
    max_age_s: float = 60.0,
    min_room: int = 32,
    now: Callable[[], datetime] = lambda: NOW,
    events: Counter[str] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> GroupCommit:
    """A group commit keeping spares, reading its first copy from the store and deciding
    the spares' room on the stored reservation (as the handler's cache would give it)."""
    heard: Counter[str] = events if events is not None else Counter()
    return GroupCommit(
        store,
        NAMESPACE,
        lambda name: None,
        lambda result: None,
        parsed=store.reservation,
        spares=SpareRules(most, idle_s, max_age_s, min_room),
        now=now,
        spare_events=lambda event, count: heard.update({event: count}),
        monotonic=monotonic,
    )


def holds_of(store: FakeStore) -> dict[str, model.Hold]:
    return {h.claim: h for h in store.reservation(NAME).holds}


def ids(results: list[ClaimResult]) -> list[str]:
    return [r.claim for r in results if r.admitted and r.claim is not None]


async def burst(
    group: GroupCommit, sizes: list[int], at: datetime = NOW, deadline: float = FAR
) -> list[ClaimResult]:
    return list(
        await asyncio.gather(*(group.claim(NAME, Ask(g, None, at), deadline) for g in sizes))
    )


def claim(
    group: GroupCommit, gpus: int, pod: str, deadline: float = FAR, at: datetime = NOW
) -> asyncio.Task[ClaimResult]:
    """A claim task; ``pod`` only labels it in the test: spares go to pods without a name
    (``generateName``), so every ask here has none."""
    return asyncio.ensure_future(group.claim(NAME, Ask(gpus, None, at), deadline))


async def quiet(*groups: GroupCommit, passes: int = 5000) -> None:
    """Until no write and no background drop of ``groups`` is left running."""
    for _ in range(passes):
        if all(g.idle and not g._tasks for g in groups):
            return
        await asyncio.sleep(0)
    raise AssertionError("group commit still busy")


async def until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    """Sleep in short steps until ``check()`` holds (a bound against hanging, not a
    timing assertion)."""
    for _ in range(int(seconds / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


# --- a burst writes spares, the next claims take them ---------------------------------


def test_claims_after_a_burst_are_answered_from_its_spares_oldest_first_each_once() -> None:
    """A burst's write appends ``most`` spares; the next claims of that size take them
    in the order they were written with no write of their own; the ones after that take
    the refills, and no claim id is ever given twice."""
    store = store_with(BIG)
    events: Counter[str] = Counter()
    group = spare_commit(store, most=8, events=events)

    async def run() -> tuple[list[ClaimResult], list[str], list[ClaimResult], list[ClaimResult]]:
        first = await burst(group, [1, 1])
        assert (store.writes, group.writes) == (1, 1)
        spares = [c for c in holds_of(store) if c not in ids(first)]  # as stored: oldest first
        assert set(spares) == group.hidden(NAME)
        taken = [await group.claim(NAME, Ask(1, None, NOW), FAR) for i in range(4)]
        assert (store.writes, group.writes) == (1, 1)  # four left of eight: no refill yet
        more = [await group.claim(NAME, Ask(1, None, NOW), FAR) for i in range(20)]
        await quiet(group)
        return first, spares, taken, more

    first, spares, taken, more = asyncio.run(run())
    assert len(spares) == 8
    assert events["written"] >= 8
    assert [r.reason for r in taken + more] == ["admitted"] * 24
    assert ids(taken) == spares[:4]  # oldest first
    admitted = ids(first + taken + more)
    assert len(set(admitted)) == len(admitted) == 26
    holds = holds_of(store)
    assert set(admitted) <= set(holds)
    assert all(holds[c].gpus == 1 for c in admitted)
    assert set(holds) - set(admitted) == group.hidden(NAME)  # the rest: spares still kept
    assert events["used"] == 24
    assert 1 < group.writes == store.writes  # refills, and no drop
    assert ledger.used(store.reservation(NAME)) <= BIG


@pytest.mark.parametrize(
    ("gpus", "sizes", "spares"),
    [
        (40, [2, 2], 4),  # 36 GPUs left: a quarter is 9, four spares of 2
        (34, [1, 1], 8),  # 32 left (min_room): a quarter, eight spares of 1
        (33, [1, 1], 0),  # 31 left, under min_room: none
        (BIG, [1, 1], 16),  # 98 left: ``most`` (16) before the quarter (24)
    ],
)
def test_spares_are_at_most_a_quarter_of_the_room_the_group_leaves_and_need_min_room(
    gpus: int, sizes: list[int], spares: int
) -> None:
    store = store_with(gpus)
    group = spare_commit(store, most=16, min_room=32)
    first = asyncio.run(burst(group, sizes))
    assert all(r.admitted for r in first)
    kept = set(holds_of(store)) - set(ids(first))
    assert len(kept) == spares
    assert all(holds_of(store)[c].gpus == sizes[0] for c in kept)
    assert group.keeping == bool(spares)


def test_a_lone_claim_with_no_spares_about_writes_none() -> None:
    """Spares are made while claims keep coming: one claim alone writes only its own."""
    store = store_with(BIG)
    group = spare_commit(store)
    (result,) = asyncio.run(burst(group, [1]))
    assert result.admitted
    assert set(holds_of(store)) == {result.claim}
    assert not group.keeping


# --- property: two replicas with spares, a releaser, injected conflicts -----------------


class Run:
    """Two replicas keeping spares claim on one reservation while a releaser drops
    random holds (spares included) and the store refuses some writes with a 409."""

    def __init__(
        self, budget: int, rng: random.Random, conflict_rate: float, most: int, min_room: int
    ) -> None:
        self.budget = budget
        self.store = store_with(budget, yields=lambda: rng.randint(0, 3))
        self.store.on_write = self.check
        self.rng = rng
        inject_conflicts(self.store, rng, conflict_rate)
        self.events: Counter[str] = Counter()
        self.replicas = [
            spare_commit(self.store, most=most, min_room=min_room, events=self.events) for _ in "ab"
        ]
        self.results: list[tuple[int, ClaimResult]] = []
        #: Claim ids the releaser's writes dropped.
        self.released: set[str] = set()

    def check(self, obj: dict[str, Any]) -> None:
        assert sum(h["gpus"] for h in obj["status"]["holds"]) <= self.budget

    async def claimer(self, replica: GroupCommit, sizes: list[int]) -> None:
        for gpus in sizes:
            await asyncio.sleep(0)
            self.results.append((gpus, await replica.claim(NAME, Ask(gpus, None, NOW), FAR)))

    async def releaser(self, rounds: int) -> None:
        chosen: list[str | None] = [None]

        def release_one(res: model.GPUReservation) -> model.GPUReservation:
            chosen[0] = None
            if not res.holds:
                return res
            gone = chosen[0] = self.rng.choice(res.holds).claim
            return ledger.drop(res, {gone})

        for _ in range(rounds):
            await asyncio.sleep(0)
            got = await ledger.amend(
                self.store, NAMESPACE, NAME, release_one, now=NOW, deadline=FAR
            )
            if got is not None and chosen[0] is not None:
                self.released.add(chosen[0])  # the change of the attempt that landed

    async def run(self, plans: list[list[int]], releases: int) -> None:
        claimers = [self.claimer(self.replicas[i % 2], p) for i, p in enumerate(plans)]
        await asyncio.gather(*claimers, self.releaser(releases))
        await quiet(*self.replicas)

    def admitted(self) -> list[str]:
        return ids([r for _, r in self.results])

    def hidden(self) -> frozenset[str]:
        return self.replicas[0].hidden(NAME) | self.replicas[1].hidden(NAME)

    async def close(self) -> None:
        for replica in self.replicas:
            await replica.close()


#: Mostly one size, so spares are written and taken as well as dropped for another size.
plans_st = st.lists(st.lists(st.sampled_from([1, 1, 1, 2, 3]), max_size=6), min_size=1, max_size=8)


@settings(max_examples=100, deadline=None)
@given(
    budget=st.integers(1, 48),
    plans=plans_st,
    releases=st.integers(0, 8),
    conflict_rate=st.sampled_from([0.0, 0.2, 0.5]),
    most=st.sampled_from([1, 2, 4]),
    min_room=st.sampled_from([0, 4, 32]),
    seed=st.integers(0, 2**32),
)
def test_spares_never_exceed_the_budget_and_each_goes_to_one_caller(
    budget, plans, releases, conflict_rate, most, min_room, seed
) -> None:
    run = Run(budget, random.Random(seed), conflict_rate, most, min_room)

    async def go() -> tuple[set[str], frozenset[str]]:
        await run.run(plans, releases)
        return set(holds_of(run.store)), run.hidden()

    holds, hidden = asyncio.run(go())
    admitted = run.admitted()
    assert len(set(admitted)) == len(admitted)
    assert set(admitted) - run.released <= holds
    assert holds - set(admitted) <= hidden  # whatever nobody was given is a kept spare
    assert ledger.used(run.store.reservation(NAME)) <= budget
    for gpus, result in run.results:
        assert result.reason in {"admitted", "full", "too_small"}, result
        if result.reason == "full" and result.reservation is not None:
            assert ledger.used(result.reservation) + gpus > budget


@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(1, 48),
    plans=plans_st,
    most=st.sampled_from([1, 2, 4]),
    min_room=st.sampled_from([0, 4, 32]),
    seed=st.integers(0, 2**32),
)
def test_without_releases_the_holds_are_the_admitted_claims_and_the_spares_kept(
    budget, plans, most, min_room, seed
) -> None:
    """Once both replicas are closed (which gives their spares back) the holds are
    exactly the callers admitted."""
    run = Run(budget, random.Random(seed), 0.2, most, min_room)

    async def go() -> tuple[dict[str, int], frozenset[str], dict[str, int]]:
        await run.run(plans, releases=0)
        before = {c: h.gpus for c, h in holds_of(run.store).items()}
        hidden = run.hidden()
        await run.close()
        return before, hidden, {c: h.gpus for c, h in holds_of(run.store).items()}

    before, hidden, after = asyncio.run(go())
    admitted = {r.claim: g for g, r in run.results if r.admitted}
    assert len(admitted) == len(run.admitted())
    assert set(admitted) <= set(before)
    assert set(before) - set(admitted) == hidden
    assert after == admitted
    assert not any(r.keeping for r in run.replicas)


# --- giving spares back -----------------------------------------------------------------


def test_spares_unused_for_idle_s_are_dropped() -> None:
    """With the monotonic clock held still the spares stay however long the loop runs;
    once it has moved ``idle_s`` past their last use, the idle timer drops them."""
    store = store_with(BIG)
    events: Counter[str] = Counter()
    ticks = Ticks()
    group = spare_commit(store, idle_s=IDLE, events=events, monotonic=ticks)

    async def run() -> tuple[list[ClaimResult], set[str], bool]:
        first = await burst(group, [1, 1])
        spares = set(holds_of(store)) - set(ids(first))
        await asyncio.sleep(0.1)  # the timer fires, finds them touched 0 s ago
        assert spares <= set(holds_of(store))
        assert group.keeping
        ticks.t += 1.0
        await until(lambda: not group.keeping and not group._tasks)
        return first, spares, group.keeping

    first, spares, keeping = asyncio.run(run())
    assert len(spares) == 4
    assert set(holds_of(store)) == set(ids(first))
    assert events["dropped"] == 4
    assert not keeping
    assert group.hidden(NAME) == frozenset()


def test_spares_in_use_are_kept_past_idle_s_then_dropped_when_use_stops() -> None:
    store = store_with(BIG)
    events: Counter[str] = Counter()
    ticks = Ticks()
    group = spare_commit(store, most=8, idle_s=IDLE, events=events, monotonic=ticks)

    async def run() -> ClaimResult:
        await burst(group, [1, 1])
        ticks.t += 0.75 * IDLE
        taken = await group.claim(NAME, Ask(1, None, NOW), FAR)  # touched again
        ticks.t += 0.75 * IDLE  # 1.5 idle_s after the write, 0.75 after the use
        await asyncio.sleep(0.1)
        assert events["dropped"] == 0
        assert len(group.hidden(NAME)) == 7
        ticks.t += 1.0
        await until(lambda: not group.keeping and not group._tasks)
        return taken

    taken = asyncio.run(run())
    assert taken.admitted
    assert events["dropped"] == 7
    assert ledger.used(store.reservation(NAME)) == 3


def test_a_spare_older_than_max_age_is_not_given_out_but_dropped() -> None:
    """The claim goes through a write of its own instead; the stale spares leave the
    ledger."""
    store = store_with(BIG)
    wall = Wall()
    events: Counter[str] = Counter()
    group = spare_commit(store, max_age_s=5, now=wall.now, events=events)

    async def run() -> tuple[set[str], ClaimResult]:
        first = await burst(group, [1, 1])
        spares = set(holds_of(store)) - set(ids(first))
        wall.at = NOW + timedelta(seconds=6)
        result = await group.claim(NAME, Ask(1, None, wall.at), FAR)
        await quiet(group)
        return spares, result

    spares, result = asyncio.run(run())
    assert len(spares) == 4
    assert result.admitted
    assert result.claim not in spares
    assert group.writes >= 2  # its own write
    holds = holds_of(store)
    assert result.claim in holds
    assert not spares & set(holds)
    assert events["dropped"] == 4
    assert events["used"] == 0


def test_a_spare_is_aged_from_its_holds_stored_instant_in_whole_seconds() -> None:
    """The burst claims at 0.9 s past a second; the hold stores the whole second, and
    the reconciler's TTL counts from that: 5.5 s later by the claim's clock the spare
    is 6.4 s old as stored, past a 6 s limit."""
    store = store_with(BIG)
    made = NOW + timedelta(milliseconds=900)
    wall = Wall(made)
    group = spare_commit(store, max_age_s=6, now=wall.now)

    async def run() -> tuple[set[str], ClaimResult, ClaimResult]:
        first = await burst(group, [1, 1], at=made)
        spares = set(holds_of(store)) - set(ids(first))
        wall.at = made + timedelta(seconds=5)  # 5.9 s after the stored instant
        young = await group.claim(NAME, Ask(1, None, wall.at), FAR)
        wall.at = made + timedelta(seconds=5.5)
        old = await group.claim(NAME, Ask(1, None, wall.at), FAR)
        await quiet(group)
        return spares, young, old

    spares, young, old = asyncio.run(run())
    assert young.claim in spares
    assert old.admitted
    assert old.claim not in spares


def test_a_claim_of_another_size_first_drops_the_spares_then_claims() -> None:
    store = store_with(BIG)
    events: Counter[str] = Counter()
    group = spare_commit(store, events=events)

    async def run() -> tuple[list[ClaimResult], set[str], ClaimResult, set[str]]:
        first = await burst(group, [1, 1])
        spares = set(holds_of(store)) - set(ids(first))
        other = await group.claim(NAME, Ask(2, None, NOW), FAR)
        held = set(holds_of(store))  # the drop was awaited before the claim
        await quiet(group)
        return first, spares, other, held

    first, spares, other, held = asyncio.run(run())
    assert len(spares) == 4
    assert other.admitted
    assert other.claim not in spares
    assert not spares & held
    holds = holds_of(store)
    assert other.claim is not None
    assert holds[other.claim].gpus == 2
    assert set(ids(first)) <= set(holds)
    assert events["dropped"] == 4
    assert events["used"] == 0


def test_a_lone_claim_of_another_size_after_a_burst_whose_spares_went_unused_writes_none() -> None:
    store = store_with(BIG)
    group = spare_commit(store)

    async def run() -> ClaimResult:
        await burst(group, [1, 1])
        other = await group.claim(NAME, Ask(2, None, NOW), FAR)
        await quiet(group)
        return other

    other = asyncio.run(run())
    assert other.admitted
    assert group.hidden(NAME) == frozenset()


def test_close_drops_the_spares() -> None:
    store = store_with(BIG)
    events: Counter[str] = Counter()
    group = spare_commit(store, events=events)

    async def run() -> list[ClaimResult]:
        first = await burst(group, [1, 1])
        assert len(holds_of(store)) == 6
        await group.close()
        return first

    first = asyncio.run(run())
    assert set(holds_of(store)) == set(ids(first))
    assert events["dropped"] == 4
    assert not group.keeping


# --- callers arriving while spares are being written -------------------------------------


def test_a_caller_arriving_while_spares_are_written_waits_and_takes_one() -> None:
    """Callers the write in flight brings spares for wait for it and take them with no
    write of their own; one more than it brings joins a write as usual."""
    store = store_with(BIG)
    group = spare_commit(store, most=2)

    async def run() -> tuple[list[ClaimResult], frozenset[str], list[ClaimResult], int]:
        gated = Gated(store)
        first = [claim(group, 1, "a"), claim(group, 1, "b")]
        await gated.sent(1)
        coming = group.hidden(NAME)  # the spares the write in flight appends
        waiters = [claim(group, 1, "c"), claim(group, 1, "d")]
        for _ in range(20):
            await asyncio.sleep(0)
        sent = len(gated.gates)  # still the burst's write alone
        extra = claim(group, 1, "e")  # two spares coming, two callers waiting for them
        await gated.drain()
        done = list(await asyncio.gather(*first, *waiters, extra))
        await quiet(group)
        return done, coming, done[2:], sent

    done, coming, later, sent = asyncio.run(run())
    assert sent == 1
    assert len(coming) == 2
    assert [r.reason for r in done] == ["admitted"] * 5
    waited, extra = later[:2], later[2]
    assert set(ids(waited)) == coming
    assert extra.claim not in coming
    assert group.writes == 2  # the burst's, and the extra caller's
    assert set(ids(done)) <= set(holds_of(store))
    assert len(set(ids(done))) == 5


def test_callers_a_write_brings_too_few_spares_for_claim_as_usual() -> None:
    """Another writer takes room while the burst's write is in flight: it re-decides and
    lands one spare of the four it meant; the first caller waiting takes it, the second
    is released to a write of its own (here: refused, the booking is full)."""
    store = store_with(BIG)
    group = spare_commit(store)

    async def run() -> tuple[frozenset[str], list[ClaimResult], set[str]]:
        gated = Gated(store)
        first = [claim(group, 1, "a"), claim(group, 1, "b")]
        await gated.sent(1)
        coming = group.hidden(NAME)
        waiters = [claim(group, 1, "c"), claim(group, 1, "d")]
        await asyncio.sleep(0)
        store.bump(NAME, lambda r: ledger.add_hold(r, model.Hold("elsewhere", BIG - 3, NOW)))
        await gated.drain()
        await asyncio.wait(waiters, timeout=10)  # a bound: the second is never left waiting
        assert all(w.done() for w in waiters)
        done = list(await asyncio.gather(*first, *waiters))
        await quiet(group)
        return coming, done, set(holds_of(store))

    coming, done, holds = asyncio.run(run())
    assert len(coming) == 4
    a, b, c, d = done
    assert (a.reason, b.reason) == ("admitted", "admitted")
    assert c.admitted
    assert c.claim in coming
    assert d.reason == "full"
    assert holds == {a.claim, b.claim, c.claim, "elsewhere"}


def test_a_caller_waiting_for_spares_past_its_deadline_is_told_deadline() -> None:
    store = store_with(BIG)

    async def run() -> tuple[ClaimResult, int, list[ClaimResult], frozenset[str]]:
        loop = asyncio.get_running_loop()
        group = spare_commit(store, monotonic=loop.time)
        gated = Gated(store)
        first = [claim(group, 1, "a"), claim(group, 1, "b")]
        await gated.sent(1)
        waiting = claim(group, 1, "late", loop.time() + 0.02)
        await asyncio.wait([waiting], timeout=10)  # a bound: not answered, it gets a spare
        sent = len(gated.gates)
        await gated.drain()
        done = list(await asyncio.gather(*first))
        late = await waiting
        hidden = group.hidden(NAME)
        await asyncio.gather(group.close(), gated.drain())  # the drop's patch: open its gate
        return late, sent, done, hidden

    late, sent, done, hidden = asyncio.run(run())
    assert late.reason == "deadline"
    assert not late.admitted
    assert sent == 1  # it waited, and started no write
    assert all(r.admitted for r in done)
    assert len(hidden) == 4  # the spare it waited for stays unused


def test_a_booking_shrunk_below_its_holds_gives_no_spare() -> None:
    """The gpu_count drops under the holds (spares included): the spares are dropped,
    none is given out, and the claim goes to a write decided on the stored ledger."""
    store = store_with(BIG)
    events: Counter[str] = Counter()
    group = spare_commit(store, events=events)

    async def run() -> tuple[list[ClaimResult], set[str], ClaimResult]:
        first = await burst(group, [1, 1])
        spares = set(holds_of(store)) - set(ids(first))
        res = store.reservation(NAME)
        store.bump(NAME, lambda r: replace(r, facts=replace(res.facts, gpu_count=4)))
        result = await group.claim(NAME, Ask(1, None, NOW), FAR)
        await quiet(group)
        return first, spares, result

    first, spares, result = asyncio.run(run())
    assert len(spares) == 4
    assert result.claim not in spares
    assert not spares & set(holds_of(store))
    assert events["dropped"] == 4
    assert events["used"] == 0
    assert set(ids(first)) <= set(holds_of(store))
    assert ledger.used(store.reservation(NAME)) <= 4 or not result.admitted


# --- what the decision sees --------------------------------------------------------------


def test_without_spares_leaves_out_exactly_this_replicas_spares() -> None:
    """The view counts this replica's spares as free (another replica's view is the
    reservation itself), keeps the holds as they are, is the same object while nothing
    changed, and a new one once a spare was taken (the taken one now counts)."""
    store = store_with(BIG)
    group = spare_commit(store)
    other = spare_commit(store)

    async def run() -> None:
        first = await burst(group, [1, 1])
        res = store.reservation(NAME)
        spares = {h.claim for h in res.holds} - set(ids(first))
        assert len(spares) == 4
        assert group.hidden(NAME) == spares
        view = group.without_spares(res)
        assert ledger.used(res) == 6
        assert ledger.used(view) == 2  # the two claims; the four spares count as free
        assert view.holds == res.holds
        assert view.facts == res.facts
        assert group.without_spares(res) is view  # kept while nothing changed
        assert other.without_spares(res) is res  # another replica sees them as used
        assert other.hidden(NAME) == frozenset()
        elsewhere = replace(res, facts=replace(res.facts, id=2))
        assert elsewhere.name != NAME
        assert group.without_spares(elsewhere) is elsewhere
        taken = await group.claim(NAME, Ask(1, None, NOW), FAR)
        again = group.without_spares(res)
        assert again is not view
        assert taken.claim in spares
        assert ledger.used(again) == 3  # the taken spare is a pod's now
        await group.close()

    asyncio.run(run())


# --- off ---------------------------------------------------------------------------------


def test_without_spare_rules_the_holds_are_exactly_the_admitted_claims() -> None:
    store = store_with(BIG)
    group = GroupCommit(
        store, NAMESPACE, lambda name: None, lambda result: None, parsed=store.reservation
    )

    async def run() -> list[ClaimResult]:
        first = await burst(group, [1, 1, 1])
        more = [await group.claim(NAME, Ask(1, None, NOW), FAR) for i in range(3)]
        return first + more

    results = asyncio.run(run())
    assert set(holds_of(store)) == set(ids(results))
    assert len(results) == 6
    assert group.writes == store.writes == 4
    assert not group.keeping
    assert group.hidden(NAME) == frozenset()


# --- through the handler: which pods spares go to -------------------------------------


async def admission_with_spares() -> tuple[Admission, StoreGateway]:
    store = StoreGateway(namespace=CONTROLLER_NS)
    store.put(builders.reservation(1, gpus=BIG))
    clock = ManualClock(builders.NOW)
    cache = ReservationCache(store, CONTROLLER_NS, clock)  # type: ignore[arg-type]
    await cache.relist()
    admission = Admission(
        policy(), cache, store, clock, Metrics(), ledger_deadline_s=5,
        spares=SpareRules(4, 3600.0, 60.0, min_room=32),
    )  # fmt: skip
    return admission, store


def job_pod() -> dict[str, Any]:
    """A pod as a controller creates it: ``generateName``, no name yet."""
    pod = builders.PodBuilder(name="x").cls().gpus("1").build()
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "job-"
    return pod


def named_pod(name: str) -> dict[str, Any]:
    return builders.PodBuilder(name=name).cls().gpus("1").build()


def test_a_generate_name_pod_admitted_from_a_spare_is_recognised_on_reinvocation() -> None:
    """A spare names no pod, nor does a ``generateName`` pod's first round: reinvoked,
    the stamped pod is recognised as admitted (no patch, no second hold)."""

    async def run() -> tuple[dict[str, Any], int, int]:
        admission, store = await admission_with_spares()
        await asyncio.gather(*(call(admission, review(job_pod())) for _ in range(2)))
        writes = store.writes
        first = patched(job_pod(), await call(admission, review(job_pod())))
        taken = store.writes - writes
        holds = len(store.reservation("res-1").holds)
        again = await call(admission, review(first))
        assert len(store.reservation("res-1").holds) == holds
        await admission.group.close()
        return again, taken, writes

    again, taken, writes = asyncio.run(run())
    assert writes >= 1
    assert taken == 0  # admitted from a spare: no write of its own
    assert "patch" not in again["response"], again["response"].get("warnings")


def test_a_named_pod_is_never_given_a_spare_and_is_recognised_on_reinvocation() -> None:
    """A named pod's hold must carry its name (the reinvocation check tells a copied
    claim by it): its claim is written with it even while spares are kept, and its
    reinvoked round is recognised."""

    async def run() -> tuple[dict[str, Any], str, model.GPUReservation, frozenset[str]]:
        admission, store = await admission_with_spares()
        await asyncio.gather(*(call(admission, review(job_pod())) for _ in range(2)))
        spares = admission.group.hidden("res-1")
        assert spares  # the burst of controller pods left spares
        writes = store.writes
        first = patched(named_pod("c"), await call(admission, review(named_pod("c"))))
        assert store.writes == writes + 1  # a write of its own
        claim_id = first["metadata"]["annotations"][vocab.ADMISSION_CLAIM]
        again = await call(admission, review(first))
        res = store.reservation("res-1")
        left = admission.group.hidden("res-1")
        await admission.group.close()
        return again, claim_id, res, left

    again, claim_id, res, left = asyncio.run(run())
    assert claim_id not in left
    assert {h.claim: h.pod for h in res.holds}[claim_id] == "c"
    assert "patch" not in again["response"], again["response"].get("warnings")


class LandsUnanswered:
    """While ``holding``, a patch reaches the store at once but its answer never comes
    back (a write the server applies after its caller gave up)."""

    def __init__(self, store: FakeStore) -> None:
        self.holding = True
        self.held = 0
        inner = store.patch

        async def patch(*args: Any, **kwargs: Any) -> Any:
            out = await inner(*args, **kwargs)
            if self.holding:
                self.held += 1
                await asyncio.get_running_loop().create_future()  # never answered
            return out

        store.patch = patch  # type: ignore[method-assign]


def test_close_drops_the_spares_of_a_refill_that_landed_unanswered() -> None:
    """Shutdown cancels the refill in flight and drops its spares too, should it have
    landed: the ledger is left with exactly the admitted claims."""
    store = store_with(BIG)
    group = spare_commit(store, most=8)

    async def run() -> list[str]:
        first = await burst(group, [1, 1])
        lands = LandsUnanswered(store)
        taken = [await group.claim(NAME, Ask(1, None, NOW), FAR) for _ in range(5)]
        await until(lambda: lands.held == 1)  # three left of eight: the refill landed
        assert len(holds_of(store)) == 2 + 8 + 5
        lands.holding = False
        await group.close()
        return ids(first + taken)

    admitted = asyncio.run(run())
    assert set(holds_of(store)) == set(admitted)


def test_the_idle_timer_does_not_spin_while_spares_are_being_written() -> None:
    store = store_with(BIG)
    ticks = Ticks()
    calls = [0]

    def monotonic() -> float:
        calls[0] += 1
        return ticks()

    group = spare_commit(store, idle_s=IDLE, monotonic=monotonic)

    async def run() -> int:
        await burst(group, [1, 1])
        gated = Gated(store)
        for _ in range(3):  # one left of four: a refill, held in flight
            await group.claim(NAME, Ask(1, None, NOW), FAR)
        await gated.sent(1)
        ticks.t += 1.0  # the one left goes idle; its drop is held too
        await until(lambda: len(gated.gates) >= 2)
        before = calls[0]
        for _ in range(100):
            await asyncio.sleep(0)
        spent = calls[0] - before
        await asyncio.gather(group.close(), gated.drain())
        return spent

    assert asyncio.run(run()) < 10
