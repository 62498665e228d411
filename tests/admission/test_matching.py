"""Which requests reach a webhook: rules, scope, selectors (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from sandbox.kube.admission.matching import (
    exempt,
    namespace_selector_matches,
    object_selector_matches,
    rule_matches,
)
from sandbox.kube.admission.selectors import SelectorError, matches
from tests.admission.builders import attrs, pod

RULE = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"]}


@pytest.mark.parametrize(
    ("resources", "subresource", "expected"),
    [
        pytest.param(["pods"], "", True, id="pods-matches-the-main-resource"),
        pytest.param(["pods"], "binding", False, id="pods-never-matches-a-subresource"),
        pytest.param(["pods/*"], "binding", True, id="pods-star-matches-subresources"),
        pytest.param(["pods/*"], "", True, id="pods-star-matches-the-main-resource-too"),
        pytest.param(["pods/status"], "status", True, id="named-subresource"),
        pytest.param(["pods/status"], "binding", False, id="other-subresource"),
        pytest.param(["*"], "", True, id="star-matches-main-resources"),
        pytest.param(["*"], "status", False, id="star-skips-subresources"),
        pytest.param(["*/*"], "status", True, id="star-star-matches-everything"),
        pytest.param(["nodes"], "", False, id="other-resource"),
    ],
)
def test_resource_patterns(resources: list[str], subresource: str, expected: bool) -> None:
    """Rule: ``pods`` matches only the main resource, ``pods/*`` and ``pods/<sub>`` the
    subresources, ``*`` main resources only, ``*/*`` everything."""
    request = attrs(subresource=subresource)
    assert rule_matches({**RULE, "resources": resources}, request) is expected


@pytest.mark.parametrize(
    ("field", "values", "expected"),
    [
        pytest.param("operations", ["UPDATE"], False, id="operation-not-listed"),
        pytest.param("operations", ["*"], True, id="any-operation"),
        pytest.param("apiGroups", ["apps"], False, id="other-group"),
        pytest.param("apiVersions", ["v2"], False, id="other-version"),
    ],
)
def test_rule_fields(field: str, values: list[str], expected: bool) -> None:
    """Rule: operations, apiGroups and apiVersions must all match (``*`` matches any)."""
    rule = {**RULE, "resources": ["pods"], field: values}
    assert rule_matches(rule, attrs()) is expected


def test_scope() -> None:
    """Rule: scope Namespaced/Cluster limits the rule to namespaced/cluster-scoped requests."""
    rule = {**RULE, "resources": ["pods"]}
    assert rule_matches({**rule, "scope": "Namespaced"}, attrs())
    assert not rule_matches({**rule, "scope": "Cluster"}, attrs())
    assert rule_matches({**rule, "scope": "Cluster"}, attrs(namespace=None))


def test_configuration_objects_are_exempt() -> None:
    """Rule: webhooks are never called for webhook configuration objects."""
    request = dataclasses.replace(
        attrs(), group="admissionregistration.k8s.io", resource="mutatingwebhookconfigurations"
    )
    assert exempt(request)
    assert not exempt(attrs())


def test_namespace_selector_reads_the_namespace_labels() -> None:
    """Rule: namespaceSelector matches the labels of the object's namespace; cluster-scoped objects
    are never skipped."""
    selector = {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}
    assert namespace_selector_matches(selector, attrs(), {"team": "a"})
    assert not namespace_selector_matches(selector, attrs(), {"team": "b"})
    assert namespace_selector_matches(selector, attrs(namespace=None), {})


def test_object_selector_matches_new_or_old_object() -> None:
    """Rule: objectSelector runs the webhook if either the object or oldObject matches."""
    selector = {"matchLabels": {"app": "x"}}
    with_label = pod("p", labels={"app": "x"})
    assert object_selector_matches(selector, attrs(pod("p"), "UPDATE", old=with_label))
    assert not object_selector_matches(selector, attrs(pod("p")))
    assert object_selector_matches({}, attrs(None, "DELETE", old=pod("p")))


def test_selector_operators() -> None:
    """Rule: label selector operators In, NotIn, Exists, DoesNotExist; an unknown operator is an
    error."""
    assert matches({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {})
    assert not matches({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {})
    assert matches({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x"]}]}, {})
    with pytest.raises(SelectorError):
        matches({"matchExpressions": [{"key": "a", "operator": "Near"}]}, {})
