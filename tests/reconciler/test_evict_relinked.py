"""Review: the evictor must not delete a pod the re-linker has just moved elsewhere."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from reconciler.evict import Evictor
from shared import model, vocab
from tests.reconciler.builders import START
from tests.reconciler.upholdkit import World, facts, raw_pod, run

NOW = START + timedelta(minutes=10)


def world() -> World:
    w = World(NOW)
    w.book(facts(1, state=model.State.CANCELLED))
    w.book(facts(2, gpus=1))  # room for exactly the one pod
    w.add_pod(raw_pod("job", "res-1"), hold_on="res-1")
    return w


def test_a_pod_relinked_before_the_cache_shows_it_is_not_evicted() -> None:
    async def scenario() -> None:
        w = world()
        stale = w.pods()  # the evictor's cache still shows the pod under res-1
        assert await w.relinker.adopt_overstays() == 1
        assert w.notes("job")[vocab.BOOKING_REFERENCE] == "res-2"
        evictor = Evictor(
            w.kube, w.clock, w.emit, w.relinker, lambda: stale, w.reservations,
            lambda: True, zone=None,
        )  # fmt: skip
        await evictor.once()
        assert w.exists("job")
        assert w.notes("job")[vocab.BOOKING_REFERENCE] == "res-2"

    run(scenario())


def test_relinker_and_evictor_racing_on_one_pod_keep_it() -> None:
    async def scenario() -> None:
        w = world()
        w.kube.yields = lambda: 1  # every call lets the other task run
        await asyncio.gather(w.relinker.adopt_overstays(), w.evictor.once())
        assert w.exists("job")
        assert w.notes("job")[vocab.BOOKING_REFERENCE] == "res-2"

    run(scenario())
