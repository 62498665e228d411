"""Review: the evictor must not delete a pod the re-linker has just moved elsewhere."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

from reconciler.queue.evict import Evictor
from shared import model, vocab
from shared.errors import Forbidden, ServerError
from shared.resources import PODS
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
        stale = w.pods()  # the second evictor's cache still shows the pod under res-1
        assert await w.evictor.once() == 1  # re-linked onto res-2
        assert w.notes("job")[vocab.BOOKING_REFERENCE] == "res-2"
        evictor = Evictor(replace(w.context, pods=lambda: stale), zone=None)
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


def test_a_relink_patch_whose_answer_was_lost_but_that_landed_counts_as_moved() -> None:
    async def scenario() -> None:
        w = world()
        original = w.kube.patch

        async def lost(res: Any, name: str, patch: Any, *args: Any, **kw: Any) -> Any:
            got = await original(res, name, patch, *args, **kw)
            if res is PODS:
                raise ServerError(0, f"PATCH {name}: no answer within 10.0s")
            return got

        w.kube.patch = lost  # type: ignore[method-assign]
        await w.evictor.once()
        assert w.exists("job")
        claim = w.notes("job")[vocab.ADMISSION_CLAIM]
        assert w.notes("job")[vocab.BOOKING_REFERENCE] == "res-2"
        assert [h.claim for h in w.reservations()["res-2"].holds] == [model.claim_key(claim)]
        assert w.reservations()["res-1"].holds == ()

    run(scenario())


def test_a_refused_relink_is_not_retried_until_the_pod_changes_or_the_tick() -> None:
    async def scenario() -> None:
        now = START + timedelta(hours=2, minutes=10)
        w = World(now)
        w.book(facts(1, START, START + timedelta(hours=1), gpus=4))
        w.book(facts(2, START + timedelta(hours=2), START + timedelta(hours=3)))
        w.add_pod(raw_pod("job", "res-1"), hold_on="res-1")
        w.kube.faults["patch pods"] = Forbidden(403, "denied by policy", "Forbidden")
        writes: list[str] = []
        w.kube.on_write = lambda obj: writes.append(obj.get("kind", ""))
        # Each refused move writes the reservation twice (claim, release), and that
        # write wakes the re-linker again: it must not simply try again.
        assert await w.relinker.adopt_overstays() == 0
        assert await w.relinker.adopt_overstays() == 0
        assert writes.count(vocab.CRD_KIND) == 2
        del w.kube.faults["patch pods"]
        await w.clock.advance(300)
        assert await w.relinker.adopt_overstays() == 1

    run(scenario())


def test_a_pod_of_a_booking_cancelled_mid_window_is_relinked_as_replaced_not_overstay() -> None:
    async def scenario() -> None:
        w = world()
        # The overstay pass runs first on the reservation change: it leaves the pod to
        # the cancellation path, which re-links it with the cancellation's Event.
        assert await w.relinker.adopt_overstays() == 0
        assert await w.evictor.once() == 1
        assert w.notes("job")[vocab.BOOKING_REFERENCE] == "res-2"
        assert vocab.REASON_RESERVATION_RELINKED in w.emit.reasons()
        assert vocab.REASON_OVERSTAY_RELINKED not in w.emit.reasons()

    run(scenario())
