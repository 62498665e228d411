"""``ledger.decide_group`` (pure) and ``ledger.claim_group``: many asks, one write."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from shared import ledger, model
from shared.errors import Conflict
from tests.ledger.fakes import NAMESPACE, NOW, FakeStore, facts, server_error

FAR = 1e12


def store_with(gpus: int, *holds: model.Hold) -> FakeStore:
    store = FakeStore()
    store.put(model.GPUReservation(facts(gpus=gpus), tuple(holds)))
    return store


def asks(*sizes: int) -> list[ledger.Ask]:
    return [ledger.Ask(g, f"p{i}", NOW) for i, g in enumerate(sizes)]


def group(store: FakeStore, *sizes: int, **kw) -> list[ledger.ClaimResult]:
    kw.setdefault("deadline", FAR)
    return asyncio.run(ledger.claim_group(store, NAMESPACE, "res-1", asks(*sizes), **kw))


def test_decide_group_admits_in_order_while_the_budget_lasts() -> None:
    res = model.GPUReservation(facts(gpus=5))
    updated, reasons, new = ledger.decide_group(res, asks(2, 9, 2, 2, 1), list("abcde"))
    assert reasons == ["admitted", "too_small", "admitted", "full", "admitted"]
    assert [h.claim for h in new] == ["a", "c", "e"]
    assert ledger.used(updated) == 5


def test_one_write_carries_every_admitted_ask() -> None:
    store = store_with(8, model.Hold("old", 2, NOW, "p-old", "uid-old"))
    results = group(store, 1, 2, 3)
    assert store.writes == 1
    assert [r.reason for r in results] == ["admitted"] * 3
    holds = store.reservation("res-1").holds
    assert [h.claim for h in holds] == ["old", *(r.claim for r in results)]
    assert [(h.gpus, h.pod) for h in holds[1:]] == [(1, "p0"), (2, "p1"), (3, "p2")]
    assert store.stored("res-1")["status"]["usedGpus"] == 8


def test_each_ask_is_told_its_own_outcome() -> None:
    store = store_with(4)
    results = group(store, 3, 2, 1)
    assert [(r.admitted, r.reason) for r in results] == [
        (True, "admitted"),
        (False, "full"),
        (True, "admitted"),
    ]
    assert results[1].claim is None
    assert all(r.raw is not None for r in results)


def test_nothing_fits_writes_nothing() -> None:
    store = store_with(2, model.Hold("old", 2, NOW))
    results = group(store, 1, 1)
    assert store.writes == 0
    assert [r.reason for r in results] == ["full", "full"]


def test_stored_hold_entries_go_back_verbatim() -> None:
    """Only new holds are encoded: an old entry's text is written back as it was read
    (here an instant with an offset, which re-encoding would have rewritten)."""
    store = store_with(8)
    store.stored("res-1")["status"]["holds"] = [
        {"claim": "old", "gpus": 1, "at": "2026-01-05T11:00:00+01:00", "pod": "x"}
    ]
    group(store, 1)
    entries = store.stored("res-1")["status"]["holds"]
    assert entries[0] == {"claim": "old", "gpus": 1, "at": "2026-01-05T11:00:00+01:00", "pod": "x"}
    assert entries[1]["gpus"] == 1


def test_appended_body_matches_a_full_encoding() -> None:
    res = model.GPUReservation(facts(gpus=8), (model.Hold("a", 1, NOW, "p", "u", True),))
    raw = model.to_object(res, NAMESPACE, NOW)
    new = model.Hold("b", 2, NOW, "q")
    updated = ledger.add_hold(res, new)
    assert ledger.appended_body(raw, updated, [new], NOW) == ledger.status_body(raw, updated, NOW)


@pytest.mark.parametrize("parsed", [False, True], ids=["raw-cached", "parsed-cached-too"])
def test_a_conflict_redecides_the_whole_group_on_the_fresh_ledger(parsed: bool) -> None:
    """Someone else took 3 of 4 GPUs between our read and write: of the group (1, 1)
    only the first still fits (a cached parse is for the first decision only)."""
    store = store_with(4)
    cached = store.stored("res-1")
    cached_parsed = model.from_object(cached) if parsed else None
    store.bump("res-1", lambda r: ledger.add_hold(r, model.Hold("other", 3, NOW)))
    results = group(store, 1, 1, cached=cached, cached_parsed=cached_parsed)
    assert [r.reason for r in results] == ["admitted", "full"]
    assert all(r.conflicts == 1 for r in results)
    assert ledger.used(store.reservation("res-1")) == 4


def test_a_stop_is_every_asks_reason() -> None:
    store = store_with(8)
    store.fail_next = [server_error()]
    assert [r.reason for r in group(store, 1, 1)] == ["error", "error"]
    assert store.writes == 0


def test_endless_conflicts_end_every_ask_at_the_deadline() -> None:
    store = store_with(8)
    clock = itertools.count(0.0, 1.0)

    async def always_conflict(*args, **kwargs):
        raise Conflict(409, "modified", "Conflict")

    store.replace = always_conflict  # type: ignore[method-assign]
    results = group(store, 1, 2, deadline=7.0, monotonic=lambda: next(clock))
    assert [r.reason for r in results] == ["deadline", "deadline"]
    assert not any(r.admitted for r in results)


def test_a_cached_parse_is_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the cache's parse of the cached object, a write parses only the server's echo."""
    store = store_with(8)
    cached = store.stored("res-1")
    parses: list[str] = []
    real = model.from_object

    def counted(obj: dict[str, object]) -> model.GPUReservation:
        parses.append(str(obj["metadata"]["resourceVersion"]))  # type: ignore[index]
        return real(obj)

    monkeypatch.setattr(model, "from_object", counted)
    group(store, 1, cached=cached)
    assert len(parses) == 2
    parses.clear()
    fresh = store.stored("res-1")
    results = group(store, 1, cached=fresh, cached_parsed=real(fresh))
    assert [r.reason for r in results] == ["admitted"]
    assert parses == [results[0].reservation.resource_version]  # type: ignore[union-attr]
