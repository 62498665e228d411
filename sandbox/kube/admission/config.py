"""MutatingWebhookConfiguration objects turned into the webhooks the dispatcher calls.

Defaults are those of admissionregistration.k8s.io/v1 (kubernetes/api
``admissionregistration/v1/types.go`` and its defaulting): failurePolicy ``Fail``,
matchPolicy ``Equivalent``, reinvocationPolicy ``Never``, timeoutSeconds 10, rule scope
``*``, service port 443, empty selectors. Configurations are called in order of
``metadata.name``, webhooks inside one in list order.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sandbox.kube.admission.cel import CELError, Condition, compile_condition

DEFAULT_TIMEOUT_S = 10
DEFAULT_SERVICE_PORT = 443
FAIL = "Fail"
IGNORE = "Ignore"
IF_NEEDED = "IfNeeded"


@dataclass(frozen=True)
class ServiceRef:
    """``clientConfig.service``."""

    namespace: str
    name: str
    path: str
    port: int

    @property
    def host(self) -> str:
        """The DNS name the serving certificate must carry."""
        return f"{self.name}.{self.namespace}.svc"


@dataclass(frozen=True)
class Webhook:
    """One entry of ``webhooks[]`` with defaults applied and conditions compiled.

    ``key`` identifies it across the two admission rounds (configuration name + index).
    ``conditions`` is None when one failed to compile (treated as an evaluation error).
    """

    key: str
    name: str
    url: str | None
    service: ServiceRef | None
    ca_bundle: bytes
    rules: tuple[dict[str, Any], ...]
    failure_policy: str
    side_effects: str
    timeout_s: int
    reinvocation_policy: str
    namespace_selector: dict[str, Any]
    object_selector: dict[str, Any]
    conditions: tuple[Condition, ...] | None
    review_versions: tuple[str, ...]

    @property
    def ignores_failures(self) -> bool:
        """``failurePolicy: Ignore``."""
        return self.failure_policy == IGNORE


def webhooks_in_order(configurations: Iterable[dict[str, Any]]) -> list[Webhook]:
    """Every webhook of every configuration, in the apiserver's calling order."""
    ordered = sorted(configurations, key=lambda c: str((c.get("metadata") or {}).get("name", "")))
    found: list[Webhook] = []
    for config in ordered:
        config_name = str((config.get("metadata") or {}).get("name", ""))
        for index, raw in enumerate(config.get("webhooks") or []):
            found.append(parse_webhook(f"{config_name}/{index}", raw))
    return found


def parse_webhook(key: str, raw: dict[str, Any]) -> Webhook:
    """One webhook with v1 defaults filled in."""
    client = raw.get("clientConfig") or {}
    return Webhook(
        key=key,
        name=str(raw.get("name", "")),
        url=client.get("url"),
        service=_service(client.get("service")),
        ca_bundle=decode_ca_bundle(client.get("caBundle")),
        rules=tuple(raw.get("rules") or ()),
        failure_policy=str(raw.get("failurePolicy") or FAIL),
        side_effects=str(raw.get("sideEffects") or ""),
        timeout_s=int(raw.get("timeoutSeconds") or DEFAULT_TIMEOUT_S),
        reinvocation_policy=str(raw.get("reinvocationPolicy") or "Never"),
        namespace_selector=dict(raw.get("namespaceSelector") or {}),
        object_selector=dict(raw.get("objectSelector") or {}),
        conditions=_conditions(raw.get("matchConditions") or []),
        review_versions=tuple(raw.get("admissionReviewVersions") or ()),
    )


def decode_ca_bundle(value: Any) -> bytes:
    """``caBundle`` is base64 in JSON; bytes already decoded are passed through."""
    if not value:
        return b""
    if isinstance(value, bytes):
        return value
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        return b""


def _service(raw: dict[str, Any] | None) -> ServiceRef | None:
    if not raw:
        return None
    return ServiceRef(
        namespace=str(raw.get("namespace", "")),
        name=str(raw.get("name", "")),
        path=str(raw.get("path") or "/"),
        port=int(raw.get("port") or DEFAULT_SERVICE_PORT),
    )


def _conditions(raw: list[dict[str, Any]]) -> tuple[Condition, ...] | None:
    try:
        return tuple(
            compile_condition(str(c.get("name", "")), str(c.get("expression", ""))) for c in raw
        )
    except CELError:
        return None
