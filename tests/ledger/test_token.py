"""The ledger token protocol (docs/developer/architecture.md "The ledger protocol"): claims are
conditional on uid, generation and ``status.ledgerToken``; writes that only drop, bind
or mark holds are JSON Patches that keep the token; everything else is a PUT with the
resourceVersion and a new token."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import replace
from typing import Any

import pytest

from shared import ledger, model
from shared.errors import Invalid
from shared.model import claim_key
from shared.resources import GPU_RESERVATIONS
from tests.ledger.fakes import NAMESPACE, NOW, FakeStore, facts

FAR = 1e12


def store_with(gpus: int = 8, *holds: model.Hold) -> FakeStore:
    store = FakeStore()
    store.put(model.GPUReservation(facts(gpus=gpus), tuple(holds)))
    return store


def snapshot(store: FakeStore) -> dict[str, Any]:
    """The stored object as a watch cache would hold it (a copy)."""
    return copy.deepcopy(store.stored("res-1"))


def token(store: FakeStore) -> str:
    return str(store.stored("res-1")["status"].get(model.LEDGER_TOKEN, ""))


async def claim(store: FakeStore, gpus: int, **kw: Any) -> ledger.ClaimResult:
    return await ledger.claim(store, NAMESPACE, "res-1", gpus, pod="p", now=NOW, deadline=FAR, **kw)


async def amend(store: FakeStore, change: Any) -> model.GPUReservation | None:
    return await ledger.amend(store, NAMESPACE, "res-1", change, now=NOW, deadline=FAR)


def patched_ops(store: FakeStore) -> list[list[dict[str, Any]]]:
    """Record the JSON Patches sent to the store (the real method runs)."""
    sent: list[list[dict[str, Any]]] = []
    inner = store.patch

    async def patch(*args: Any, **kwargs: Any) -> Any:
        sent.append(copy.deepcopy(args[2]))
        return await inner(*args, **kwargs)

    store.patch = patch  # type: ignore[method-assign]
    return sent


def others_claim(store: FakeStore, hold: model.Hold) -> None:
    """Another replica's claim landing (as the protocol writes it: a new token)."""
    obj = store.stored("res-1")
    obj["status"]["holds"].append(model.hold_to_status(hold))
    obj["status"][model.LEDGER_TOKEN] = model.new_token()
    store.add(GPU_RESERVATIONS, obj)


def others_drop(store: FakeStore, index: int) -> None:
    """Another writer dropping a hold (the token stays)."""
    obj = store.stored("res-1")
    del obj["status"]["holds"][index]
    store.add(GPU_RESERVATIONS, obj)


# --- the model ------------------------------------------------------------------------


def test_the_token_is_read_written_and_kept_out_of_the_extra_fields() -> None:
    res = model.GPUReservation(facts(), token="abc")
    status = model.status_of(res, NOW)
    assert status[model.LEDGER_TOKEN] == "abc"
    obj = model.to_object(res, NAMESPACE, NOW)
    back = model.from_object(obj)
    assert (back.token, back.status_extra) == ("abc", {})
    assert model.LEDGER_TOKEN not in model.status_of(model.GPUReservation(facts()), NOW)


@pytest.mark.parametrize("bad", [7, "", None, True, ["t"], {"t": 1}, "x" * 65])
def test_a_malformed_token_reads_as_none_and_is_not_carried(bad: Any) -> None:
    obj = model.to_object(model.GPUReservation(facts()), NAMESPACE, NOW)
    obj["status"][model.LEDGER_TOKEN] = bad
    res = model.from_object(obj)
    assert res.token == ""
    assert model.LEDGER_TOKEN not in res.status_extra


def test_tokens_are_random_not_counters() -> None:
    tokens = {model.new_token() for _ in range(200)}
    assert len(tokens) == 200
    assert all(16 <= len(t) <= model.MAX_TOKEN_LENGTH for t in tokens)


# --- claims ---------------------------------------------------------------------------


def test_a_claim_tests_uid_generation_and_token_and_sets_a_new_token() -> None:
    store = store_with(8, model.Hold("a", 1, NOW))
    before = snapshot(store)
    sent = patched_ops(store)
    result = asyncio.run(claim(store, 2))
    assert result.admitted
    (ops,) = sent
    assert ops[:3] == [
        {"op": "test", "path": "/metadata/uid", "value": before["metadata"]["uid"]},
        {"op": "test", "path": "/metadata/generation", "value": 1},
        {"op": "test", "path": "/status/ledgerToken", "value": before["status"]["ledgerToken"]},
    ]
    assert not any(op["path"] == "/metadata/resourceVersion" for op in ops)
    assert token(store) not in {"", before["status"]["ledgerToken"]}


def test_a_claim_lands_on_a_ledger_that_only_lost_a_hold_since_its_read() -> None:
    store = store_with(4, model.Hold("a", 2, NOW), model.Hold("b", 2, NOW))
    cached = snapshot(store)
    assert asyncio.run(amend(store, lambda r: ledger.drop(r, {"a"}))) is not None
    result = asyncio.run(claim(store, 1, cached=cached))
    # Decided on the read with a and b (4 of 4): full. Without the drop landing in
    # between, the same read is what the claim is judged on: the drop does not 409 it.
    assert (result.reason, result.conflicts) == ("full", 0)
    fits = asyncio.run(claim(store, 2, cached=cached))
    assert (fits.reason, fits.conflicts) == ("full", 0)
    cached = snapshot(store)
    asyncio.run(amend(store, lambda r: ledger.drop(r, {"b"})))
    gets = store.gets
    landed = asyncio.run(claim(store, 2, cached=cached))
    assert (landed.reason, landed.conflicts, store.gets - gets) == ("admitted", 0, 0)
    assert [h.claim for h in store.reservation("res-1").holds] == [claim_key(landed.claim or "")]


def test_a_claim_racing_a_write_that_adds_holds_re_decides() -> None:
    store = store_with(4, model.Hold("a", 2, NOW))
    cached = snapshot(store)

    def rebuild(res: model.GPUReservation) -> model.GPUReservation:
        pods = [ledger.PodUse("p-a", "uid-a", 2, "a"), ledger.PodUse("p-x", "uid-x", 2, "x")]
        return ledger.rebuild(res, pods, NOW, 60)

    assert asyncio.run(amend(store, rebuild)) is not None
    assert token(store) != cached["status"]["ledgerToken"]
    result = asyncio.run(claim(store, 1, cached=cached))
    assert (result.reason, result.conflicts) == ("full", 1)
    assert ledger.used(store.reservation("res-1")) == 4


def test_a_claim_racing_a_gpu_count_decrease_re_decides() -> None:
    store = store_with(4, model.Hold("a", 2, NOW))
    cached = snapshot(store)
    obj = asyncio.run(store.get(GPU_RESERVATIONS, "res-1", NAMESPACE))
    obj["spec"]["gpuCount"] = 2
    asyncio.run(store.replace(GPU_RESERVATIONS, "res-1", obj, NAMESPACE))
    stored = store.stored("res-1")
    assert stored["metadata"]["generation"] == 2
    assert stored["status"]["ledgerToken"] == cached["status"]["ledgerToken"]
    result = asyncio.run(claim(store, 1, cached=cached))
    assert (result.reason, result.conflicts) == ("full", 1)
    assert ledger.used(store.reservation("res-1")) == 2


def test_a_claim_on_a_wiped_status_re_decides_and_gives_it_a_first_token() -> None:
    store = store_with(4, model.Hold("a", 3, NOW))
    cached = snapshot(store)
    body = asyncio.run(store.get(GPU_RESERVATIONS, "res-1", NAMESPACE))
    body.pop("status")
    asyncio.run(store.replace(GPU_RESERVATIONS, "res-1", body, NAMESPACE, "status"))
    assert "status" not in store.stored("res-1")
    sent = patched_ops(store)
    result = asyncio.run(claim(store, 1, cached=cached))
    assert (result.reason, result.conflicts) == ("admitted", 1)
    # The second write had no token to test: it is conditional on the resourceVersion.
    assert sent[1][0]["path"] == "/metadata/resourceVersion"
    assert token(store)
    assert [h.gpus for h in store.reservation("res-1").holds] == [1]


def test_a_claim_on_an_old_object_without_a_token_uses_the_resource_version() -> None:
    store = store_with(8)
    del store.stored("res-1")["status"][model.LEDGER_TOKEN]
    cached = snapshot(store)
    others_claim(store, model.Hold("other", 7, NOW))
    result = asyncio.run(claim(store, 2, cached=cached))
    assert (result.reason, result.conflicts) == ("full", 1)


def test_a_422_that_is_not_a_race_stops_with_error_not_a_loop() -> None:
    store = store_with(8)
    store.faults["patch"] = Invalid(422, "the server rejected our request", "Invalid")
    result = asyncio.run(claim(store, 1))
    assert (result.reason, result.conflicts) == ("error", 1)
    assert [v for v, _ in store.calls].count("patch") == 1


def test_a_422_without_tests_is_an_error_at_once() -> None:
    store = store_with(8)
    del store.stored("res-1")["status"][model.LEDGER_TOKEN]
    store.faults["patch"] = Invalid(422, "the server rejected our request", "Invalid")
    result = asyncio.run(claim(store, 1))
    assert (result.reason, result.conflicts) == ("error", 0)


# --- amend ----------------------------------------------------------------------------


def bound(res: model.GPUReservation, claim_id: str) -> model.GPUReservation:
    return ledger.bind(res, claim_id, f"pod-{claim_id}", f"uid-{claim_id}")


def test_a_drop_and_a_bind_are_one_patch_keeping_the_token() -> None:
    store = store_with(8, model.Hold("a", 1, NOW), model.Hold("b", 2, NOW), model.Hold("c", 3, NOW))
    before = token(store)
    sent = patched_ops(store)
    got = asyncio.run(amend(store, lambda r: bound(ledger.drop(r, {"a"}), "c")))
    assert got is not None
    (ops,) = sent
    assert [op["op"] for op in ops[:4]] == ["test", "test", "replace", "remove"]
    assert not any("resourceVersion" in op["path"] or "ledgerToken" in op["path"] for op in ops)
    assert token(store) == before
    holds = store.reservation("res-1").holds
    assert [(h.claim, h.pod_uid) for h in holds] == [
        (claim_key("b"), None),
        (claim_key("c"), "uid-c"),
    ]
    assert store.stored("res-1")["status"]["usedGpus"] == 5


def test_an_amend_lands_although_a_claim_appended_meanwhile() -> None:
    store = store_with(8, model.Hold("a", 1, NOW), model.Hold("b", 2, NOW))
    store.before["patch"] = lambda: others_claim(store, model.Hold("new", 4, NOW))
    assert asyncio.run(amend(store, lambda r: bound(ledger.drop(r, {"a"}), "b"))) is not None
    assert [v for v, _ in store.calls] == ["get", "patch"]
    holds = store.reservation("res-1").holds
    assert [(h.claim, h.pod_uid) for h in holds] == [
        (claim_key("b"), "uid-b"),
        (claim_key("new"), None),
    ]


def test_an_amend_whose_hold_moved_re_reads_and_re_applies() -> None:
    store = store_with(8, model.Hold("a", 1, NOW), model.Hold("b", 2, NOW), model.Hold("c", 3, NOW))
    store.before["patch"] = lambda: others_drop(store, 0)
    assert asyncio.run(amend(store, lambda r: ledger.drop(r, {"c"}))) is not None
    assert [v for v, _ in store.calls] == ["get", "patch", "get", "patch"]
    assert [h.claim for h in store.reservation("res-1").holds] == [claim_key("b")]


def test_two_amends_of_one_hold_keep_both_changes() -> None:
    store = store_with(8, model.Hold("a", 1, NOW))

    def announced_meanwhile() -> None:
        obj = store.stored("res-1")
        obj["status"]["holds"][0]["announced"] = True
        store.add(GPU_RESERVATIONS, obj)

    store.before["patch"] = announced_meanwhile
    assert asyncio.run(amend(store, lambda r: bound(r, "a"))) is not None
    (hold,) = store.reservation("res-1").holds
    assert (hold.pod_uid, hold.announced) == ("uid-a", True)


def test_an_amend_that_adds_raises_or_rewrites_is_a_put_with_a_new_token() -> None:
    def raise_a(res: model.GPUReservation) -> model.GPUReservation:
        return replace(res, holds=(replace(res.holds[0], gpus=2),))

    def add(res: model.GPUReservation) -> model.GPUReservation:
        return ledger.add_hold(res, model.Hold("x", 1, NOW))

    def extra(res: model.GPUReservation) -> model.GPUReservation:
        return replace(res, status_extra={"noShow": {"declaredAt": "x"}})

    def reorder(res: model.GPUReservation) -> model.GPUReservation:
        return replace(res, holds=res.holds[::-1])

    for change in (raise_a, add, extra, reorder):
        store = store_with(8, model.Hold("a", 1, NOW), model.Hold("b", 1, NOW))
        before = token(store)
        assert asyncio.run(amend(store, change)) is not None, change.__name__
        assert [v for v, _ in store.calls] == ["get", "replace"], change.__name__
        assert token(store) not in {"", before}, change.__name__


def test_an_amend_422_that_is_not_a_race_stops() -> None:
    store = store_with(8, model.Hold("a", 1, NOW))
    store.faults["patch"] = Invalid(422, "the server rejected our request", "Invalid")
    assert asyncio.run(amend(store, lambda r: ledger.drop(r, {"a"}))) is None
    assert [v for v, _ in store.calls] == ["get", "patch", "get"]


def test_tests_hold_uses_json_equality() -> None:
    obj = {"a": [{"b": 1}], "c~/d": True}
    assert ledger.tests_hold([{"op": "test", "path": "/a/0/b", "value": 1}], obj)
    assert not ledger.tests_hold([{"op": "test", "path": "/a/0/b", "value": True}], obj)
    assert ledger.tests_hold([{"op": "test", "path": "/c~0~1d", "value": True}], obj)
    assert not ledger.tests_hold([{"op": "test", "path": "/a/1", "value": None}], obj)
    assert not ledger.tests_hold([{"op": "test", "path": "/a/x", "value": None}], obj)
