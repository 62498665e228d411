"""Which of the leader's loops a cache change wakes, and for what (a pass over the pods
touched, or over every pod): counted on the wired process, not timed."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from reconciler.base.pods import project_pod
from reconciler.base.settings import load
from reconciler.process import Reconciler
from shared import model
from shared.clock import ManualClock
from shared.policy.matching import MatchRules
from tests.fakekube import FakeKube
from tests.reconciler.builders import NS, START, FakeSource
from tests.reconciler.upholdkit import facts, raw_pod


def replica() -> Reconciler:
    env = {"RESERVATION_API_URL": "http://a", "RESERVATION_API_KEY": "k", "POD_NAMESPACE": NS}
    settings, _ = load(env)
    return Reconciler(settings, FakeKube(), FakeSource(), ManualClock(START))  # type: ignore[arg-type]


def loops(r: Reconciler) -> dict[str, Any]:
    return {
        "guarantees": r.upholders.keeper.dirty,
        "evictor": r.upholders.evictor.dirty,
        "relinker": r.upholders.relinker.dirty,
        "backstop": r.backstop.dirty,
    }


def drained(r: Reconciler) -> Reconciler:
    """``r`` with every loop's first "everything" taken (as its first pass does)."""
    for dirty in loops(r).values():
        dirty.take()
    return r


def woken(r: Reconciler) -> dict[str, Any]:
    """What each loop would look at next (None: every pod; a set: those pods; False:
    not woken), draining it."""
    seen: dict[str, Any] = {k: d.take() if d.wake.is_set() else False for k, d in loops(r).items()}
    seen["no-shows"] = r.noshows._wake.is_set()
    seen["sweep"] = r.sweeper._wake.is_set()
    r.noshows._wake.clear()
    r.sweeper._wake.clear()
    return seen


def expected(*seen: Any) -> dict[str, Any]:
    """``woken``'s answer, in the order guarantees, evictor, relinker, backstop,
    no-shows, sweep."""
    names = ("guarantees", "evictor", "relinker", "backstop", "no-shows", "sweep")
    return dict(zip(names, seen, strict=True))


def test_a_ledger_only_change_wakes_only_the_loops_that_read_holds() -> None:
    """A claim, a binding or an announcement mark moves a reservation's holds alone: the
    guarantee keeper, evictor, backstop, no-show loop and preemption sweep decide on
    facts and pods and are left alone; the re-linker (its room) is woken only when GPUs
    were freed. A change of facts wakes them all."""

    async def scenario() -> None:
        r = drained(replica())
        res = model.GPUReservation(facts(1), (), "1")
        claimed = replace(res, holds=(model.Hold("c", 1, START),), resource_version="2")
        bound = replace(claimed, holds=(model.Hold("c", 1, START, "p", "u"),), resource_version="3")
        for old, new in ((res, claimed), (claimed, bound)):
            for listener in r.caches.reservations.listeners:
                listener(res.name, old, new)
            # guarantees, evictor, relinker, backstop, no-shows, sweep (None: every pod)
            assert woken(r) == expected(False, False, False, False, False, False)
        released = replace(bound, holds=(), resource_version="4")
        for listener in r.caches.reservations.listeners:
            listener(res.name, bound, released)
        assert woken(r) == expected(False, False, None, False, False, False)
        cancelled = replace(released, facts=replace(res.facts, state=model.State.CANCELLED))
        for listener in r.caches.reservations.listeners:
            listener(res.name, released, cancelled)
        assert woken(r) == expected(None, None, None, None, True, True)

    asyncio.run(scenario())


def test_a_burst_of_admissions_wakes_each_loop_once_for_the_pods_admitted() -> None:
    """Ten pods of one booking admitted (a window opening): one wake-up per loop, over
    those ten pods; the no-show loop once (the booking gained its first holder)."""

    async def scenario() -> None:
        r = drained(replica())
        for i in range(10):
            view = project_pod(raw_pod(f"p{i}", "res-1"), MatchRules())
            assert view is not None
            for listener in r.caches.pods.listeners:
                listener(view.key, None, view)
        keys = {f"alice/p{i}" for i in range(10)}
        assert woken(r) == expected(keys, keys, keys, keys, True, False)

    asyncio.run(scenario())
