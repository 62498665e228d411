"""The webhook benchmark's feed of admitted claims to its upkeep stand-in: the claim id
read from an answer as the webhook builds it, and the stand-in's pass over a ledger."""

from __future__ import annotations

import base64
import json
import os
import tempfile
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench import loadgen, standin
from shared import model, vocab
from shared.model import claim_key
from webhook.patch import diff
from webhook.review import answer, answer_json

NOW = datetime(2026, 1, 5, 10, tzinfo=UTC)
TTL = standin.CLAIM_TTL_S


def booking(*holds: model.Hold) -> model.GPUReservation:
    facts = model.ReservationFacts(
        id=1,
        owner="alice",
        gpu_class="h100",
        gpu_class_name="H100",
        gpu_count=128,
        kind=model.Kind.BOOKING,
        start=NOW - timedelta(hours=1),
        end=NOW + timedelta(hours=1),
        state=model.State.ACTIVE,
        updated_at=NOW,
    )
    return model.GPUReservation(facts, holds=holds)


def hold(claim: str, age_s: float = 0.0, bound: bool = False) -> model.Hold:
    at = NOW - timedelta(seconds=age_s)
    if bound:
        return model.Hold(claim, 1, at, pod=claim, pod_uid=f"uid-{claim}")
    return model.Hold(claim, 1, at)


def claims_of(res: model.GPUReservation) -> list[tuple[str, bool]]:
    return [(h.claim, h.bound) for h in res.holds]


# --- the stand-in's pass ---------------------------------------------------------------


def test_a_fed_hold_is_bound_to_a_pod_named_after_its_claim() -> None:
    res = standin.upkeep_pass(booking(hold("a"), hold("b")), {"a"}, NOW)
    assert claims_of(res) == [(claim_key("a"), True), (claim_key("b"), False)]
    assert (res.holds[0].pod, res.holds[0].pod_uid) == ("a", "uid-a")


def test_holds_never_fed_stay_until_the_claim_ttl() -> None:
    young, edge, old = hold("young", 1), hold("edge", TTL), hold("old", TTL + 1)
    res = standin.upkeep_pass(booking(young, edge, old), set(), NOW)
    assert claims_of(res) == [(claim_key("young"), False), (claim_key("edge"), False)]


def test_only_the_newest_bound_holds_stay_and_unbound_ones_are_not_counted() -> None:
    bound = [hold(f"b{i}", bound=True) for i in range(standin.KEEP_HOLDS + 3)]
    waiting = hold("w")
    res = standin.upkeep_pass(booking(*bound[:2], waiting, *bound[2:]), set(), NOW)
    assert claims_of(res) == [(claim_key("w"), False)] + [
        (h.claim, True) for h in bound[-standin.KEEP_HOLDS :]
    ]


def test_a_hold_fed_in_this_pass_counts_among_the_newest_bound() -> None:
    bound = [hold(f"b{i}", bound=True) for i in range(standin.KEEP_HOLDS)]
    res = standin.upkeep_pass(booking(*bound, hold("new")), {"new"}, NOW)
    assert len(res.holds) == standin.KEEP_HOLDS
    assert (res.holds[-1].claim, res.holds[-1].bound) == (claim_key("new"), True)
    assert res.holds[0].claim == claim_key("b1")


@pytest.mark.parametrize(
    "fed",
    [
        pytest.param({"no-such-claim"}, id="a claim of another booking"),
        pytest.param(set(standin.claims(b"\xff\xfe\n\n  \n")), id="undecodable bytes"),
        pytest.param({""}, id="an empty id"),
    ],
)
def test_an_unknown_or_malformed_id_fed_changes_nothing(fed: set[str]) -> None:
    before = booking(hold("a"), hold("b", bound=True))
    assert standin.upkeep_pass(before, fed, NOW) == before


def test_an_already_bound_hold_fed_again_is_left_as_it_is() -> None:
    before = booking(model.Hold("a", 1, NOW, pod="real-pod", pod_uid="real-uid"))
    assert standin.upkeep_pass(before, {"a"}, NOW) == before


def test_a_datagram_splits_into_its_ids() -> None:
    assert standin.claims(b"a\nb\n\nc\n") == ["a", "b", "c"]
    assert standin.claims(b"") == []


def test_fed_ids_seen_in_the_ledger_or_older_than_the_ttl_are_forgotten() -> None:
    fed = {"seen": 100.0, "waiting": 100.0, "stale": 100.0 - TTL - 1}
    assert standin.forget(fed, {"seen"}, now=100.0) == {"waiting": 100.0}


# --- the claim id of an answer ---------------------------------------------------------


def pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    found = loadgen.pod("claim", "alice")
    if annotations is not None:
        found["metadata"]["annotations"] = annotations
    return found


def admitted(original: dict[str, Any], claim: str) -> bytes:
    """The bytes the webhook answers an admission with (``answer`` of ``diff``, as
    ``webhook.handler`` builds it, rendered by ``answer_json``)."""
    edited = json.loads(json.dumps(original))
    notes = edited["metadata"].setdefault("annotations", {})
    notes[vocab.BOOKING_REFERENCE] = "res-1"
    notes[vocab.ADMISSION_CLAIM] = claim
    doc = answer("uid-1", patch=diff(original, edited), warnings=["admitted under res-1"])
    return answer_json(doc)


def test_the_claim_of_an_answer_that_adds_the_annotations_map() -> None:
    body = admitted(pod(), "c-1")
    ops = json.loads(base64.b64decode(json.loads(body)["response"]["patch"]))
    assert ops[0]["path"] == "/metadata/annotations"  # the shape this case is about
    assert loadgen.admission_claim(body) == "c-1"


def test_the_claim_of_an_answer_that_adds_the_annotation_on_its_own() -> None:
    body = admitted(pod({"team": "x"}), "c-2")
    ops = json.loads(base64.b64decode(json.loads(body)["response"]["patch"]))
    assert loadgen.CLAIM_POINTER in [op["path"] for op in ops]
    assert loadgen.admission_claim(body) == "c-2"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(json.dumps(answer("u")).encode(), id="no patch"),
        pytest.param(
            json.dumps(answer("u", patch=[{"op": "add", "path": "/x", "value": 1}])).encode(),
            id="a patch without the claim",
        ),
        pytest.param(b"not json", id="not JSON"),
        pytest.param(b'{"response": {"patch": "!!"}}', id="a patch that is not base64"),
    ],
)
def test_an_answer_without_a_claim_gives_none(body: bytes) -> None:
    assert loadgen.admission_claim(body) is None


# --- the socket between them -----------------------------------------------------------


def test_ids_sent_by_a_load_process_reach_the_stand_in() -> None:
    folder = tempfile.mkdtemp(prefix="feed-")  # short: AF_UNIX paths are limited
    path = os.path.join(folder, "s")
    receiver = standin.FeedSocket(path)
    sender = loadgen.Feed(path)
    try:
        for i in range(loadgen.FEED_BATCH + 1):
            sender.add(f"c-{i}", now=0.0)  # one full datagram sent, one id waiting
        receiver.drain()
        assert len(receiver.fed) == loadgen.FEED_BATCH
        sender.close()
        receiver.drain()
        assert sorted(receiver.fed) == sorted(f"c-{i}" for i in range(loadgen.FEED_BATCH + 1))
        assert sender.lost == 0
    finally:
        receiver.close()
        os.rmdir(folder)


def test_ids_with_no_stand_in_listening_are_counted_lost() -> None:
    sender = loadgen.Feed(os.path.join(tempfile.gettempdir(), "no-such-feed.sock"))
    for i in range(loadgen.FEED_BATCH):
        sender.add(f"c-{i}", now=0.0)
    sender.close()
    assert sender.lost == loadgen.FEED_BATCH
