"""Which pods the reconciler watches, and the slim view of those that ask for no GPU:
everything the backstop judges by placement, nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler import cli
from reconciler.base.pods import ANY_CLASS, project_pod, waits
from shared import vocab
from shared.policy.matching import MatchRules


def pod(**spec: Any) -> dict[str, Any]:
    """A pod with no gpu-class label and no GPU request."""
    meta = spec.pop("meta", {})
    return {
        "metadata": {"name": "p", "namespace": "carol", "uid": "u", **meta},
        "spec": {"containers": [{"name": "c"}], **spec},
        "status": {"phase": "Pending"},
    }


def ours(value: str) -> dict[str, str]:
    return {
        "key": vocab.RESERVATION_TAINT_KEY,
        "value": value,
        "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
    }


def test_a_plain_pod_on_no_node_is_not_kept() -> None:
    assert project_pod(pod(), MatchRules()) is None
    assert (
        project_pod(pod(tolerations=[{"key": "other", "operator": "Exists"}]), MatchRules()) is None
    )


def test_a_plain_pod_bound_or_pinned_to_a_node_is_kept_slim() -> None:
    view = project_pod(pod(nodeName="a100-r1"), MatchRules())
    assert view is not None
    assert (view.node, view.gpus, view.gpu_pod, view.declared, view.notes) == (
        "a100-r1",
        0,
        False,
        False,
        (),
    )
    assert not waits(view)  # never routed by the reserved queue


@pytest.mark.parametrize(
    ("tolerations", "classes"),
    [
        ([ours("a100")], ("a100",)),
        ([ours("h100"), ours("a100")], ("a100", "h100")),
        ([{"operator": "Exists"}], (ANY_CLASS,)),
        ([{"key": vocab.RESERVATION_TAINT_KEY, "operator": "Exists"}], (ANY_CLASS,)),
    ],
)
def test_a_plain_pod_declaring_a_reservation_toleration_is_kept(
    tolerations: list[Any], classes: tuple[str, ...]
) -> None:
    view = project_pod(pod(tolerations=tolerations), MatchRules())
    assert view is not None
    assert view.declared
    assert view.declared_classes == classes
    assert not waits(view)


def test_a_plain_pod_carrying_galends_keys_is_kept() -> None:
    raw = pod(meta={"annotations": {vocab.BOOKING_REFERENCE: "res-1", "other": "x"}})
    view = project_pod(raw, MatchRules())
    assert view is not None
    assert view.reference == "res-1"
    assert view.notes == ((vocab.BOOKING_REFERENCE, "res-1"),)


def test_a_mirror_pod_is_marked() -> None:
    raw = pod(nodeName="n", meta={"annotations": {vocab.MIRROR_POD_ANNOTATION: "hash"}})
    view = project_pod(raw, MatchRules())
    assert view is not None
    assert view.mirror


@pytest.mark.parametrize(
    "spec",
    [
        {"nodeName": 7},
        {"nodeName": ""},
        {"nodeName": None},
        {"nodeName": ["a"]},
        {"tolerations": "all"},
        {"tolerations": [None, 3, "x", {"key": "other", "operator": "Exists"}]},
    ],
)
def test_malformed_placement_fields_read_as_absent_never_raise(spec: dict[str, Any]) -> None:
    assert project_pod(pod(**spec), MatchRules()) is None


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": vocab.RESERVATION_TAINT_KEY, "operator": "Exists", "value": 7},
        {"key": vocab.RESERVATION_TAINT_KEY, "value": 7},
        {"key": 5, "operator": "Exists"},
    ],
)
def test_an_odd_toleration_that_may_match_reads_as_every_class(toleration: Any) -> None:
    """Shapes the API server would refuse read the safe way: judged, as every class."""
    view = project_pod(pod(tolerations=[toleration]), MatchRules())
    assert view is not None
    assert view.declared_classes == (ANY_CLASS,)


def test_the_explainer_still_calls_a_pinned_plain_pod_not_a_gpu_pod() -> None:
    raw = pod(nodeName="a100-r1")
    assert project_pod(raw, MatchRules()) is not None  # kept for the backstop
    assert cli.gpu_view(raw, MatchRules()) is None
    assert cli.projected([raw], MatchRules()) == []


@pytest.mark.parametrize("limits", [None, {vocab.GPU_RESOURCE: "0"}])
def test_a_labelled_pod_asking_for_no_gpu_is_not_routed(limits: dict[str, str] | None) -> None:
    """A reservation admits GPU pods only: the queue never admits (nor leases for) a
    pod of a GPU class that asks for none, whatever room its owner's booking has."""
    containers = [{"name": "c", "resources": {"limits": limits} if limits else {}}]
    raw = pod(meta={"labels": {vocab.GPU_CLASS_LABEL: "h100"}}, containers=containers)
    view = project_pod(raw, MatchRules())
    assert view is not None
    assert view.gpu_pod
    assert view.gpus == 0
    assert not waits(view)
    asking = project_pod(
        pod(
            meta={"labels": {vocab.GPU_CLASS_LABEL: "h100"}},
            containers=[{"name": "c", "resources": {"limits": {vocab.GPU_RESOURCE: "1"}}}],
        ),
        MatchRules(),
    )
    assert asking is not None
    assert waits(asking)
