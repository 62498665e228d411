"""matchConditions: compile checks (cel-python), native evaluation, the apiserver's match rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.kube.admission import cel
from shared import vocab

GPU_CONDITION = (
    "object.spec.containers.exists(c, has(c.resources.limits) && "
    f"'{vocab.GPU_RESOURCE}' in c.resources.limits)"
)


def gpu_pod(count: str | None) -> dict[str, object]:
    resources = {"limits": {vocab.GPU_RESOURCE: count}} if count else {}
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": resources}]}}


def run(expression: str, obj: object, request: dict[str, object] | None = None) -> cel.MatchOutcome:
    condition = cel.compile_condition("c", expression)
    return cel.match([condition], cel.activation(obj, None, request or {}))  # type: ignore[arg-type]


def test_the_design_documents_condition_evaluates() -> None:
    assert run(GPU_CONDITION, gpu_pod("1")) == cel.MatchOutcome(True)
    assert run(GPU_CONDITION, gpu_pod(None)) == cel.MatchOutcome(False)


def test_request_old_object_and_has() -> None:
    assert run("request.operation == 'CREATE' && oldObject == null", {}, {"operation": "CREATE"})
    label = f"has(object.metadata.labels) && '{vocab.GPU_CLASS_LABEL}' in object.metadata.labels"
    assert run(label, {"metadata": {"labels": {vocab.GPU_CLASS_LABEL: "h100"}}}).matches
    assert not run(label, {"metadata": {}}).matches


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        pytest.param("1 +", "compilation failed", id="syntax"),
        pytest.param("params.x == 1", "undeclared reference to 'params'", id="unbound-variable"),
        pytest.param("authorizer.path('/x').check('get').allowed()", "authorizer", id="authorizer"),
        pytest.param("[1].all(x, y > 0)", "'y'", id="unbound-inside-macro"),
        pytest.param("object.metadata.name.lowerAscii() == 'a'", "lowerAscii", id="k8s-extension"),
    ],
)
def test_compile_rejects(expression: str, message: str) -> None:
    with pytest.raises(cel.CELError, match=message):
        cel.compile_condition("c", expression)


def test_comprehension_variables_are_bound() -> None:
    assert run("object.spec.containers.all(c, c.resources == {})", gpu_pod(None)).matches


def test_false_wins_over_an_error() -> None:
    failing = cel.compile_condition("err", "object.missing.field == 1")
    false = cel.compile_condition("no", "1 == 2")
    variables = cel.activation({}, None, {})
    assert cel.match([failing, false], variables) == cel.MatchOutcome(False)
    outcome = cel.match([failing], variables)
    assert not outcome.matches
    assert outcome.error is not None
    assert "resulted in error" in outcome.error


def test_a_non_boolean_result_is_an_error() -> None:
    outcome = run("object.metadata.name", {"metadata": {"name": "p"}})
    assert outcome.error is not None
    assert "must evaluate to bool" in outcome.error


@pytest.mark.parametrize(
    "expression",
    [
        "1 + 'a' == 2",  # no such overload
        "1 / 0 == 1",
        "has(oldObject.metadata)",  # a member of null
        "object.metadata.labels['x'] == 'y'",  # a missing key
    ],
)
def test_an_evaluation_error_is_reported_not_raised(expression: str) -> None:
    outcome = run(expression, {"metadata": {"name": "p"}})
    assert not outcome.matches
    assert outcome.error is not None
    assert "resulted in error" in outcome.error


_LABELS = st.dictionaries(
    st.sampled_from([vocab.GPU_CLASS_LABEL, "app", f"{vocab.ANNOTATION_PREFIX}x"]), st.just("v")
)
_RESOURCES = st.dictionaries(
    st.sampled_from(["cpu", vocab.GPU_RESOURCE, "amd.com/gpu", "example.com/fpga"]), st.just("1")
)
_TOLERATIONS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "key": st.sampled_from(["", vocab.RESERVATION_TAINT_KEY, "other"]),
            "operator": st.sampled_from(["Exists", "Equal"]),
        },
    ),
    max_size=2,
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, object]:
    """Pods over the fields the chart's conditions read, each present or absent."""
    meta: dict[str, object] = {"name": "p"}
    for key in ("labels", "annotations"):
        if draw(st.booleans()):
            meta[key] = draw(_LABELS)
    spec: dict[str, object] = {}
    containers = []
    for _ in range(draw(st.integers(1, 2))):
        resources = {k: draw(_RESOURCES) for k in ("limits", "requests") if draw(st.booleans())}
        containers.append({"name": "c", **({"resources": resources} if resources else {})})
    spec["containers"] = containers
    if draw(st.booleans()):
        spec["tolerations"] = draw(_TOLERATIONS)
    if draw(st.booleans()):
        spec["nodeName"] = draw(st.sampled_from(["", "n1"]))
    return {"metadata": meta, "spec": spec}


def _chart_conditions() -> list[cel.Condition]:
    from sandbox import chart

    configuration = chart.objects(vocab.PRODUCT_NAME).webhook_configuration
    return [
        cel.compile_condition(c["name"], c["expression"])
        for hook in configuration["webhooks"]
        for c in hook.get("matchConditions") or []
    ]


@settings(max_examples=60, deadline=None)
@given(
    pod=pods(), old=st.one_of(st.none(), pods()), operation=st.sampled_from(["CREATE", "UPDATE"])
)
def test_the_native_interpreter_agrees_with_cel_python_on_the_charts_conditions(
    pod: dict[str, object], old: dict[str, object] | None, operation: str
) -> None:
    """The emulator evaluates natively; cel-python, the reference it replaced for
    evaluation, gives the same verdict (or an error for both) on every pod."""
    import celpy.adapter

    request = {"operation": operation}
    for condition in CHART_CONDITIONS:
        try:
            native: object = cel.evaluate(condition, cel.activation(pod, old, request))
        except cel.CELError:
            native = "error"
        program = celpy.Environment().program(celpy.Environment().compile(condition.expression))
        variables = {
            "object": celpy.adapter.json_to_cel(pod),
            "oldObject": celpy.adapter.json_to_cel(old),
            "request": celpy.adapter.json_to_cel(request),
        }
        try:
            reference = program.evaluate(variables)
        except (celpy.evaluation.CELEvalError, TypeError, ValueError, KeyError):
            reference = None
        expected = bool(reference) if isinstance(reference, celpy.celtypes.BoolType) else "error"
        assert native == expected, condition.name


CHART_CONDITIONS = _chart_conditions()
