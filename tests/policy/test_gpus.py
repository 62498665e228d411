"""A pod's effective GPU request, as Kubernetes computes it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import vocab
from shared.policy.gpus import Unreadable, parse_quantity, pod_gpus
from tests.policy.builders import PodBuilder

G = vocab.GPU_RESOURCE


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(2, 2, id="a JSON integer"),
        pytest.param("2", 2, id="a plain string"),
        pytest.param("0", 0, id="zero"),
        pytest.param("2000m", 2, id="milli units that add up to whole GPUs"),
        pytest.param("1000000000n", 1, id="nano units the API server accepts as one GPU"),
        pytest.param("3000000u", 3, id="micro units"),
        pytest.param("1k", 1000, id="a decimal suffix"),
        pytest.param("2e0", 2, id="an exponent"),
        pytest.param(" 3 ", 3, id="surrounding blanks"),
        pytest.param("+4", 4, id="an explicit plus sign"),
        pytest.param("007", 7, id="leading zeros"),
        pytest.param("1000000", 1_000_000, id="the most GPUs a pod may ask for"),
        pytest.param("0" * 20 + "3", 3, id="many leading zeros"),
        pytest.param("\u0663", 3, id="a non-ASCII digit, as Decimal reads it"),
    ],
)
def test_quantities_that_are_whole_gpu_counts(value: Any, expected: int) -> None:
    assert parse_quantity(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("1.5", id="a fraction"),
        pytest.param("500m", id="half a GPU in milli units"),
        pytest.param("1n", id="a nano unit"),
        pytest.param("-1", id="a negative count"),
        pytest.param("two", id="a word"),
        pytest.param("", id="an empty string"),
        pytest.param(True, id="a boolean"),
        pytest.param(1.0, id="a JSON float"),
        pytest.param(None, id="null"),
        pytest.param({"n": 1}, id="an object"),
        pytest.param("1Ei", id="more GPUs than any node has"),
        pytest.param("1e999", id="an absurd exponent"),
        pytest.param("1000001", id="one GPU more than any node has"),
        pytest.param("9" * 5000, id="more digits than int() converts"),
        pytest.param("²", id="a superscript digit"),
    ],
)
def test_quantities_that_are_unreadable(value: Any) -> None:
    with pytest.raises(Unreadable):
        parse_quantity(value)


def spec_pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "alice"}, "spec": spec}


def c(gpus: int | None = None, section: str = "limits", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "x", "image": "i", **extra}
    if gpus is not None:
        body["resources"] = {section: {G: str(gpus)}}
    return body


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"containers": [c()]}, 0, id="a pod asking for no GPU"),
        pytest.param({"containers": [c(2)]}, 2, id="a limit implies the request"),
        pytest.param({"containers": [c(2, "requests")]}, 2, id="a request alone"),
        pytest.param({"containers": [c(1), c(2)]}, 3, id="containers add up"),
        pytest.param(
            {"initContainers": [c(4)], "containers": [c(1)]},
            4,
            id="a larger init container sets the peak",
        ),
        pytest.param(
            {"initContainers": [c(1), c(2)], "containers": [c(3)]},
            3,
            id="init containers run one at a time",
        ),
        pytest.param(
            {"initContainers": [c(1, restartPolicy="Always")], "containers": [c(2)]},
            3,
            id="a sidecar runs next to the containers",
        ),
        pytest.param(
            {
                "initContainers": [c(1, restartPolicy="Always"), c(3)],
                "containers": [c(1)],
            },
            4,
            id="an init container runs next to the sidecars started before it",
        ),
        pytest.param({"containers": [c(1)], "overhead": {G: "1"}}, 2, id="pod overhead is added"),
        pytest.param(
            {
                "containers": [
                    {"name": "x", "resources": {"requests": {G: "1"}, "limits": {G: "2"}}}
                ]
            },
            1,
            id="the request wins over a different limit",
        ),
    ],
)
def test_effective_request(spec: dict[str, Any], expected: int) -> None:
    result = pod_gpus(spec_pod(spec))
    assert result.readable
    assert result.count == expected


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param({"metadata": {}}, id="no spec"),
        pytest.param("not a pod", id="not an object"),
        pytest.param(spec_pod({"containers": "x"}), id="containers not a list"),
        pytest.param(spec_pod({"containers": ["x"]}), id="a container not an object"),
        pytest.param(spec_pod({"containers": [{"resources": [1]}]}), id="resources not an object"),
        pytest.param(
            spec_pod({"containers": [{"resources": {"limits": 3}}]}), id="limits not a map"
        ),
        pytest.param(spec_pod({"containers": [c()], "overhead": "1"}), id="overhead not a map"),
        pytest.param(PodBuilder().gpus("0.5").build(), id="half a GPU"),
        pytest.param(PodBuilder().gpus("lots").build(), id="garbage quantity"),
    ],
)
def test_malformed_pods_are_unreadable_not_errors(pod: Any) -> None:
    result = pod_gpus(pod)
    assert not result.readable
    assert result.count == 0
    assert result.problem


@settings(deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "spec",
                        "containers",
                        "initContainers",
                        "resources",
                        "limits",
                        "requests",
                        G,
                        "overhead",
                        "restartPolicy",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
def test_any_garbage_gives_an_outcome_never_an_exception(pod: Any) -> None:
    result = pod_gpus(pod)
    assert result.count >= 0


# --- weighted GPU resources ---------------------------------------------------------

MIG = "nvidia.com/mig-1g.10gb"


def _pod(*boxes: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(boxes)}
    if init:
        spec["initContainers"] = list(init)
    return {"spec": spec}


def test_each_listed_resource_counts_by_its_weight_with_the_init_rule() -> None:
    from shared.policy.gpus import GpuResources, pod_gpus

    resources = GpuResources(((vocab.GPU_RESOURCE, 1), (MIG, 3)))
    pod = _pod(
        {"name": "a", "resources": {"limits": {MIG: "1", vocab.GPU_RESOURCE: "2"}}},
        {"name": "b", "resources": {"requests": {MIG: "1"}}},
        init=({"name": "i", "resources": {"limits": {MIG: "4"}}},),
    )
    # running: 2 GPUs + 2 MIG; init peak: 4 MIG -> max per resource: 2 and 4
    assert pod_gpus(pod, resources).count == 2 * 1 + 4 * 3
    assert pod_gpus(pod, resources).unlisted == ()


def test_unlisted_resources_under_a_prefix_are_reported_not_counted() -> None:
    from shared.policy.gpus import pod_gpus

    pod = _pod(
        {"name": "a", "resources": {"limits": {MIG: "1", "amd.com/gpu": "1"}}},
        init=({"name": "i", "resources": {"requests": {"gpu.intel.com/xe": "1"}}},),
    )
    found = pod_gpus(pod)
    assert found.count == 0
    assert found.readable
    assert found.unlisted == ("amd.com/gpu", "gpu.intel.com/xe", MIG)


def test_the_default_counts_exactly_as_before() -> None:
    from shared.policy.gpus import pod_gpus

    pod = _pod({"name": "a", "resources": {"limits": {vocab.GPU_RESOURCE: "2", "cpu": "1"}}})
    assert pod_gpus(pod).count == 2
    assert pod_gpus(pod).unlisted == ()


def test_a_malformed_listed_quantity_is_unreadable() -> None:
    from shared.policy.gpus import GpuResources, pod_gpus

    resources = GpuResources(((vocab.GPU_RESOURCE, 1), (MIG, 1)))
    found = pod_gpus(_pod({"name": "a", "resources": {"limits": {MIG: "0.5"}}}), resources)
    assert not found.readable
