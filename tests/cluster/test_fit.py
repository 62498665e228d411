"""The scheduler's pure rules: tolerations, affinity, resources, the fit error message."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from sandbox.cluster import scheduling
from sandbox.cluster.fit import (
    NodeInfo,
    affinity_matches,
    fit_error,
    node_failure,
    tolerates,
)
from sandbox.cluster.quantity import parse_quantity
from sandbox.cluster.requests import pod_requests
from sandbox.cluster.scheduling import (
    Placement,
    _order,
    charge,
    needs_scheduling,
    node_infos,
    place,
    schedule,
)
from shared import vocab
from tests.cluster.builders import node, pod, reservation_taint, reservation_toleration

TAINT = reservation_taint()


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        pytest.param(reservation_toleration(), True, id="exact-match"),
        pytest.param(reservation_toleration("a100"), False, id="other-value"),
        pytest.param({"key": vocab.RESERVATION_TAINT_KEY, "operator": "Exists"}, True, id="exists"),
        pytest.param({"operator": "Exists"}, True, id="exists-without-key-tolerates-all"),
        pytest.param(
            {"key": vocab.RESERVATION_TAINT_KEY, "value": "h100"}, True, id="default-equal"
        ),
        pytest.param({**reservation_toleration(), "effect": "NoExecute"}, False, id="other-effect"),
        pytest.param({"key": "other", "operator": "Exists"}, False, id="other-key"),
        pytest.param({"key": vocab.RESERVATION_TAINT_KEY, "operator": "Gt"}, False, id="bad-op"),
    ],
)
def test_toleration_semantics(toleration: dict[str, str], expected: bool) -> None:
    assert tolerates(toleration, TAINT) is expected


def expression(key: str, operator: str, *values: str) -> dict[str, object]:
    return {"key": key, "operator": operator, "values": list(values)}


def required(*terms: dict[str, object]) -> dict[str, object]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"nodeSelector": {"zone": "a"}}, True, id="selector-match"),
        pytest.param({"nodeSelector": {"zone": "b"}}, False, id="selector-mismatch"),
        pytest.param(
            {"affinity": required({"matchExpressions": [expression("zone", "In", "a", "b")]})},
            True,
            id="in",
        ),
        pytest.param(
            {"affinity": required({"matchExpressions": [expression("zone", "NotIn", "a")]})},
            False,
            id="notin",
        ),
        pytest.param(
            {"affinity": required({"matchExpressions": [expression("gen", "Gt", "3")]})},
            True,
            id="gt",
        ),
        pytest.param(
            {"affinity": required({"matchExpressions": [expression("gen", "Lt", "3")]})},
            False,
            id="lt",
        ),
        pytest.param(
            {"affinity": required({"matchExpressions": [expression("x", "DoesNotExist")]})},
            True,
            id="absent",
        ),
        pytest.param(
            {"affinity": required({"matchExpressions": [expression("x", "Exists")]})},
            False,
            id="exists",
        ),
        pytest.param(
            {
                "affinity": required(
                    {"matchExpressions": [expression("x", "Exists")]},
                    {"matchFields": [expression("metadata.name", "In", "n1")]},
                )
            },
            True,
            id="terms-are-ored-fields-by-name",
        ),
        pytest.param({"affinity": required({})}, False, id="empty-term-matches-nothing"),
    ],
)
def test_node_affinity(spec: dict[str, Any], expected: bool) -> None:
    target = node("n1", labels={"zone": "a", "gen": "4"})
    assert affinity_matches(pod(**spec), target) is expected


def test_effective_requests_take_init_containers_and_overhead() -> None:
    spec = pod(cpu="500m")
    spec["spec"]["containers"].append({"name": "b", "resources": {"requests": {"cpu": "250m"}}})
    spec["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "1"}}}]
    spec["spec"]["overhead"] = {"cpu": "100m"}
    assert pod_requests(spec)["cpu"] == Decimal("1.1")
    assert pod_requests(pod(gpus=2))[vocab.GPU_RESOURCE] == 2  # request defaulted from limit


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", Decimal("0.5")), ("1Gi", Decimal(2**30)), ("1e3", Decimal(1000)), ("2", Decimal(2))],
)
def test_quantities(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


def test_resources_count_what_bound_pods_request() -> None:
    info = NodeInfo(node("n1", gpus=4), {vocab.GPU_RESOURCE: Decimal(3)}, 1)
    failure = node_failure(pod(gpus=2), pod_requests(pod(gpus=2)), info)
    assert failure is not None
    assert failure.reasons == (f"Insufficient {vocab.GPU_RESOURCE}",)
    assert node_failure(pod(gpus=1), pod_requests(pod(gpus=1)), info) is None


def test_a_not_ready_node_counts_as_tainted() -> None:
    failure = node_failure(pod(), {}, NodeInfo(node("n1", ready="False")))
    assert failure is not None
    assert failure.reasons == ("node(s) had untolerated taint {node.kubernetes.io/not-ready: }",)


def test_the_fit_error_message_format() -> None:
    nodes = [
        node("reserved", taints=[TAINT]),
        node("small-1", gpus=0),
        node("small-2", gpus=0),
        node("cordoned", unschedulable=True),
    ]
    [placement] = schedule(nodes, [pod(gpus=1)])
    assert placement.node is None
    assert placement.message == (
        "0/4 nodes are available: "
        f"1 node(s) had untolerated taint {{{vocab.RESERVATION_TAINT_KEY}: h100}}, "
        "1 node(s) were unschedulable, "
        f"2 Insufficient {vocab.GPU_RESOURCE}. "
        "preemption: 0/4 nodes are available: "
        "2 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling."
    )
    assert fit_error(0, []) == "no nodes available to schedule pods"


def test_a_tolerating_pod_goes_to_the_reserved_node_and_one_pass_never_overfills() -> None:
    nodes = [node("reserved", gpus=4, taints=[TAINT])]
    pods = [
        pod("a", gpus=3, tolerations=[reservation_toleration()]),
        pod("b", gpus=3, tolerations=[reservation_toleration()]),
        pod(
            "gated", gpus=1, tolerations=[reservation_toleration()], schedulingGates=[{"name": "g"}]
        ),
        pod("bound", gpus=1, node_name="reserved", phase="Running"),
    ]
    placements = {p.pod["metadata"]["name"]: p for p in schedule(nodes, pods)}
    assert set(placements) == {"a", "b"}
    assert placements["a"].node == "reserved"
    assert placements["b"].node is None
    assert placements["b"].message.startswith(
        f"0/1 nodes are available: 1 Insufficient {vocab.GPU_RESOURCE}."
    )


def one_by_one(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[Placement]:
    """The pass without sharing verdicts between pods of one shape (the reference)."""
    infos = node_infos(nodes, pods)
    placements = []
    for p in sorted(filter(needs_scheduling, pods), key=_order):
        placement = place(p, infos)
        if placement.node is not None:
            infos[placement.node] = charge(infos[placement.node], pod_requests(p))
        placements.append(placement)
    return placements


def test_pods_of_one_shape_share_a_verdict_until_a_placement_changes_the_nodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes = [
        node("reserved", gpus=4, taints=[TAINT]),
        node("plain", gpus=2, labels={"disk": "ssd"}),
    ]
    tolerant = [reservation_toleration()]
    pods = [
        pod("a1", gpus=1),  # fits "plain" (twice), then nothing is left for this shape
        pod("a2", gpus=1),
        pod("a3", gpus=1),
        pod("a4", gpus=1),
        pod("t1", gpus=3, tolerations=tolerant),  # a placement: every shared verdict is stale
        pod("a5", gpus=1),
        pod("s1", gpus=1, nodeSelector={"disk": "hdd"}),
        pod("s2", gpus=1, nodeSelector={"disk": "hdd"}),
        pod("t2", gpus=1, tolerations=tolerant),
        pod("t3", gpus=1, tolerations=tolerant),
        pod("t4", gpus=1, tolerations=tolerant),
    ]
    for i, p in enumerate(pods):  # queue order = list order
        p["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{i:02d}Z"
    expected = [(p.pod["metadata"]["name"], p.node, p.message) for p in one_by_one(nodes, pods)]
    evaluated: list[str] = []

    def counted(p: dict[str, Any], infos: dict[str, NodeInfo], wanted: Any = None) -> Placement:
        evaluated.append(p["metadata"]["name"])
        return place(p, infos, wanted)

    monkeypatch.setattr(scheduling, "place", counted)
    got = [(p.pod["metadata"]["name"], p.node, p.message) for p in schedule(nodes, pods)]
    assert got == expected
    assert [n for n, node_name, _ in got if node_name] == ["a1", "a2", "t1", "t2"]
    # a4 shares a3's verdict, a5 is evaluated again after t1's placement, s2 shares s1's
    # and t4 shares t3's
    assert evaluated == ["a1", "a2", "a3", "t1", "a5", "s1", "t2", "t3"]


def versioned(p: dict[str, Any], uid: str, version: str) -> dict[str, Any]:
    p["metadata"].update(uid=uid, resourceVersion=version)
    return p


def test_reads_are_kept_per_pod_version_and_a_new_version_is_read_again() -> None:
    reads = scheduling.Reads()
    first, key = reads.of(versioned(pod("a", gpus=1), "u1", "5"))
    again, same_key = reads.of(versioned(pod("a", gpus=1), "u1", "5"))
    assert again is first  # kept: not parsed again
    assert same_key == key
    grown, grown_key = reads.of(versioned(pod("a", gpus=2), "u1", "6"))
    assert grown[vocab.GPU_RESOURCE] == 2
    assert grown_key != key
    unversioned = pod("b", gpus=3)
    assert reads.of(unversioned)[0] is not reads.of(unversioned)[0]  # never kept
    reads.keep(set())
    assert reads.of(versioned(pod("a", gpus=2), "u1", "6"))[0] is not grown  # forgotten


def test_a_pass_with_kept_reads_decides_like_a_fresh_one() -> None:
    nodes = [node("reserved", gpus=2, taints=[TAINT]), node("plain", gpus=1)]
    tolerating = [reservation_toleration()]
    pods = [
        versioned(pod(f"p{i}", gpus=1, tolerations=tolerating if i % 2 else []), f"u{i}", "1")
        for i in range(6)
    ]
    reads = scheduling.Reads()
    warm = schedule(nodes, pods, reads)
    assert schedule(nodes, pods, reads) == warm == schedule(nodes, pods)
    bound = [versioned(pod("x", gpus=2, node_name="reserved", phase="Running"), "ux", "1")]
    assert schedule(nodes, bound + pods, reads) == schedule(nodes, bound + pods)
