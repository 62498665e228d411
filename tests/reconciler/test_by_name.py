"""``Caches.by_name``: one mapping of the cached reservations by name, made again only
once the reservation cache has changed — whatever the order of watch events, relists
and a leader term's reset, it equals the mapping made afresh from the cache."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.base.caches import Caches
from reconciler.base.settings import load
from shared import model
from shared.clock import ManualClock
from shared.gateway import ListResult, WatchEvent
from tests.reconciler.builders import NS, START, relisting


def raw(rid: int, gpus: int, rv: int) -> dict[str, Any]:
    facts = model.ReservationFacts(
        rid, "alice", "a100", "A100", gpus, model.Kind.BOOKING, START,
        START + timedelta(hours=3), model.State.ACTIVE, START,
    )  # fmt: skip
    return model.to_object(model.GPUReservation(facts, (), str(rv)), NS, START)


class Listed:
    """A gateway whose LIST answers ``items``."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    async def list_all(self, *args: Any, **kwargs: Any) -> ListResult:
        return ListResult([dict(o) for o in self.items], "1")


def fresh(c: Caches) -> dict[str, model.GPUReservation]:
    return {r.name: r for r in c.reservations.items.values()}


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["ADDED", "MODIFIED", "DELETED", "relist", "reset", "read"]),
        st.integers(1, 3),
        st.integers(1, 8),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(STEPS)
def test_by_name_is_the_cache_by_name_after_any_changes(steps: list[tuple[str, int, int]]) -> None:
    listed = Listed()
    env = {"RESERVATION_API_URL": "http://app", "RESERVATION_API_KEY": "k"}
    c = Caches(relisting(listed), load(env)[0], ManualClock(START))
    version = 1

    async def scenario() -> None:
        nonlocal version
        for step, rid, gpus in steps:
            before = c.by_name()
            version += 1
            if step == "relist":
                listed.items = [raw(r, gpus, version) for r in range(1, rid + 1)]
                await c.reservations.relist()
            elif step == "reset":
                c.reset()
            elif step == "read":
                assert c.by_name() is before  # nothing changed: the same mapping
            else:
                c.reservations.apply(WatchEvent(step, raw(rid, gpus, version)))
            assert c.by_name() == fresh(c)

    asyncio.run(scenario())


def test_a_change_gives_a_new_mapping_and_leaves_the_old_one_as_it_was() -> None:
    """A caller holding the mapping across an await keeps a consistent snapshot."""
    listed = Listed()
    env = {"RESERVATION_API_URL": "http://app", "RESERVATION_API_KEY": "k"}
    c = Caches(relisting(listed), load(env)[0], ManualClock(START))
    c.reservations.apply(WatchEvent("ADDED", raw(1, 2, 2)))
    held = c.by_name()
    assert c.by_name() is held
    c.reservations.apply(WatchEvent("ADDED", raw(2, 4, 3)))
    assert sorted(c.by_name()) == [model.reference(1), model.reference(2)]
    assert sorted(held) == [model.reference(1)]
