"""The shell: claim through the ledger, fail open, dry run, reinvocation, races."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from typing import Any

import pytest

from shared import ledger, model, vocab
from shared.logs import fields_of
from tests.ledger.fakes import server_error
from tests.policy.builders import HOUR, NOW, gpu_pod, reservation
from tests.webhook.helpers import call, patched, review, wired
from webhook.decide import Outcome

pytestmark = pytest.mark.anyio


def outcome_count(admission: Any, outcome: str) -> float:
    value = admission.metrics.registry.get_sample_value(
        "gpu_reservation_webhook_requests_total", {"outcome": outcome}
    )
    return value or 0.0


async def test_admission_claims_a_hold_then_stamps_the_pod() -> None:
    admission, store = await wired(reservation(1, gpus=2))
    pod = gpu_pod(1).build()
    doc = await call(admission, review(pod))
    result = patched(pod, doc)
    claim = result["metadata"]["annotations"][vocab.ADMISSION_CLAIM]
    holds = store.reservation("res-1").holds
    # The pod carries the claim id; the hold keeps its key, never the id itself.
    assert not claim.startswith(model.CLAIM_KEY_PREFIX)
    assert [(h.claim, h.gpus, h.pod) for h in holds] == [(model.claim_key(claim), 1, "p")]
    assert claim not in json.dumps(store.stored("res-1"))
    assert doc["response"]["warnings"][0].startswith("admitted under reservation res-1")
    assert outcome_count(admission, "admitted") == 1


async def test_the_third_pod_finds_the_booking_full() -> None:
    admission, store = await wired(reservation(1, gpus=2))
    docs = [await call(admission, review(gpu_pod(1).build())) for _ in range(3)]
    assert store.reservation("res-1").used_gpus == 2
    third = docs[2]["response"]
    assert "patch" not in third
    assert "res-1 is full" in third["warnings"][0]


async def test_a_refused_claim_moves_on_to_the_next_open_booking() -> None:
    admission, store = await wired(reservation(1, gpus=1), reservation(2, gpus=1))
    store.bump("res-1", lambda r: ledger.add_hold(r, model.Hold("x", 1, NOW)))  # cache is stale
    pod = gpu_pod(1).build()
    doc = await call(admission, review(pod))
    assert patched(pod, doc)["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == "res-2"


async def test_concurrent_creates_never_over_admit() -> None:
    admission, store = await wired(reservation(1, gpus=6))
    store.yields = lambda: 2
    docs = await asyncio.gather(*(call(admission, review(gpu_pod(1).build())) for _ in range(20)))
    admitted = [d for d in docs if "patch" in d["response"]]
    assert len(admitted) == 6
    assert store.reservation("res-1").used_gpus == 6


async def test_dry_run_answers_the_same_and_writes_nothing() -> None:
    admission, store = await wired(reservation(1))
    pod = gpu_pod(1).build()
    doc = await call(admission, review(pod, dry_run=True))
    assert vocab.BOOKING_REFERENCE in patched(pod, doc)["metadata"]["annotations"]
    assert store.writes == 0


async def test_reinvocation_does_not_claim_twice() -> None:
    admission, store = await wired(reservation(1, gpus=4))
    pod = gpu_pod(1).build()
    first = patched(pod, await call(admission, review(pod)))
    again = await call(admission, review(first))
    assert "patch" not in again["response"]
    assert store.reservation("res-1").used_gpus == 1


async def test_reinvocation_on_a_replica_whose_cache_lags_reads_the_reservation() -> None:
    admission, store = await wired(reservation(1, gpus=4))
    pod = gpu_pod(1).build()
    first = patched(pod, await call(admission, review(pod)))
    lagging, _ = await wired(reservation(1, gpus=4))
    lagging.gateway = store
    again = await call(lagging, review(first))
    assert "patch" not in again["response"]
    assert store.reservation("res-1").used_gpus == 1


async def test_unsynced_cache_fails_open_but_still_strips(caplog: pytest.LogCaptureFixture) -> None:
    admission, store = await wired(reservation(1), synced=False)
    pod = gpu_pod(1).reservation_toleration().build()
    with caplog.at_level(logging.WARNING):
        doc = await call(admission, review(pod, uid="u-1"))
    assert patched(pod, doc)["spec"]["tolerations"] == []
    assert "not admitted now" in doc["response"]["warnings"][-1]
    assert store.writes == 0
    reasons = admission.metrics.registry.get_sample_value(
        "gpu_reservation_webhook_fail_open_total", {"reason": "cache_not_synced"}
    )
    assert reasons == 1
    assert any(fields_of(r).get("uid") == "u-1" for r in caplog.records)


async def test_a_ledger_error_fails_open() -> None:
    admission, store = await wired(reservation(1))
    store.fail_next = [server_error()]  # the status write
    doc = await call(admission, review(gpu_pod(1).build()))
    assert doc["response"]["allowed"] is True
    assert "patch" not in doc["response"]
    assert "not admitted now" in doc["response"]["warnings"][-1]
    assert store.writes == 0


async def test_an_internal_error_fails_open(monkeypatch: pytest.MonkeyPatch) -> None:
    admission, _ = await wired(reservation(1))

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret detail")

    monkeypatch.setattr("webhook.handler.decide_create", boom)
    doc = await call(admission, review(gpu_pod(1).build()))
    assert doc["response"]["allowed"] is True
    assert "secret detail" not in json.dumps(doc)
    assert outcome_count(admission, Outcome.FAIL_OPEN.value) == 1


async def test_update_adding_the_toleration_is_refused_with_403() -> None:
    admission, _ = await wired()
    old = gpu_pod(1).build()
    new = gpu_pod(1).reservation_toleration().build()
    doc = await call(admission, review(new, operation="UPDATE", old=old))
    assert doc["response"]["allowed"] is False
    assert doc["response"]["status"]["code"] == 403


async def test_non_pod_and_delete_requests_pass_untouched() -> None:
    admission, _ = await wired()
    doc = review(None, operation="DELETE", old=gpu_pod().build())
    assert (await call(admission, doc))["response"] == {
        "uid": doc["request"]["uid"],
        "allowed": True,
    }
    status = review(gpu_pod().build())
    status["request"]["subResource"] = "status"
    assert "patch" not in (await call(admission, status))["response"]


async def test_a_future_booking_within_reach_is_queued() -> None:
    admission, store = await wired(reservation(1, start=NOW + HOUR, end=NOW + 2 * HOUR))
    doc = await call(admission, review(gpu_pod(1).build()))
    assert "queued for reservation res-1" in doc["response"]["warnings"][0]
    assert store.writes == 0


async def test_the_cache_keeps_the_spec_the_claim_decided_on() -> None:
    # The cache is at the first version; the reconciler then shrinks the budget to 1.
    # The claim meets a 409, re-reads (1 GPU), writes its hold. What the cache learns
    # from that write must carry the new spec: the old one with the new version would
    # let the next claim pass the budget check on 2 GPUs and its write go through.
    admission, store = await wired(reservation(1, gpus=2))
    store.bump("res-1", lambda r: replace(r, facts=replace(r.facts, gpu_count=1)))
    await call(admission, review(gpu_pod(1).build()))
    second = await call(admission, review(gpu_pod(1).build()))
    assert "patch" not in second["response"]
    assert store.reservation("res-1").used_gpus == 1


async def test_a_dry_run_reinvocation_keeps_the_first_rounds_answer() -> None:
    # A later webhook (a sidecar injector) changed the pod, so the apiserver calls us
    # again with our own first-round stamp. A dry run wrote no hold to find: the stamp
    # must still be recognised, not stripped as forged and re-claimed (nor denied).
    for toleration_policy in ("strip", "deny"):
        admission, store = await wired(reservation(1, gpus=4), toleration_policy=toleration_policy)
        pod = gpu_pod(1).build()
        first = patched(pod, await call(admission, review(pod, dry_run=True)))
        first["spec"]["containers"].append({"name": "sidecar", "image": "proxy"})
        again = await call(admission, review(first, dry_run=True))
        assert again["response"]["allowed"] is True
        assert "patch" not in again["response"]
        assert again["response"]["warnings"][0].startswith("admitted under reservation res-1")
        assert store.writes == 0


async def test_a_dry_run_stamp_grants_nothing_to_a_real_create() -> None:
    admission, store = await wired(reservation(1, gpus=1))
    pod = gpu_pod(1).build()
    dry = patched(pod, await call(admission, review(pod, dry_run=True)))
    store.bump("res-1", lambda r: ledger.add_hold(r, model.Hold("x", 1, NOW)))  # now full
    await admission.cache.relist()
    doc = await call(admission, review(dry))
    result = patched(dry, doc)
    assert vocab.ADMISSION_CLAIM not in result["metadata"]["annotations"]
    assert result["spec"]["tolerations"] == []


def admission_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [fields_of(r) for r in caplog.records if r.getMessage() == "webhook.admission"]


async def test_one_canonical_line_per_request_with_its_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    admission, _ = await wired(reservation(1, gpus=2), reservation(2, gpus=1))
    await call(admission, review(gpu_pod(1).build(), uid="u-1"))
    await call(admission, review(gpu_pod(1).generate_name("job-").build(), uid="u-2"))
    await call(admission, review(gpu_pod(1, namespace="nobody").build(), uid="u-3", dry_run=True))
    lines = admission_lines(caplog)
    durations = [line.pop("duration_ms") for line in lines]
    assert lines == [
        {
            "uid": "u-1",
            "operation": "CREATE",
            "namespace": "alice",
            "pod": "p",
            "outcome": "admitted",
            "reservation": "res-1",
        },
        {
            "uid": "u-2",
            "operation": "CREATE",
            "namespace": "alice",
            "pod": "job-",
            "outcome": "admitted",
            "reservation": "res-1",
        },
        {
            "uid": "u-3",
            "operation": "CREATE",
            "namespace": "nobody",
            "pod": "p",
            "outcome": "no_match",
            "dry_run": True,
        },
    ]
    assert all(isinstance(d, float) and d >= 0 for d in durations)


# --- pods pinned to a reserved node (spec.nodeName) ----------------------------------


def _node(name: str, *classes: str) -> dict[str, Any]:
    taints = [
        {"key": vocab.RESERVATION_TAINT_KEY, "value": c, "effect": vocab.TAINT_EFFECT_NO_SCHEDULE}
        for c in classes
    ]
    return {"metadata": {"name": name}, "spec": {"taints": taints}}


async def _with_nodes(admission: Any, store: Any, *nodes: dict[str, Any]) -> Any:
    from shared.clock import ManualClock
    from shared.resources import NODES
    from webhook.nodes import NodeCache

    for node in nodes:
        store.add(NODES, node)
    admission.nodes = NodeCache(store, ManualClock(NOW))
    await admission.nodes.watched.relist()
    return admission


async def test_a_pod_pinned_to_a_reserved_node_without_a_booking_is_denied() -> None:
    admission, store = await wired()
    await _with_nodes(admission, store, _node("a100-r1", "h100"), {"metadata": {"name": "cpu-1"}})
    carol = gpu_pod(8, namespace="carol").on("a100-r1").build()
    doc = await call(admission, review(carol))
    assert doc["response"]["allowed"] is False
    assert doc["response"]["status"]["code"] == 403
    assert "may not be pinned to reserved node a100-r1" in doc["response"]["status"]["message"]
    plain = gpu_pod(1, namespace="carol").on("cpu-1").build()
    assert (await call(admission, review(plain)))["response"]["allowed"] is True
    unknown = gpu_pod(1, namespace="carol").on("new-node").build()
    assert (await call(admission, review(unknown)))["response"]["allowed"] is True


async def test_a_pinned_pod_is_admitted_under_an_open_booking_of_the_nodes_class() -> None:
    admission, store = await wired(reservation(1, gpus=2))
    await _with_nodes(admission, store, _node("a100-r1", "h100"))
    pod = gpu_pod(1).on("a100-r1").build()
    doc = await call(admission, review(pod))
    assert patched(pod, doc)["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == "res-1"
    assert [h.pod for h in store.reservation("res-1").holds] == ["p"]


async def test_a_pinned_pod_whose_booking_is_full_is_denied_and_claims_nothing() -> None:
    admission, store = await wired(reservation(1, gpus=1, holds=(1,)))
    await _with_nodes(admission, store, _node("a100-r1", "h100"))
    doc = await call(admission, review(gpu_pod(1).on("a100-r1").build()))
    assert doc["response"]["allowed"] is False
    assert store.writes == 0


async def test_a_pinned_pod_is_denied_when_the_ledger_fails() -> None:
    admission, store = await wired(reservation(1))
    await _with_nodes(admission, store, _node("a100-r1", "h100"))
    store.fail_next = [server_error()]
    doc = await call(admission, review(gpu_pod(1).on("a100-r1").build()))
    assert doc["response"]["allowed"] is False


async def test_a_pinned_pod_is_denied_while_the_reservations_are_not_loaded() -> None:
    admission, store = await wired(reservation(1), synced=False)
    await _with_nodes(admission, store, _node("a100-r1", "h100"))
    doc = await call(admission, review(gpu_pod(1).on("a100-r1").build()))
    assert doc["response"]["allowed"] is False


def test_reservation_classes_of_malformed_nodes_read_as_absent() -> None:
    from webhook.nodes import reservation_classes

    assert reservation_classes({}) is None
    assert reservation_classes({"spec": []}) is None
    assert reservation_classes({"spec": {"taints": "x"}}) is None
    assert reservation_classes({"spec": {"taints": [1, {"key": "other"}]}}) is None
    odd = {"spec": {"taints": [{"key": vocab.RESERVATION_TAINT_KEY, "value": 3}]}}
    assert reservation_classes(odd) == frozenset({""})
    assert reservation_classes(_node("n", "h100", "a100")) == frozenset({"h100", "a100"})
