"""matchConditions evaluated on what they can read: the variables cut down (``reach``) give
every expression the verdict, or the error, the whole variables give."""

from __future__ import annotations

from typing import Any

import cel as native
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox import chart
from sandbox.kube.admission import cel
from sandbox.kube.admission.reach import narrowed
from shared import vocab

EXPRESSIONS = [
    "has(object.metadata.labels) && 'gpu-class' in object.metadata.labels",
    "object.spec.containers.exists(c, has(c.resources) && has(c.resources.limits) "
    "&& c.resources.limits.exists(r, r.startsWith('nvidia.com/')))",
    "object.spec.containers.all(c, c.name.startsWith('m'))",
    "object.spec.containers.exists_one(c, c.name == 'main')",
    "object.spec.containers.map(c, c.name).exists(n, n == 'main')",
    "object.spec.containers.filter(c, c.name == 'main').size() == 1",
    "size(object.spec.containers) == 1",
    "object.spec.containers[0].name == 'main'",
    "object.metadata.labels['gpu-class'] == 'a100'",
    "object.metadata.labels.exists(k, k == 'gpu-class')",
    "object.metadata.name == 'p' && object.metadata.name.startsWith('p')",
    "object.spec.nodeName != ''",
    "object.spec.missing.field == 1",
    "object.metadata == oldObject.metadata",
    "object == oldObject",
    "request.operation == 'UPDATE' && oldObject.spec.nodeName == 'n1'",
    "(object.metadata).name == 'p'",
    "object.spec.containers.exists(object, object.name == 'main')",
    "[1, 2].exists(x, x == 2) && dyn(object).metadata.name == 'p'",
    "object.status.phase == 'Pending' ? object.metadata.name == 'p' : false",
]

_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["", "main"]))
_LABELS = st.dictionaries(
    st.sampled_from([vocab.GPU_CLASS_LABEL, "app"]), st.sampled_from(["a100", "x"])
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    """Pods with the fields the expressions read, sometimes missing or of a wrong type,
    beside fields none reads."""
    container: dict[str, Any] = {"name": draw(st.sampled_from(["main", "side", 3]))}
    if draw(st.booleans()):
        limits = draw(st.dictionaries(st.sampled_from([vocab.GPU_RESOURCE, "cpu"]), _SCALAR))
        container["resources"] = {"limits": limits}
    container["terminationMessagePath"] = "/dev/termination-log"
    meta: dict[str, Any] = {"name": draw(st.sampled_from(["p", "q"])), "uid": "u"}
    if draw(st.booleans()):
        meta["labels"] = draw(st.one_of(_LABELS, _SCALAR))
    spec: dict[str, Any] = {
        "containers": draw(st.one_of(st.lists(st.just(container), max_size=2), _SCALAR)),
        "dnsPolicy": "ClusterFirst",
    }
    if draw(st.booleans()):
        spec["nodeName"] = draw(st.sampled_from(["", "n1"]))
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def outcome(program: Any, variables: dict[str, Any]) -> object:
    try:
        return program.execute(variables)
    except (RuntimeError, TypeError, ValueError, LookupError, ArithmeticError) as exc:
        return (type(exc), str(exc))


@settings(max_examples=150, deadline=None)
@given(
    pod=pods(), old=st.one_of(st.none(), pods()), operation=st.sampled_from(["CREATE", "UPDATE"])
)
def test_cut_down_variables_give_what_the_whole_ones_give(
    pod: dict[str, Any], old: dict[str, Any] | None, operation: str
) -> None:
    variables = {"object": pod, "oldObject": old, "request": {"operation": operation}}
    for expression in EXPRESSIONS:
        condition = cel.compile_condition("c", expression)
        program = native.compile(expression)
        got = outcome(program, narrowed(variables, condition.reads))
        assert got == outcome(program, variables), expression


def test_the_charts_condition_reads_a_pods_labels_annotations_and_resources_only() -> None:
    configuration = chart.objects(vocab.PRODUCT_NAME).webhook_configuration
    conditions = [
        cel.compile_condition(c["name"], c["expression"])
        for hook in configuration["webhooks"]
        for c in hook.get("matchConditions") or []
    ]
    pod = {
        "metadata": {"name": "p", "uid": "u", "labels": {vocab.GPU_CLASS_LABEL: "a100"}},
        "spec": {
            "dnsPolicy": "ClusterFirst",
            "containers": [
                {"name": "m", "image": "x", "resources": {"limits": {vocab.GPU_RESOURCE: "1"}}}
            ],
        },
        "status": {"phase": "Pending"},
    }
    variables = {"object": pod, "oldObject": None, "request": {"operation": "CREATE"}}
    shown = narrowed(variables, conditions[0].reads)["object"]
    assert shown == {
        "metadata": {"labels": {vocab.GPU_CLASS_LABEL: "a100"}},
        "spec": {"containers": [{"resources": {"limits": {vocab.GPU_RESOURCE: "1"}}}]},
    }
    assert cel.match(conditions, variables) == cel.MatchOutcome(True)


@pytest.mark.parametrize(
    ("expression", "bound"),
    [
        pytest.param("request.operation == 'CREATE'", {"request"}, id="one-variable"),
        pytest.param("true", set(), id="no-variable"),
        pytest.param("object.a == oldObject.a", {"object", "oldObject"}, id="two"),
    ],
)
def test_a_variable_never_read_is_bound_to_null(expression: str, bound: set[str]) -> None:
    condition = cel.compile_condition("c", expression)
    variables = {"object": {"a": 1}, "oldObject": {"a": 1}, "request": {"operation": "CREATE"}}
    shown = narrowed(variables, condition.reads)
    assert {name for name, value in shown.items() if value is not None} == bound
