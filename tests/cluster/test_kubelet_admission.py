"""The kubelet's admission of bound pods (``sandbox.cluster.admission``): resources,
node affinity and NoExecute taints only — a pod pinned by ``spec.nodeName`` skips the
scheduler and its NoSchedule taints, never the kubelet's resource check."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from sandbox.cluster.admission import REASON_TAINTS, Rejection, admit
from sandbox.cluster.fit import REASON_AFFINITY
from sandbox.cluster.requests import Resources, pod_requests
from shared import vocab
from tests.cluster.builders import node, pod, reservation_taint

GPU = vocab.GPU_RESOURCE


def _verdict(
    p: dict[str, Any], n: dict[str, Any], used: Resources | None = None, count: int = 0
) -> Rejection | None:
    return admit(p, pod_requests(p), n, used or {}, count)


def test_a_noschedule_taint_does_not_stop_the_kubelet() -> None:
    """Rule: the kubelet checks only NoExecute taints; a reserved (NoSchedule) or cordoned
    node admits a pod that tolerates nothing."""
    reserved = node("r", gpus=8, taints=[reservation_taint()], unschedulable=True)
    assert _verdict(pod(gpus=8, node_name="r"), reserved) is None


def test_gpus_beyond_what_is_free_are_out_of_gpu() -> None:
    """Rule: a pod asking more GPUs than the admitted pods left free is rejected with reason
    ``OutOfnvidia.com/gpu`` and the kubelet's message."""
    verdict = _verdict(pod(gpus=2, node_name="r"), node("r", gpus=8), {GPU: Decimal(7)}, 1)
    assert verdict is not None
    assert verdict.reason == f"OutOf{GPU}"
    assert verdict.message == (
        f"Node didn't have enough resource: {GPU}, requested: 2, used: 7, capacity: 8"
    )
    assert verdict.status_message == f"Pod was rejected: {verdict.message}"


def test_cpu_is_counted_in_millicores_and_checked_before_gpus() -> None:
    """Rule: cpu, memory and ephemeral storage come before extended resources; cpu is printed
    in millicores."""
    verdict = _verdict(
        pod(gpus=9, cpu="500m", node_name="r"), node("r", gpus=8, cpu="4"), {"cpu": Decimal(4)}
    )
    assert verdict is not None
    assert (verdict.reason, verdict.message) == (
        "OutOfcpu",
        "Node didn't have enough resource: cpu, requested: 500, used: 4000, capacity: 4000",
    )


def test_the_pod_count_comes_first() -> None:
    """Rule: a full node (allocatable ``pods``) refuses with ``OutOfpods``."""
    verdict = _verdict(pod(node_name="r"), node("r"), {}, 110)
    assert verdict is not None
    assert verdict.reason == "OutOfpods"


def test_an_extended_resource_the_node_does_not_list_is_ignored() -> None:
    """Rule: requests of extended resources absent from the node's allocatable are dropped
    before the check (cluster-level resources), so a CPU node admits a GPU pod; a node that
    lists the resource (even as 0) refuses it."""
    cpu_node = node("c")
    del cpu_node["status"]["allocatable"][GPU]
    assert _verdict(pod(gpus=4, node_name="c"), cpu_node) is None
    verdict = _verdict(pod(gpus=4, node_name="z"), node("z", gpus=0))
    assert verdict is not None
    assert verdict.reason == f"OutOf{GPU}"


@pytest.mark.parametrize(
    ("tolerations", "admitted"),
    [
        ([], False),
        ([{"key": "maint", "operator": "Exists", "effect": "NoExecute"}], True),
        ([{"operator": "Exists"}], True),
    ],
)
def test_an_untolerated_noexecute_taint_is_refused(
    tolerations: list[dict[str, str]], admitted: bool
) -> None:
    """Rule: a NoExecute taint the pod does not tolerate → ``TaintToleration``."""
    draining = node("d", taints=[{"key": "maint", "value": "x", "effect": "NoExecute"}])
    verdict = _verdict(pod(node_name="d", tolerations=tolerations), draining)
    if admitted:
        assert verdict is None
    else:
        assert verdict is not None
        assert (verdict.reason, verdict.message) == (
            "TaintToleration",
            f"Predicate TaintToleration failed: {REASON_TAINTS}",
        )


def test_a_node_selector_that_does_not_match_is_node_affinity() -> None:
    """Rule: nodeSelector and required node affinity are checked by the kubelet too."""
    verdict = _verdict(pod(node_name="r", nodeSelector={vocab.GPU_CLASS_LABEL: "a100"}), node("r"))
    assert verdict is not None
    assert (verdict.reason, verdict.message) == (
        "NodeAffinity",
        f"Predicate NodeAffinity failed: {REASON_AFFINITY}",
    )
