"""matchConditions through cel-python: compile checks and the apiserver's match rule."""

from __future__ import annotations

import pytest

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
