"""``ledger.claim`` and ``ledger.amend`` over a store with optimistic concurrency."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace

from shared import ledger, model
from shared.errors import Conflict
from shared.model import claim_key
from tests.ledger.fakes import NAMESPACE, NOW, FakeStore, facts, server_error

FAR = 1e12


def store_with(gpus: int = 8, *holds: model.Hold, **overrides) -> FakeStore:
    store = FakeStore()
    store.put(model.GPUReservation(facts(gpus=gpus, **overrides), tuple(holds)))
    return store


async def claim(store: FakeStore, gpus: int, **kw) -> ledger.ClaimResult:
    kw.setdefault("deadline", FAR)
    kw.setdefault("pod", "p")
    return await ledger.claim(store, NAMESPACE, "res-1", gpus, now=NOW, **kw)


def test_admitted_claim_writes_a_hold_to_status() -> None:
    store = store_with(8)
    result = asyncio.run(claim(store, 3, pod="train-0"))
    assert result.admitted
    assert result.reason == "admitted"
    assert result.conflicts == 0
    (held,) = store.reservation("res-1").holds
    assert (held.claim, held.gpus, held.pod, held.at) == (
        claim_key(result.claim or ""),
        3,
        "train-0",
        NOW,
    )
    assert store.stored("res-1")["status"]["usedGpus"] == 3
    assert result.reservation is not None
    assert (
        result.reservation.resource_version == store.stored("res-1")["metadata"]["resourceVersion"]
    )


def test_full_and_too_small_and_not_open_write_nothing() -> None:
    store = store_with(4, model.Hold("x", 3, NOW))
    assert asyncio.run(claim(store, 2)).reason == "full"
    assert asyncio.run(claim(store, 5)).reason == "too_small"
    cancelled = store_with(4, state=model.State.CANCELLED)
    assert asyncio.run(claim(cancelled, 1)).reason == "not_open"
    assert store.writes == cancelled.writes == 0


def test_missing_object_is_not_found() -> None:
    result = asyncio.run(
        ledger.claim(FakeStore(), NAMESPACE, "res-9", 1, pod=None, now=NOW, deadline=FAR)
    )
    assert (result.admitted, result.reason, result.reservation) == (False, "not_found", None)


def test_dry_run_decides_the_same_and_writes_nothing() -> None:
    store = store_with(8)
    result = asyncio.run(claim(store, 2, dry_run=True))
    assert result.admitted
    assert result.claim is not None
    assert store.writes == 0
    assert store.reservation("res-1").holds == ()


def test_conflict_rereads_and_retries() -> None:
    store = store_with(8)
    cached = store.stored("res-1")
    store.bump("res-1", lambda r: ledger.add_hold(r, model.Hold("other", 5, NOW)))
    result = asyncio.run(claim(store, 3, cached=cached))
    assert result.admitted
    assert result.conflicts == 1
    assert ledger.used(store.reservation("res-1")) == 8


def test_conflict_then_full_is_refused() -> None:
    store = store_with(8)
    cached = store.stored("res-1")
    store.bump("res-1", lambda r: ledger.add_hold(r, model.Hold("other", 7, NOW)))
    result = asyncio.run(claim(store, 2, cached=cached))
    assert (result.admitted, result.reason, result.conflicts) == (False, "full", 1)


def test_cached_object_is_used_for_the_first_attempt() -> None:
    store = store_with(8)
    asyncio.run(claim(store, 1, cached=store.stored("res-1")))
    assert store.gets == 0


def test_api_error_is_reason_error() -> None:
    store = store_with(8)
    store.fail_next = [server_error()]
    assert asyncio.run(claim(store, 1)).reason == "error"


def test_malformed_object_is_reason_error() -> None:
    store = store_with(8)
    store.stored("res-1")["spec"]["gpuCount"] = "eight"
    assert asyncio.run(claim(store, 1)).reason == "error"


def test_passed_deadline_starts_no_call() -> None:
    store = store_with(8)
    ticks = itertools.count(10.0)
    result = asyncio.run(claim(store, 1, deadline=5.0, monotonic=lambda: next(ticks)))
    assert result.reason == "deadline"
    assert store.gets == store.writes == 0


def test_endless_conflicts_end_at_the_deadline() -> None:
    store = store_with(8)
    clock = itertools.count(0.0, 1.0)

    async def always_conflict(*args, **kwargs):
        raise Conflict(409, "modified", "Conflict")

    store.patch = always_conflict  # type: ignore[method-assign]
    result = asyncio.run(claim(store, 1, deadline=7.0, monotonic=lambda: next(clock)))
    assert result.reason == "deadline"
    assert result.conflicts >= 2


def test_slow_call_is_cut_off_at_the_deadline() -> None:
    store = store_with(8)

    async def hang(*args, **kwargs):
        await asyncio.sleep(60)

    store.get = hang  # type: ignore[method-assign]

    async def run() -> ledger.ClaimResult:
        loop = asyncio.get_running_loop()
        return await claim(store, 1, deadline=loop.time() + 0.05, monotonic=loop.time)

    assert asyncio.run(run()).reason == "deadline"


def test_amend_applies_a_pure_change_by_cas() -> None:
    store = store_with(8, model.Hold("a", 2, NOW), model.Hold("b", 1, NOW))
    written = asyncio.run(
        ledger.amend(
            store, NAMESPACE, "res-1", lambda r: ledger.drop(r, {"a"}), now=NOW, deadline=FAR
        )
    )
    assert written is not None
    assert [h.claim for h in store.reservation("res-1").holds] == [claim_key("b")]


def test_amend_writes_nothing_when_unchanged() -> None:
    store = store_with(8, model.Hold("a", 2, NOW))
    asyncio.run(ledger.amend(store, NAMESPACE, "res-1", lambda r: r, now=NOW, deadline=FAR))
    assert store.writes == 0


def mark_p1(r: model.GPUReservation) -> model.GPUReservation:
    return ledger.announce_all(r, {"c1": ("p1", "uid-p1")})


def test_amend_from_the_watchs_copy_writes_without_a_read() -> None:
    """The announcer's mark starts from the cache's copy: one JSON Patch, no GET."""
    store = store_with(8, model.Hold("c1", 1, NOW), model.Hold("c2", 1, NOW))
    seen = store.reservation("res-1")
    written = asyncio.run(
        ledger.amend(store, NAMESPACE, "res-1", mark_p1, now=NOW, deadline=FAR, seen=seen)
    )
    assert written is not None
    assert (store.gets, store.writes) == (0, 1)
    held = {h.claim: h for h in store.reservation("res-1").holds}
    assert (held[claim_key("c1")].pod_uid, held[claim_key("c1")].announced) == ("uid-p1", True)


def test_amend_from_a_lagging_copy_reads_again_and_keeps_what_landed_since() -> None:
    """A hold dropped since the copy shifts the index the patch tests: 422, a read, and
    the mark lands on the ledger as it is; a claim appended since stays."""
    store = store_with(8, model.Hold("c0", 1, NOW), model.Hold("c1", 1, NOW))
    seen = store.reservation("res-1")
    store.bump("res-1", lambda r: ledger.drop(r, {"c0"}))
    store.bump("res-1", lambda r: replace(r, holds=(*r.holds, model.Hold("c9", 2, NOW))))
    written = asyncio.run(
        ledger.amend(store, NAMESPACE, "res-1", mark_p1, now=NOW, deadline=FAR, seen=seen)
    )
    assert written is not None
    assert store.gets == 1
    holds = store.reservation("res-1").holds
    assert [(h.claim, h.pod_uid, h.announced) for h in holds] == [
        (claim_key("c1"), "uid-p1", True),
        (claim_key("c9"), None, False),
    ]


def test_amend_believes_no_copy_that_shows_the_change_done() -> None:
    """A copy that already shows the mark may lag a write that undid it (a status
    wiped): the ledger is read, and the mark written there."""
    store = store_with(8, model.Hold("c1", 1, NOW))
    seen = mark_p1(store.reservation("res-1"))
    written = asyncio.run(
        ledger.amend(store, NAMESPACE, "res-1", mark_p1, now=NOW, deadline=FAR, seen=seen)
    )
    assert written is not None
    assert (store.gets, store.writes) == (1, 1)
    assert store.reservation("res-1").holds[0].announced


def test_amend_applies_the_change_again_to_what_the_copy_lacked() -> None:
    """A hold claimed after the copy was taken is missing from it: the write's answer
    shows it, and the change (mark both) is applied to that answer too."""
    store = store_with(8, model.Hold("c1", 1, NOW))
    seen = store.reservation("res-1")
    store.bump("res-1", lambda r: replace(r, holds=(*r.holds, model.Hold("c2", 1, NOW))))

    def mark_both(r: model.GPUReservation) -> model.GPUReservation:
        return ledger.announce_all(r, {"c1": ("p1", "uid-p1"), "c2": ("p2", "uid-p2")})

    written = asyncio.run(
        ledger.amend(store, NAMESPACE, "res-1", mark_both, now=NOW, deadline=FAR, seen=seen)
    )
    assert written is not None
    assert [(h.pod_uid, h.announced) for h in store.reservation("res-1").holds] == [
        ("uid-p1", True),
        ("uid-p2", True),
    ]
    assert (store.gets, store.writes) == (0, 2)


def test_status_write_keeps_unmodelled_status_fields() -> None:
    store = store_with(8)
    store.stored("res-1")["status"]["noShow"] = {"declared": True}
    asyncio.run(claim(store, 1))
    assert store.stored("res-1")["status"]["noShow"] == {"declared": True}
