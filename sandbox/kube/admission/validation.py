"""Defaulting and validation of MutatingWebhookConfiguration writes (422 when invalid).

Mirrors kubernetes/kubernetes ``pkg/apis/admissionregistration/validation`` for the
fields the dispatcher relies on, plus the sandbox's own limits: only ``v1`` reviews
are sent (a configuration must list ``v1`` in admissionReviewVersions), and
matchConditions must compile with the variables and functions ``cel.py`` provides.
Runs as a mutating admission plugin on CREATE/UPDATE of the configurations — the
apiserver defaults and validates them before storage in the same request.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from sandbox.kube import errors as api
from sandbox.kube.admission.cel import CELError, compile_condition
from sandbox.kube.admission.config import DEFAULT_SERVICE_PORT, DEFAULT_TIMEOUT_S, FAIL
from sandbox.kube.admission.hook import AdmissionAttributes, AdmissionResult
from sandbox.kube.admission.matching import ADMISSION_GROUP
from sandbox.kube.admission.selectors import SelectorError, matches
from sandbox.kube.admission.status import refusal
from sandbox.kube.clone import clone
from sandbox.kube.errors import FieldError

KIND = "MutatingWebhookConfiguration"
RESOURCE = "mutatingwebhookconfigurations"
MAX_MATCH_CONDITIONS = 64
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT", "*")
_ENUMS: dict[str, tuple[str, ...]] = {
    "failurePolicy": ("Fail", "Ignore"),
    "matchPolicy": ("Exact", "Equivalent"),
    "reinvocationPolicy": ("Never", "IfNeeded"),
    "sideEffects": ("None", "NoneOnDryRun"),
}


class Causes:
    """Field errors (``sandbox.kube.errors.FieldError``) collected while validating."""

    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def invalid(self, field: str, value: Any, detail: str) -> None:
        self.items.append(api.invalid_value(field, value, detail))

    def required(self, field: str, detail: str = "") -> None:
        self.items.append(api.required(field, detail))

    def unsupported(self, field: str, value: Any, allowed: tuple[str, ...]) -> None:
        self.items.append(api.not_supported(field, value, list(allowed)))

    def duplicate(self, field: str, value: Any) -> None:
        self.items.append(api.duplicate(field, value))

    def too_many(self, field: str, count: int, limit: int) -> None:
        detail = f"must have at most {limit} items"
        self.items.append(FieldError("FieldValueTooMany", field, detail, count, True))


class ConfigurationValidator:
    """``MutatingAdmission`` that defaults and validates webhook configurations."""

    async def admit(self, attrs: AdmissionAttributes) -> AdmissionResult:
        if not _applies(attrs) or attrs.object is None:
            return AdmissionResult(attrs.object)
        obj = default_configuration(attrs.object)
        causes = validate_configuration(obj)
        if causes:
            name = str((obj.get("metadata") or {}).get("name") or attrs.name)
            raise refusal(api.invalid(KIND, ADMISSION_GROUP, name, causes))
        return AdmissionResult(obj)


def _applies(attrs: AdmissionAttributes) -> bool:
    return (
        attrs.group == ADMISSION_GROUP
        and attrs.resource == RESOURCE
        and not attrs.subresource
        and attrs.operation in ("CREATE", "UPDATE")
    )


def default_configuration(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy with the v1 defaults filled in. No side effects."""
    result = clone(obj)
    for webhook in result.get("webhooks") or []:
        if not isinstance(webhook, dict):
            continue
        webhook.setdefault("failurePolicy", FAIL)
        webhook.setdefault("matchPolicy", "Equivalent")
        webhook.setdefault("reinvocationPolicy", "Never")
        webhook.setdefault("timeoutSeconds", DEFAULT_TIMEOUT_S)
        webhook.setdefault("namespaceSelector", {})
        webhook.setdefault("objectSelector", {})
        for rule in webhook.get("rules") or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")
        service = (webhook.get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", DEFAULT_SERVICE_PORT)
    return result


def validate_configuration(obj: dict[str, Any]) -> list[FieldError]:
    """Field errors of a (defaulted) configuration; empty when valid. No side effects."""
    causes = Causes()
    seen: set[str] = set()
    for index, webhook in enumerate(obj.get("webhooks") or []):
        path = f"webhooks[{index}]"
        if not isinstance(webhook, dict):
            causes.invalid(path, webhook, "must be an object")
            continue
        name = str(webhook.get("name") or "")
        if name in seen:
            causes.duplicate(f"{path}.name", name)
        seen.add(name)
        _webhook(webhook, path, causes)
    return causes.items


def _webhook(webhook: dict[str, Any], path: str, causes: Causes) -> None:
    _name(webhook.get("name"), f"{path}.name", causes)
    _client_config(webhook.get("clientConfig") or {}, f"{path}.clientConfig", causes)
    for key, allowed in _ENUMS.items():
        value = webhook.get(key)
        if value is None and key == "sideEffects":
            causes.required(f"{path}.sideEffects")
        elif value is not None and value not in allowed:
            causes.unsupported(f"{path}.{key}", value, allowed)
    timeout = webhook.get("timeoutSeconds")
    if not isinstance(timeout, int) or not 1 <= timeout <= 30:
        causes.invalid(
            f"{path}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 seconds"
        )
    versions = webhook.get("admissionReviewVersions") or []
    if not versions:
        causes.required(f"{path}.admissionReviewVersions", "must specify one of v1")
    elif "v1" not in versions:
        causes.invalid(
            f"{path}.admissionReviewVersions", versions, "must include at least one of v1"
        )
    for index, rule in enumerate(webhook.get("rules") or []):
        _rule(rule, f"{path}.rules[{index}]", causes)
    for key in ("namespaceSelector", "objectSelector"):
        _selector(webhook.get(key), f"{path}.{key}", causes)
    _match_conditions(webhook.get("matchConditions") or [], f"{path}.matchConditions", causes)


def _name(name: Any, path: str, causes: Causes) -> None:
    if not name:
        causes.required(path)
    elif not _DNS_SUBDOMAIN.match(str(name)) or len(str(name)) > 253:
        causes.invalid(
            path,
            name,
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.'",
        )
    elif str(name).count(".") < 2:
        causes.invalid(
            path, name, "should be a domain with at least three segments separated by dots"
        )


def _client_config(client: dict[str, Any], path: str, causes: Causes) -> None:
    url, service = client.get("url"), client.get("service")
    if bool(url) == bool(service):
        causes.required(path, "exactly one of url or service is required")
        return
    if url:
        _url(str(url), f"{path}.url", causes)
    else:
        _service(dict(service or {}), f"{path}.service", causes)


def _service(service: dict[str, Any], path: str, causes: Causes) -> None:
    for key in ("namespace", "name"):
        if not service.get(key):
            causes.required(f"{path}.{key}")
    port = service.get("port")
    if not isinstance(port, int) or not 1 <= port <= 65535:
        causes.invalid(
            f"{path}.port",
            port,
            "port is not valid: must be between 1 and 65535, inclusive",
        )
    svc_path = service.get("path")
    if svc_path is not None and not str(svc_path).startswith("/"):
        causes.invalid(f"{path}.path", svc_path, "must start with a '/'")


def _url(url: str, path: str, causes: Causes) -> None:
    parts = urlsplit(url)
    if parts.scheme != "https":
        causes.invalid(path, url, "'https' is the only allowed URL scheme")
    elif not parts.hostname:
        causes.invalid(path, url, "host must be specified")
    elif parts.username or parts.password:
        causes.invalid(path, url, "user information is not permitted in the URL")
    elif parts.query or parts.fragment:
        causes.invalid(path, url, "query parameters and fragments are not permitted")


def _rule(rule: dict[str, Any], path: str, causes: Causes) -> None:
    operations = list(rule.get("operations") or [])
    if not operations:
        causes.required(f"{path}.operations")
    for op in operations:
        if op not in _OPERATIONS:
            causes.unsupported(f"{path}.operations", op, _OPERATIONS)
    for key in ("operations", "apiGroups", "apiVersions", "resources"):
        values = list(rule.get(key) or [])
        if key != "operations" and not values:
            causes.required(f"{path}.{key}")
        if "*" in values and len(values) > 1:
            causes.invalid(
                f"{path}.{key}", values, "if '*' is present, must not specify other values"
            )
    scope = rule.get("scope")
    if scope not in ("*", "Cluster", "Namespaced"):
        causes.unsupported(f"{path}.scope", scope, ("*", "Cluster", "Namespaced"))


def _selector(selector: Any, path: str, causes: Causes) -> None:
    try:
        matches(selector or {}, {})
    except SelectorError as exc:
        causes.invalid(path, selector, str(exc))


def _match_conditions(conditions: list[Any], path: str, causes: Causes) -> None:
    if len(conditions) > MAX_MATCH_CONDITIONS:
        causes.too_many(path, len(conditions), MAX_MATCH_CONDITIONS)
    names: set[str] = set()
    for index, condition in enumerate(conditions):
        item = f"{path}[{index}]"
        name = str((condition or {}).get("name") or "")
        expression = str((condition or {}).get("expression") or "")
        if not name:
            causes.required(f"{item}.name")
        elif name in names:
            causes.duplicate(f"{item}.name", name)
        names.add(name)
        if not expression:
            causes.required(f"{item}.expression")
            continue
        try:
            compile_condition(name, expression)
        except CELError as exc:
            causes.invalid(f"{item}.expression", expression, str(exc))
