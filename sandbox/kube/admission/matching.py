"""Which webhooks a request reaches: rules, scope, namespaceSelector, objectSelector.

No side effects. Sources: kubernetes/apiserver ``pkg/admission/plugin/webhook/predicates``
(``rules/rules.go``, ``namespace/matcher.go``, ``object/matcher.go``) and
``pkg/admission/plugin/webhook/generic/webhook.go`` (``ShouldCallHook``).

Resource strings: ``pods`` matches the main resource only; ``pods/status`` one
subresource; ``pods/*`` the resource and all its subresources; ``*`` every main resource
and ``*/*`` everything. ``matchPolicy: Equivalent`` changes nothing here: the sandbox
serves a single version of each resource.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandbox.kube.admission.hook import AdmissionAttributes
from sandbox.kube.admission.selectors import matches

ADMISSION_GROUP = "admissionregistration.k8s.io"
#: Webhooks are never called for these (a webhook could otherwise lock the cluster).
EXEMPT_RESOURCES = frozenset(
    {
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
    }
)


def exempt(attrs: AdmissionAttributes) -> bool:
    """True for the admission configuration resources themselves."""
    return attrs.group == ADMISSION_GROUP and attrs.resource in EXEMPT_RESOURCES


def is_namespace_request(attrs: AdmissionAttributes) -> bool:
    """A request on a Namespace object itself."""
    return attrs.group == "" and attrs.resource == "namespaces"


def rule_matches(rule: Mapping[str, Any], attrs: AdmissionAttributes) -> bool:
    """One ``rules[]`` entry against the request (operation, group, version, resource, scope)."""
    return (
        _listed(rule.get("operations"), attrs.operation)
        and _listed(rule.get("apiGroups"), attrs.group)
        and _listed(rule.get("apiVersions"), attrs.version)
        and _resource_matches(rule.get("resources") or [], attrs.resource, attrs.subresource)
        and _scope_matches(rule.get("scope"), attrs)
    )


def any_rule_matches(rules: tuple[dict[str, Any], ...], attrs: AdmissionAttributes) -> bool:
    """True when some rule of the webhook covers the request."""
    return any(rule_matches(r, attrs) for r in rules)


def _listed(values: Any, wanted: str) -> bool:
    items = list(values or [])
    return "*" in items or wanted in items


def _resource_matches(patterns: list[str], resource: str, subresource: str) -> bool:
    for pattern in patterns:
        res, _, sub = pattern.partition("/")
        if (res in ("*", resource)) and (sub in ("*", subresource)):
            return True
    return False


def _scope_matches(scope: Any, attrs: AdmissionAttributes) -> bool:
    namespaced = bool(attrs.namespace) and not is_namespace_request(attrs)
    if scope == "Namespaced":
        return namespaced
    if scope == "Cluster":
        return not namespaced
    return True


def namespace_selector_matches(
    selector: Mapping[str, Any], attrs: AdmissionAttributes, namespace_labels: Mapping[str, str]
) -> bool:
    """``namespaceSelector``: cluster-scoped objects (other than Namespaces) always match.

    For a Namespace object the object's own labels are used (the old ones on DELETE);
    otherwise ``namespace_labels`` are those of the request's namespace.
    """
    if not selector:
        return True
    if is_namespace_request(attrs):
        return matches(selector, _labels(attrs.object or attrs.old_object))
    if not attrs.namespace:
        return True
    return matches(selector, namespace_labels)


def object_selector_matches(selector: Mapping[str, Any], attrs: AdmissionAttributes) -> bool:
    """``objectSelector``: the webhook runs if the new or the old object matches."""
    if not selector:
        return True
    candidates = [o for o in (attrs.object, attrs.old_object) if o is not None]
    return any(matches(selector, _labels(o)) for o in candidates)


def _labels(obj: Mapping[str, Any] | None) -> dict[str, str]:
    metadata = (obj or {}).get("metadata") or {}
    return dict(metadata.get("labels") or {})
