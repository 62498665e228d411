"""``ledger.decide_group`` (pure) and ``ledger.claim_group``: many asks, one write."""

from __future__ import annotations

import asyncio
import copy
import itertools
import uuid
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import ledger, model
from shared.errors import Conflict
from shared.model import claim_key
from tests.ledger.fakes import NAMESPACE, NOW, FakeStore, facts, server_error

FAR = 1e12


def store_with(gpus: int, *holds: model.Hold) -> FakeStore:
    store = FakeStore()
    store.put(model.GPUReservation(facts(gpus=gpus), tuple(holds)))
    return store


def asks(*sizes: int) -> list[ledger.Ask]:
    return [ledger.Ask(g, f"p{i}", NOW) for i, g in enumerate(sizes)]


def group(store: FakeStore, *sizes: int, **kw: Any) -> list[ledger.ClaimResult]:
    """One ``write_claims`` of ``sizes``; ``kw``: the plan's fields (``cached`` is its
    ``base``, ``cached_parsed`` its ``parsed``)."""
    kw.setdefault("deadline", FAR)
    names = {"cached": "base", "cached_parsed": "parsed"}
    terms = {names.get(k, k): v for k, v in kw.items()}
    plan = ledger.ClaimPlan(namespace=NAMESPACE, name="res-1", asks=asks(*sizes), **terms)
    return asyncio.run(ledger.write_claims(store, plan))


def test_decide_group_admits_in_order_while_the_budget_lasts() -> None:
    res = model.GPUReservation(facts(gpus=5))
    found = ledger.decide_group(res, asks(2, 9, 2, 2, 1), list("abcde"))
    updated, reasons, new = found.ledger, found.reasons, found.new
    assert reasons == ["admitted", "too_small", "admitted", "full", "admitted"]
    assert [h.claim for h in new] == [claim_key(c) for c in "ace"]
    assert ledger.used(updated) == 5


def test_one_write_carries_every_admitted_ask() -> None:
    store = store_with(8, model.Hold("old", 2, NOW, "p-old", "uid-old"))
    results = group(store, 1, 2, 3)
    assert store.writes == 1
    assert [r.reason for r in results] == ["admitted"] * 3
    holds = store.reservation("res-1").holds
    assert [h.claim for h in holds] == [
        claim_key(c or "") for c in ("old", *(r.claim for r in results))
    ]
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
    assert results[0].raw is not None
    assert results[2].raw is not None
    # The refused ask is told the ledger it was judged on (the read plus the group's
    # admitted holds), not the echo: a drop landing meanwhile may show in the echo.
    refused = results[1].reservation
    assert refused is not None
    assert results[1].raw is None
    assert ledger.used(refused) + 2 > 4


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


def test_appended_ops_give_the_status_a_full_encoding_gives() -> None:
    res = model.GPUReservation(facts(gpus=8), (model.Hold("a", 1, NOW, "p", "u", True),))
    raw = model.to_object(res, NAMESPACE, NOW)
    raw["metadata"]["resourceVersion"] = "7"
    new = model.Hold("b", 2, NOW, "q")
    updated = ledger.add_hold(res, new)
    ops = ledger.appended_ops(raw, updated, [model.hold_to_status(new)], NOW)
    assert ops[0] == {"op": "replace", "path": "/metadata/resourceVersion", "value": "7"}
    assert all(op["path"] != "/status/holds/0" for op in ops)  # stored holds are not sent
    assert jsonpatch.apply_patch(raw, ops) == ledger.status_body(raw, updated, NOW)


@pytest.mark.parametrize(
    "status",
    [None, {}, {"holds": None, "noShow": {"at": "x"}}, {"holds": [], "noShow": {"at": "y"}}],
    ids=["no-status", "empty-status", "null-holds", "empty-holds"],
)
def test_appended_ops_start_a_ledger_that_has_none_yet(status: dict[str, Any] | None) -> None:
    """A ledger without holds gets its status written whole, other status fields as
    they were: the object read may be a re-encoding whose empty status the stored
    object lacks, and an ``add`` under a missing parent would be refused."""
    res = model.GPUReservation(facts(gpus=8))
    raw = model.to_object(res, NAMESPACE, NOW)
    raw["metadata"]["resourceVersion"] = "3"
    if status is None:
        raw.pop("status", None)
    else:
        raw["status"] = status
    new = model.Hold("b", 2, NOW, "q")
    ops = ledger.appended_ops(raw, ledger.add_hold(res, new), [model.hold_to_status(new)], NOW)
    status_after = jsonpatch.apply_patch(raw, ops)["status"]
    assert status_after["holds"] == [model.hold_to_status(new)]
    assert status_after["usedGpus"] == 2
    assert {k: v for k, v in (status or {}).items() if k != "holds"}.items() <= status_after.items()


def test_a_first_hold_leaves_what_others_wrote_to_the_status_since_the_read() -> None:
    """A claim on a ledger with a token but no hold yet lands on a newer object whose
    other status fields changed (the reconciler's usage record): it adds the holds
    and keeps those fields as stored, not as the claimant's cached copy had them."""
    res = model.GPUReservation(facts(gpus=8), token="t1")
    raw = model.to_object(res, NAMESPACE, NOW)
    raw["metadata"].update(uid="u1", generation=1, resourceVersion="3")
    raw["status"]["usage"] = {"closedGpuSeconds": 10}
    stored = copy.deepcopy(raw)
    stored["metadata"]["resourceVersion"] = "4"
    stored["status"]["usage"] = {"closedGpuSeconds": 70}
    new = model.Hold("b", 2, NOW, "q")
    updated = ledger.add_hold(res, new)
    ops = ledger.appended_ops(raw, updated, [model.hold_to_status(new)], NOW)
    assert all(op["path"] != "/status" for op in ops)
    after = jsonpatch.apply_patch(stored, ops)["status"]
    assert after["usage"] == {"closedGpuSeconds": 70}
    assert after["holds"] == [model.hold_to_status(new)]
    assert after["usedGpus"] == 2
    expected = ledger.expected_after(raw, ops)
    assert expected is not None
    assert expected["status"]["holds"] == after["holds"]


def test_a_ledger_read_without_a_resource_version_is_never_written() -> None:
    """Without a version to write against the patch would be unconditional (able to
    land on a ledger it was not decided on): the claim stops with ``error``."""
    store = store_with(8)
    cached = dict(store.stored("res-1"), metadata={"name": "res-1"})
    results = group(store, 1, cached=cached)
    assert [r.reason for r in results] == ["error"]
    assert store.writes == 0


def test_the_view_after_a_write_is_the_answer_parsed() -> None:
    """The cache gets the server's answer parsed, down to the stored instants'
    precision (a new hold's instant is stored to the second)."""
    store = store_with(8, model.Hold("old", 2, NOW, "p-old", "uid-old"))
    late = NOW.replace(microsecond=654321)
    results = asyncio.run(
        ledger.claim_group(store, NAMESPACE, "res-1", [ledger.Ask(1, "p", late)], deadline=FAR)
    )
    assert results[0].raw is not None
    assert results[0].reservation == model.from_object(results[0].raw)
    assert results[0].reservation == store.reservation("res-1")


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

    store.patch = always_conflict  # type: ignore[method-assign]
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


def test_a_re_encoded_cached_object_claims_on_a_ledger_stored_without_status() -> None:
    """The reconciler hands ``model.to_object`` of its view as the cached object: an
    empty ``status`` the stored object (fresh, never written) does not have."""
    store = FakeStore()
    res = model.GPUReservation(facts(gpus=8))
    stored = store.put(res)
    stored.pop("status", None)
    store.stored("res-1").pop("status", None)
    version = store.stored("res-1")["metadata"]["resourceVersion"]
    cached = model.to_object(replace(res, resource_version=version), NAMESPACE, NOW)
    results = group(store, 2, cached=cached)
    assert [r.reason for r in results] == ["admitted"]
    assert ledger.used(store.reservation("res-1")) == 2


@settings(max_examples=200, deadline=None)
@given(
    budget=st.integers(0, 10),
    held=st.lists(st.integers(0, 4), max_size=5),
    sizes=st.lists(st.integers(-1, 12), max_size=8),
    state=st.sampled_from(list(model.State)),
)
def test_decide_group_is_the_asks_made_one_after_another(budget, held, sizes, state) -> None:
    """The group's outcome equals ``verdict`` + ``add_hold`` per ask in order."""
    res = model.GPUReservation(
        facts(gpus=budget, state=state),
        tuple(model.Hold(f"h{i}", g, NOW) for i, g in enumerate(held)),
    )
    ids = [f"c{i}" for i in range(len(sizes))]
    found = ledger.decide_group(res, asks(*sizes), ids)
    updated, reasons, new = found.ledger, found.reasons, found.new
    expected, one_by_one = res, []
    for ask, claim_id in zip(asks(*sizes), ids, strict=True):
        reason = ledger.verdict(expected, ask.gpus, ask.now)
        one_by_one.append(reason)
        if reason == "admitted":
            hold = model.Hold(claim_id, ask.gpus, ask.now, pod=ask.pod)
            expected = ledger.add_hold(expected, hold)
    assert reasons == one_by_one
    assert updated.holds == expected.holds
    assert ledger.used(updated) == ledger.used(expected) <= max(budget, ledger.used(res))
    assert [h.claim for h in new] == [
        claim_key(c) for c, r in zip(ids, reasons, strict=True) if r == "admitted"
    ]


# --- echo=False: the answer to a write that lands is not read --------------------------


class Quiet(FakeStore):
    """The store, recording what each patch asked of its answer."""

    def __init__(self) -> None:
        super().__init__()
        self.read_answers: list[bool] = []

    async def patch(self, *args: Any, read_answer: bool = True, **kw: Any) -> dict[str, Any]:
        self.read_answers.append(read_answer)
        await super().patch(*args, **kw)
        return {} if not read_answer else self.stored("res-1")


def test_without_echo_the_answer_is_not_read_and_the_result_is_what_the_write_left() -> None:
    store = Quiet()
    store.put(model.GPUReservation(facts(gpus=8), (model.Hold("old", 2, NOW, "p-old", "u"),)))
    read = store.stored("res-1")
    results = group(store, 1, 9, 2, cached=read, echo=False)
    assert store.read_answers == [False]
    assert [r.reason for r in results] == ["admitted", "too_small", "admitted"]
    admitted = results[0]
    landed = admitted.landed
    assert landed is not None
    assert admitted.raw is not None
    assert admitted.reservation is not None
    # The object and ledger expected are the stored ones, but for the resourceVersion.
    stored = store.stored("res-1")
    assert admitted.raw["status"] == stored["status"]
    assert "resourceVersion" not in admitted.raw["metadata"]
    assert admitted.reservation.holds == store.reservation("res-1").holds
    assert admitted.reservation.token == stored["status"][model.LEDGER_TOKEN] == landed.token
    # What a cache needs to place it among the server's states.
    assert landed.tested == read["status"][model.LEDGER_TOKEN]
    assert landed.base_version == read["metadata"]["resourceVersion"]
    assert [h.claim for h in landed.holds] == [claim_key(results[i].claim or "") for i in (0, 2)]
    assert results[1].landed is None
    assert results[1].raw is None


def test_without_echo_a_ledger_without_a_token_still_reads_the_answer() -> None:
    """Its write is conditional on the resourceVersion, not a token: no state after
    it can be placed by token, so the server's answer is read as with echo."""
    store = Quiet()
    store.put(model.GPUReservation(facts(gpus=8)))
    del store.stored("res-1")["status"][model.LEDGER_TOKEN]
    results = group(store, 1, cached=copy.deepcopy(store.stored("res-1")), echo=False)
    assert store.read_answers == [True]
    assert results[0].landed is None
    assert results[0].raw == store.stored("res-1")


def test_without_echo_a_lost_race_re_reads_and_the_landed_write_names_that_read() -> None:
    store = Quiet()
    store.put(model.GPUReservation(facts(gpus=8)))
    stale = copy.deepcopy(store.stored("res-1"))
    store.bump("res-1", lambda r: r)  # a room-taking write: a new token
    fresh = store.stored("res-1")["metadata"]["resourceVersion"]
    [result] = group(store, 1, cached=stale, echo=False)
    assert result.admitted
    assert result.conflicts == 1
    assert result.landed is not None
    assert result.landed.base_version == fresh
    assert store.read_answers == [False, False]


def test_without_echo_the_view_is_the_answers_down_to_the_stored_instants() -> None:
    store = Quiet()
    store.put(model.GPUReservation(facts(gpus=8)))
    late = NOW.replace(microsecond=654321)
    [result] = asyncio.run(
        ledger.write_claims(
            store,
            ledger.ClaimPlan(
                namespace=NAMESPACE,
                name="res-1",
                asks=[ledger.Ask(1, "p", late)],
                deadline=FAR,
                echo=False,
            ),
        )
    )
    assert result.reservation is not None
    assert result.landed is not None
    assert result.reservation.holds == store.reservation("res-1").holds
    assert result.landed.holds == store.reservation("res-1").holds


def test_claim_ids_are_random_uuids_in_their_text_form() -> None:
    ids = ledger.new_claim_ids(200)
    assert len(set(ids)) == 200
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
    assert ledger.new_claim_ids(0) == []
