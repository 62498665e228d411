"""The node inventory: which nodes count, how many GPUs, used, free, largest block."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import vocab
from shared.policy.inventory import (
    EXCLUDED_CORDONED,
    EXCLUDED_DELETING,
    EXCLUDED_NOT_READY,
    EXCLUDED_UNTAINTED,
    PROBLEM_ALLOCATABLE,
    PROBLEM_OVERRIDE,
    NodeFacts,
    PodPlacement,
    build_inventory,
    project_node_facts,
)
from tests.cluster.builders import node, reservation_taint


def gpu_node(
    name: str = "h100-r1",
    gpus: Any = 8,
    classes: tuple[str, ...] = ("h100",),
    force: Any = None,
    **kwargs: Any,
) -> dict[str, Any]:
    obj = node(name, taints=[reservation_taint(c) for c in classes], **kwargs)
    obj["status"]["allocatable"][vocab.GPU_RESOURCE] = gpus
    if force is not None:
        obj["metadata"]["annotations"] = {vocab.FORCE_NODE_CAPACITY: force}
    return obj


def facts(obj: dict[str, Any]) -> NodeFacts:
    projected = project_node_facts(obj)
    assert projected is not None
    return projected


def on(node_name: str | None, gpus: int = 1, holds: bool = True) -> PodPlacement:
    return PodPlacement(node_name, gpus, holds)


# --- Projection ----------------------------------------------------------------------


def test_a_tainted_ready_schedulable_node_is_included_with_its_allocatable() -> None:
    got = facts(gpu_node(gpus="8"))
    assert (got.name, got.classes, got.gpus, got.included) == ("h100-r1", ("h100",), 8, True)
    assert got.problems == ()


def test_a_node_without_the_reservation_taint_is_not_inventory() -> None:
    assert project_node_facts(node("cpu-1")) is None
    other = [{"key": "other", "effect": vocab.TAINT_EFFECT_NO_SCHEDULE}]
    assert project_node_facts(node("gpu-1", taints=other)) is None
    assert project_node_facts({}) is None


def test_a_node_tainted_for_two_classes_lists_both() -> None:
    assert facts(gpu_node(classes=("h100", "a100"))).classes == ("a100", "h100")


def test_only_noschedule_taints_with_a_value_name_a_class() -> None:
    obj = gpu_node(classes=())
    obj["spec"]["taints"] = [
        {"key": vocab.RESERVATION_TAINT_KEY, "value": "h100", "effect": "NoExecute"},
        {"key": vocab.RESERVATION_TAINT_KEY, "value": "", "effect": vocab.TAINT_EFFECT_NO_SCHEDULE},
        {"key": vocab.RESERVATION_TAINT_KEY, "effect": vocab.TAINT_EFFECT_NO_SCHEDULE},
    ]
    got = facts(obj)
    assert got.classes == ()
    assert got.excluded_because == EXCLUDED_UNTAINTED


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        pytest.param({"unschedulable": True}, EXCLUDED_CORDONED, id="cordoned"),
        pytest.param({"ready": "False"}, EXCLUDED_NOT_READY, id="NotReady"),
        pytest.param({"ready": "Unknown"}, EXCLUDED_NOT_READY, id="Ready Unknown"),
        pytest.param({"ready": None}, EXCLUDED_NOT_READY, id="no Ready condition yet"),
    ],
)
def test_nodes_left_out(kwargs: dict[str, Any], why: str) -> None:
    got = facts(gpu_node(**kwargs))
    assert (got.included, got.excluded_because) == (False, why)


def test_a_node_being_deleted_is_left_out() -> None:
    obj = gpu_node()
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert facts(obj).excluded_because == EXCLUDED_DELETING


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("4", 4, id="a string"),
        pytest.param(4, 4, id="a JSON integer"),
        pytest.param("4000m", 4, id="milli units"),
    ],
)
def test_allocatable_quantities(raw: Any, expected: int) -> None:
    assert facts(gpu_node(gpus=raw)).allocatable == expected


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("eight", id="a word"),
        pytest.param("1.5", id="a fraction"),
        pytest.param("-2", id="negative"),
        pytest.param(None, id="null"),
        pytest.param({"n": 8}, id="an object"),
        pytest.param("", id="empty"),
    ],
)
def test_unreadable_allocatable_counts_zero_and_says_why(raw: Any) -> None:
    got = facts(gpu_node(gpus=raw))
    assert got.allocatable == 0
    assert got.gpus == 0
    assert [p.subject for p in got.problems] == [PROBLEM_ALLOCATABLE]
    assert got.included  # still a member of its class, contributing nothing


def test_no_gpu_allocatable_at_all_is_zero_without_a_problem() -> None:
    obj = gpu_node()
    del obj["status"]["allocatable"][vocab.GPU_RESOURCE]
    got = facts(obj)
    assert (got.gpus, got.problems) == (0, ())


@pytest.mark.parametrize(
    ("force", "expected"),
    [
        pytest.param("0", 0, id="zero masks the node"),
        pytest.param("2", 2, id="below allocatable"),
        pytest.param("16", 16, id="above allocatable is honoured"),
        pytest.param(" 3 ", 3, id="surrounding blanks"),
    ],
)
def test_a_valid_override_replaces_allocatable(force: str, expected: int) -> None:
    got = facts(gpu_node(gpus="8", force=force))
    assert (got.override, got.gpus, got.allocatable, got.problems) == (expected, expected, 8, ())


@pytest.mark.parametrize(
    "force",
    [
        pytest.param("-1", id="negative"),
        pytest.param("two", id="a word"),
        pytest.param("1.5", id="a fraction"),
        pytest.param("2.0", id="a decimal point"),
        pytest.param("", id="empty"),
        pytest.param("+2", id="a sign"),
        pytest.param("1k", id="a quantity suffix"),
        pytest.param("99999999999", id="more GPUs than any node has"),
        pytest.param(3, id="not a string"),
    ],
)
def test_an_invalid_override_is_ignored_and_reported(force: Any) -> None:
    got = facts(gpu_node(gpus="8", force=force))
    assert (got.override, got.gpus) == (None, 8)
    assert [p.subject for p in got.problems] == [PROBLEM_OVERRIDE]
    assert got.problems[0].value == str(force)[:64]


def test_the_override_never_enrols_a_node() -> None:
    untainted = node("cpu-1")
    untainted["metadata"]["annotations"] = {vocab.FORCE_NODE_CAPACITY: "4"}
    assert project_node_facts(untainted) is None
    cordoned = facts(gpu_node(force="4", unschedulable=True))
    assert not cordoned.included


def test_malformed_node_shapes_read_as_absent() -> None:
    obj: dict[str, Any] = {
        "metadata": {"name": "odd", "annotations": "nope", "labels": ["x"]},
        "spec": {"taints": [reservation_taint(), "junk", None]},
        "status": {"allocatable": "junk", "conditions": ["junk", {"type": "Ready"}]},
    }
    got = facts(obj)
    assert (got.classes, got.gpus, got.ready, got.labels) == (("h100",), 0, False, ())


# --- The inventory -------------------------------------------------------------------


def test_totals_used_free_and_largest_block() -> None:
    nodes = [facts(gpu_node("a", gpus="8")), facts(gpu_node("b", gpus="4"))]
    pods = [on("a", 3), on("a", 2), on("b", 1)]
    cap = build_inventory(nodes, pods, ["h100"]).capacity("h100")
    assert cap is not None
    assert (cap.total, cap.used, cap.free, cap.largest_block) == (12, 6, 6, 3)
    assert [(n.name, n.free) for n in cap.nodes] == [("a", 3), ("b", 3)]


def test_pods_that_do_not_hold_gpus_count_for_nothing() -> None:
    nodes = [facts(gpu_node("a", gpus="8"))]
    pods = [on("a", 3, holds=False), on(None, 2), on("a", 0), on("elsewhere", 4)]
    cap = build_inventory(nodes, pods).capacity("h100")
    assert cap is not None
    assert (cap.used, cap.free) == (0, 8)


def test_an_over_full_node_frees_nothing_and_hides_no_other_node() -> None:
    nodes = [facts(gpu_node("a", gpus="8", force="1")), facts(gpu_node("b", gpus="2"))]
    cap = build_inventory(nodes, [on("a", 4)]).capacity("h100")
    assert cap is not None
    assert (cap.total, cap.used, cap.free, cap.largest_block) == (3, 4, 2, 2)


def test_excluded_nodes_leave_the_total_and_their_pods_count_for_nothing() -> None:
    nodes = [
        facts(gpu_node("up", gpus="8")),
        facts(gpu_node("down", gpus="8", ready="False")),
        facts(gpu_node("cordoned", gpus="8", unschedulable=True)),
    ]
    inv = build_inventory(nodes, [on("down", 8), on("cordoned", 8), on("up", 1)], ["h100"])
    cap = inv.capacity("h100")
    assert cap is not None
    assert (cap.total, cap.used, cap.free) == (8, 1, 7)
    assert inv.excluded == {"down", "cordoned"}
    down = inv.node_of("down")
    assert down is not None
    assert down.excluded_because == EXCLUDED_NOT_READY


def test_a_node_of_two_classes_counts_in_each() -> None:
    nodes = [facts(gpu_node("both", gpus="4", classes=("a100", "h100"), force="2"))]
    inv = build_inventory(nodes, [on("both", 1)])
    for cls in ("a100", "h100"):
        cap = inv.capacity(cls)
        assert cap is not None
        assert (cap.total, cap.used, cap.free) == (2, 1, 1)


def test_every_known_class_is_present_as_zero_and_others_are_unknown() -> None:
    nodes = [facts(gpu_node("gone", classes=("l40s",), ready="False"))]
    inv = build_inventory(nodes, [], ["h100"])
    for cls in ("h100", "l40s"):
        cap = inv.capacity(cls)
        assert cap is not None
        assert (cap.total, cap.free, cap.largest_block, cap.nodes) == (0, 0, 0, ())
    assert inv.capacity("never-seen") is None


def test_the_result_does_not_depend_on_node_order() -> None:
    nodes = [facts(gpu_node(n, gpus=str(g))) for n, g in (("b", 2), ("a", 4), ("c", 1))]
    forward = build_inventory(nodes, [on("a", 1)])
    backward = build_inventory(list(reversed(nodes)), [on("a", 1)])
    assert forward == backward


# --- Properties ----------------------------------------------------------------------

_CLASSES = ("h100", "a100", "l40s")
_node_strategy = st.builds(
    NodeFacts,
    name=st.sampled_from([f"n{i}" for i in range(8)]),
    classes=st.lists(st.sampled_from(_CLASSES), unique=True, max_size=2).map(
        lambda xs: tuple(sorted(xs))
    ),
    allocatable=st.integers(0, 16),
    override=st.none() | st.integers(0, 16),
    schedulable=st.booleans(),
    ready=st.booleans(),
    deleting=st.booleans(),
)
_placement_strategy = st.builds(
    PodPlacement,
    node=st.none() | st.sampled_from([f"n{i}" for i in range(10)]),
    gpus=st.integers(0, 8),
    holds=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_node_strategy, max_size=8),
    st.lists(_placement_strategy, max_size=30),
    st.lists(st.sampled_from(_CLASSES), max_size=3),
)
def test_free_never_exceeds_total_and_the_largest_block_never_exceeds_free(
    nodes: list[NodeFacts], pods: list[PodPlacement], known: list[str]
) -> None:
    inv = build_inventory(nodes, pods, known)
    for cls in known:
        assert inv.capacity(cls) is not None
    for cap in inv.classes.values():
        assert 0 <= cap.largest_block <= cap.free <= cap.total
        assert all(n.name not in inv.excluded for n in cap.nodes)
