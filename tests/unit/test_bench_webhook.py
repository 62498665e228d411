"""The webhook benchmark's own arithmetic: the pods it plans, how many had room, and the
over-admissions it computes from the pods the API server holds after a cell."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench import bench_webhook as bw
from bench.createload import Answer, Planned
from shared import vocab

SIZES = {"a": 1, "b": 4, "c": 16}


def pod(reference: Any = None, *gpus: Any, annotations: Any = ...) -> dict[str, Any]:
    """A pod admitted under ``reference`` (None: not admitted) whose containers ask for
    ``gpus`` each."""
    notes = {} if reference is None else {vocab.BOOKING_REFERENCE: reference}
    containers = [
        {"name": f"c{i}", "resources": {"limits": {vocab.GPU_RESOURCE: str(g)}}}
        for i, g in enumerate(gpus)
    ]
    meta: dict[str, Any] = {
        "name": "p",
        "annotations": notes if annotations is ... else annotations,
    }
    return {"metadata": meta, "spec": {"containers": containers}}


# --- over-admissions -----------------------------------------------------------------


def test_pods_within_their_bookings_are_not_over() -> None:
    pods = [pod("res-1", 1), pod("res-1", 1), pod("res-2", 4)]
    assert bw.over_admitted(pods, {"res-1": 2, "res-2": 4}) == {}


def test_the_gpus_beyond_a_booking_are_counted_per_booking() -> None:
    pods = [pod("res-1", 1)] * 3 + [pod("res-2", 2)] * 3
    assert bw.over_admitted(pods, {"res-1": 2, "res-2": 8}) == {"res-1": 1}


def test_gpus_are_summed_not_pods() -> None:
    """Two pods of two containers of 2 GPUs: 8 GPUs, over a 6-GPU booking by 2."""
    pods = [pod("res-1", 2, 2), pod("res-1", 2, 2)]
    assert bw.over_admitted(pods, {"res-1": 6}) == {"res-1": 2}
    assert bw.over_admitted(pods, {"res-1": 8}) == {}


def test_pods_not_admitted_count_for_nobody() -> None:
    pods = [pod(None, 8), pod("res-1", 1)]
    assert bw.over_admitted(pods, {"res-1": 1}) == {}


def test_a_reference_to_an_unknown_reservation_counts_against_zero() -> None:
    assert bw.over_admitted([pod("res-9", 3)], {"res-1": 100}) == {"res-9": 3}


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"metadata": None, "spec": None}, id="no metadata"),
        pytest.param({}, id="an empty object"),
        pytest.param(pod(None, 1, annotations=None), id="annotations null"),
        pytest.param(pod(["res-1"], 1), id="a reference that is not a string"),
    ],
)
def test_a_pod_without_a_readable_reference_is_skipped(bad: dict[str, Any]) -> None:
    assert bw.over_admitted([bad, pod("res-1", 1)], {"res-1": 1}) == {}


def test_a_pod_whose_gpus_cannot_be_read_counts_one_gpu() -> None:
    unreadable = pod("res-1", "lots")
    no_spec = {"metadata": {"annotations": {vocab.BOOKING_REFERENCE: "res-1"}}, "spec": "x"}
    assert bw.over_admitted([unreadable, no_spec, pod("res-1", 1)], {"res-1": 1}) == {"res-1": 2}


# --- the plans -----------------------------------------------------------------------


def test_the_users_plan_fills_every_booking_exactly_owners_in_turn() -> None:
    plan = bw.users_plan(SIZES, named_every=5)
    assert Counter(p.owner for p in plan) == Counter(SIZES)
    assert [p.owner for p in plan[:4]] == ["a", "b", "c", "b"]
    assert [i for i, p in enumerate(plan) if p.named] == list(range(0, len(plan), 5))
    assert {(p.gpus, p.gpu_class) for p in plan} == {(1, bw.GPU_CLASS)}
    assert bw.with_room(plan, SIZES) == sum(SIZES.values())


def test_shares_follow_the_sizes_and_add_up() -> None:
    assert bw.shares(SIZES, 42) == {"a": 2, "b": 8, "c": 32}
    found = bw.shares({"x": 1, "y": 1, "z": 1}, 4)
    assert sum(found.values()) == 4
    assert found == {"x": 2, "y": 1, "z": 1}  # the tie goes to the first owner


def test_the_burst_is_generated_pods_in_proportion_in_a_seeded_order() -> None:
    sizes = dict(zip(bw.OWNERS, bw.SIZES, strict=True))
    plan = bw.burst_plan(sizes)
    assert len(plan) == bw.BURST_PODS
    assert not any(p.named for p in plan)
    assert Counter(p.owner for p in plan) == Counter(bw.shares(sizes, bw.BURST_PODS))
    assert plan == bw.burst_plan(sizes)
    assert plan != bw.burst_plan(sizes, seed=bw.SEED + 1)
    # more pods than GPUs: every booking has room for at most its size
    assert bw.with_room(plan, sizes) == sum(bw.SIZES)


def test_room_is_counted_per_booking() -> None:
    plan = [Planned("a", "h100", 1, False)] * 3 + [Planned("b", "h100", 1, True)] * 2
    assert bw.with_room(plan, {"a": 1, "b": 4}) == 1 + 2
    assert bw.with_room(plan, {"b": 4}) == 2  # no booking: no room


def test_latencies_are_of_the_counted_answers_only() -> None:
    answers = [Answer(i, i / 1000, 201, True, i < 100) for i in range(1, 200)]
    found = bw.latency_ms(answers)
    assert found["n"] == 99
    assert found["p50_ms"] == pytest.approx(50.0)
    assert found["p99_ms"] == pytest.approx(99.0)


def test_the_pooled_rounds_add_the_over_admissions_of_each() -> None:
    def round_(over: dict[str, int]) -> dict[str, Any]:
        return {
            "answers": [[0.001, 201, True, True]],
            "p50_ms": 1.0,
            "statuses": {"201": 1},
            "errors": 0,
            "sent": 1,
            "with_room": 1,
            "admitted": 1,
            "admitted_pods_listed": 1,
            "webhook_requests": 1,
            "fail_opens": 0,
            "claim_groups": 1,
            "claims_grouped": 1,
            "ledger_conflicts": 0,
            "store_writes_per_pod": 3.0,
            "over_admitted": over,
            "webhook_cpu_ms_per_request": 1.0,
            "webhook_cpu_ms_per_admitted": 1.0,
            "drain_s": 0.1,
            "others_cpu_ms_per_pod": {"emulators": 1.0, "reconciler": 1.0},
            "call_ms_per_create": 1.0,
            "matching_ms_per_create": 0.1,
        }

    found = bw.pooled([round_({}), round_({"res-1": 2, "res-2": 1})])
    assert found["over_admitted_gpus"] == 3
    assert found["admitted"] == 2
    assert found["statuses"] == {201: 2}


def test_metadata_or_annotations_of_the_wrong_type_are_skipped() -> None:
    odd: list[dict[str, Any]] = [
        {"metadata": ["x"], "spec": {}},
        {"metadata": {"annotations": "res-1"}, "spec": {}},
    ]
    assert bw.over_admitted([*odd, pod("res-1", 1)], {"res-1": 1}) == {}
