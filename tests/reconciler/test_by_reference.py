"""The pod cache's index by booking reference (``reconciler.base.caches.ByReference``): upkeep
reads one reservation's pods from it, so it must equal a full scan of the cache after
every change — watch events, a relist's differences, a reset."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.base.caches import Caches
from reconciler.base.settings import load
from reconciler.base.upkeep import uses_by_reservation
from reconciler.mirror.sync import referenced_by
from shared import model, vocab
from shared.clock import ManualClock
from shared.gateway import ListResult, WatchEvent
from tests.reconciler.builders import START, relisting
from tests.reconciler.upholdkit import raw_pod

NAMES = ("a", "b", "c")
REFS = (None, "res-1", "res-2")
PHASES = ("Pending", "Running", "Succeeded")


class Listed:
    """A gateway whose LIST answers ``items`` (the pods a relist finds)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    async def list_all(self, *args: Any, **kwargs: Any) -> ListResult:
        return ListResult([dict(o) for o in self.items], "1")


def pod(
    name: str, ref: str | None, phase: str = "Running", uid: str = "", claim: str | None = None
) -> dict[str, Any]:
    raw = raw_pod(name, ref, claim=claim)
    raw["metadata"]["uid"] = uid or f"uid-{name}"
    raw["status"]["phase"] = phase
    return raw


def caches() -> tuple[Caches, Listed]:
    listed = Listed()
    env = {"RESERVATION_API_URL": "http://app", "RESERVATION_API_KEY": "k"}
    built = Caches(relisting(listed), load(env)[0], ManualClock(START))
    return built, listed


# Both sides are compared as sets of uses: sorted by uid and name, since the strategy
# may give two pods one uid ("uid-other"), and a sort by uid alone kept each side's own
# order for them (Hypothesis found it).
def by_index(c: Caches) -> dict[str, list[Any]]:
    found = {name: c.by_reference.uses(name) for name in ("res-1", "res-2")}
    return {
        name: sorted(uses, key=lambda u: (u.uid, u.name)) for name, uses in found.items() if uses
    }


def claims_by_index(c: Caches) -> dict[tuple[str, str], list[str]]:
    found = {}
    for name in ("res-1", "res-2"):
        for claim in (model.claim_key(c) for c in ("c1", "c2", *(f"claim-{n}" for n in NAMES))):
            keys = sorted(p.key for p in c.by_reference.sharing(name, claim))
            if keys:
                found[(name, claim)] = keys
    return found


def claims_by_scan(c: Caches) -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for p in c.pods.items.values():
        if p.reference and p.claim and p.uid and not p.finished:
            found.setdefault((p.reference, p.claim), []).append(p.key)
    return {k: sorted(v) for k, v in found.items()}


def by_scan(c: Caches) -> dict[str, list[Any]]:
    grouped = uses_by_reservation(c.pods.items.values())
    return {name: sorted(uses, key=lambda u: (u.uid, u.name)) for name, uses in grouped.items()}


def test_index_follows_add_update_delete_relist_and_reset() -> None:
    c, listed = caches()
    c.pods.apply(WatchEvent("ADDED", pod("a", "res-1")))
    c.pods.apply(WatchEvent("ADDED", pod("b", "res-1")))
    c.pods.apply(WatchEvent("ADDED", pod("c", None)))
    assert [u.name for u in c.by_reference.uses("res-1")] == ["a", "b"]
    c.pods.apply(WatchEvent("MODIFIED", pod("a", "res-2")))  # re-linked
    assert [u.name for u in c.by_reference.uses("res-1")] == ["b"]
    assert [u.name for u in c.by_reference.uses("res-2")] == ["a"]
    c.pods.apply(WatchEvent("MODIFIED", pod("b", "res-1", "Succeeded")))  # finished
    assert c.by_reference.uses("res-1") == []
    c.pods.apply(WatchEvent("DELETED", pod("a", "res-2")))
    assert by_index(c) == {}
    # Missed while away: the relist's differences keep the index right.
    listed.items = [pod("a", "res-1", uid="uid-a2"), pod("c", "res-2")]
    asyncio.run(c.pods.relist())
    assert by_index(c) == by_scan(c)
    assert [u.uid for u in c.by_reference.uses("res-1")] == ["uid-a2"]
    c.reset()
    assert by_index(c) == {}
    assert claims_by_index(c) == {}
    asyncio.run(c.pods.relist())
    assert by_index(c) == by_scan(c) != {}
    assert claims_by_index(c) == claims_by_scan(c) != {}


def test_a_pod_keeps_its_place_while_it_stays_under_its_reservation() -> None:
    """Holds are rebuilt in the index's order: an update must not reorder them (a
    reordered ledger would read as stale and be written again)."""
    c, _ = caches()
    for name in NAMES:
        c.pods.apply(WatchEvent("ADDED", pod(name, "res-1")))
    c.pods.apply(WatchEvent("MODIFIED", pod("a", "res-1", "Pending")))
    assert [u.name for u in c.by_reference.uses("res-1")] == ["a", "b", "c"]


EVENT = st.tuples(
    st.sampled_from(("ADDED", "MODIFIED", "DELETED")),
    st.sampled_from(NAMES),
    st.sampled_from(REFS),
    st.sampled_from(PHASES),
    st.sampled_from(("", "uid-other")),
    st.sampled_from((None, "c1", "c2")),
)
RELIST = st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(REFS)), max_size=3)
STEP = st.one_of(EVENT, RELIST.map(lambda pods: ("relist", pods)), st.just(("reset",)))


@settings(max_examples=150, deadline=None)
@given(st.lists(STEP, max_size=25))
def test_index_equals_a_full_scan_after_every_change(steps: list[Any]) -> None:
    c, listed = caches()
    for step in steps:
        if step[0] == "relist":
            listed.items = [pod(name, ref) for name, ref in dict(step[1]).items()]
            asyncio.run(c.pods.relist())
        elif step[0] == "reset":
            c.reset()
        else:
            kind, name, ref, phase, uid, claim = step
            c.pods.apply(WatchEvent(kind, pod(name, ref, phase, uid, claim)))
        assert by_index(c) == by_scan(c)
        assert claims_by_index(c) == claims_by_scan(c)


# A pod as a LIST finds it: any reference (or a malformed one), labelled or not (a user
# may remove the label), asking for a GPU or none, in any phase.
RAW_POD = st.tuples(
    st.sampled_from((*REFS, "res-x")),
    st.booleans(),
    st.sampled_from(("0", "1")),
    st.sampled_from((*PHASES, "Failed")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(RAW_POD, max_size=6))
def test_the_caches_live_references_are_what_a_list_of_every_pod_finds(raw: list[Any]) -> None:
    """The full sync asks the pod cache instead of listing every pod: both must name
    the same reservations, whatever the pods' labels, GPUs and phases."""
    c, listed = caches()
    assert c.live_references() is None  # no full LIST yet: unknown
    listed.items = []
    for n, (ref, labelled, gpus, phase) in enumerate(raw):
        obj = pod(f"p{n}", ref, phase)
        obj["spec"]["containers"][0]["resources"] = {"limits": {vocab.GPU_RESOURCE: gpus}}
        if not labelled:
            del obj["metadata"]["labels"]
        listed.items.append(obj)
    asyncio.run(c.pods.relist())
    assert c.live_references() == referenced_by(listed.items)


def test_a_failing_pod_watch_leaves_the_live_references_unknown() -> None:
    c, listed = caches()
    listed.items = [pod("a", "res-1")]
    asyncio.run(c.pods.relist())
    assert c.live_references() == {"res-1"}
    c.pods.failing_since = 0.0  # what ``Watched.run`` records when a LIST/WATCH fails
    assert c.live_references() is None
    asyncio.run(c.pods.relist())
    assert c.live_references() == {"res-1"}
    c.reset()
    assert c.live_references() is None
