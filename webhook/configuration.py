"""The one definition of the webhook's ``MutatingWebhookConfiguration``.

The chart renders the same values and the sandbox registers the chart's rendering;
``tests/chart/test_sandbox_chart.py`` checks that the two agree (``python -m
webhook.configuration`` prints this one as YAML). Settings and why (DESIGN §4):

- ``failurePolicy: Ignore`` — an outage never blocks pod creation; the reconciler
  admits what the webhook missed.
- ``sideEffects: NoneOnDryRun`` — a dry-run claims nothing (the ledger write is our
  only side effect).
- ``timeoutSeconds: 3`` — the ledger deadline (2 s by default) fits inside it.
- ``reinvocationPolicy: IfNeeded`` — a later webhook's change is looked at again;
  our answer to an already admitted pod is an empty patch.
- ``matchConditions`` — every pod that could reach a reserved node or spend a booking
  is sent (``match_expression``): a ``gpu-class`` label, a request or limit of a GPU
  resource (listed in ``GPU_RESOURCE_WEIGHTS`` or under a ``GPU_RESOURCE_PREFIXES``
  domain), a toleration of the reservation taint's key (or an ``Exists`` toleration
  with no key), a ``spec.nodeName``, or any ``galends/`` annotation; on UPDATE the old
  pod counts too, so removing such a trait is seen.
- ``namespaceSelector`` — never ``kube-system`` nor the controller's own namespace.
"""

from __future__ import annotations

import base64
import sys
from typing import Any

import yaml

from shared import vocab
from shared.policy.gpus import DEFAULT_GPU_RESOURCES, GpuResources

#: The webhook's name (three or more DNS labels, kubernetes-facts §1.6); the chart's
#: ``gpu-reservation.webhook.hookName``.
WEBHOOK_NAME = f"{vocab.PRODUCT_NAME}.{vocab.CRD_GROUP}"
#: The name of its one match condition (the chart's).
MATCH_CONDITION_NAME = "gpu-pod"
#: Name of the configuration object and, by default, of the webhook Service.
CONFIGURATION_NAME = vocab.PRODUCT_NAME
SERVICE_NAME = f"{vocab.PRODUCT_NAME}-webhook"
PATH = "/mutate"
TIMEOUT_SECONDS = 3


def _is_gpu(var: str, resources: GpuResources) -> str:
    """CEL: resource name ``var`` is a GPU resource, listed or under a GPU prefix."""
    names = ", ".join(f"'{name}'" for name in resources.names)
    tests = [f"{var} in [{names}]", *(f"{var}.startsWith('{p}')" for p in resources.prefixes)]
    return " || ".join(tests)


def _asks(resources: GpuResources) -> str:
    """CEL: container ``c`` requests or limits a GPU resource."""
    gpu = _is_gpu("r", resources)
    return (
        f"has(c.resources) && ((has(c.resources.requests) && c.resources.requests.exists(r, {gpu}))"
        f" || (has(c.resources.limits) && c.resources.limits.exists(r, {gpu})))"
    )


def _traits(obj: str, resources: GpuResources) -> str:
    """CEL: pod ``obj`` has a trait that brings it to the webhook (module docstring;
    ``containers`` is required by the Pod schema, the rest is not)."""
    asks = _asks(resources)
    taint = vocab.RESERVATION_TAINT_KEY
    traits = (
        f"(has({obj}.metadata.labels) && '{vocab.GPU_CLASS_LABEL}' in {obj}.metadata.labels)",
        f"(has({obj}.metadata.annotations) && {obj}.metadata.annotations.exists(k,"
        f" k.startsWith('{vocab.ANNOTATION_PREFIX}')))",
        f"(has({obj}.spec.nodeName) && {obj}.spec.nodeName != '')",
        f"(has({obj}.spec.tolerations) && {obj}.spec.tolerations.exists(t,"
        f" (has(t.key) && t.key == '{taint}')"
        " || ((!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists')))",
        f"{obj}.spec.containers.exists(c, {asks})",
        f"(has({obj}.spec.initContainers) && {obj}.spec.initContainers.exists(c, {asks}))",
    )
    return "(" + " || ".join(traits) + ")"


def match_expression(resources: GpuResources = DEFAULT_GPU_RESOURCES) -> str:
    """CEL: the new pod has a trait, or (UPDATE) the old one had (the chart's text)."""
    new, old = _traits("object", resources), _traits("oldObject", resources)
    return f"{new} || (request.operation == 'UPDATE' && {old})"


def webhook(
    service: str, namespace: str, ca_bundle: bytes | None, port: int = 443
) -> dict[str, Any]:
    """The one MutatingWebhook entry."""
    client: dict[str, Any] = {
        "service": {"name": service, "namespace": namespace, "path": PATH, "port": port}
    }
    if ca_bundle:
        client["caBundle"] = base64.b64encode(ca_bundle).decode("ascii")
    return {
        "name": WEBHOOK_NAME,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client,
        "rules": [
            {
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ],
        "failurePolicy": "Ignore",
        "matchPolicy": "Equivalent",
        "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": TIMEOUT_SECONDS,
        "reinvocationPolicy": "IfNeeded",
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": vocab.NAMESPACE_NAME_LABEL,
                    "operator": "NotIn",
                    "values": sorted({"kube-system", namespace}),
                }
            ]
        },
        "matchConditions": [{"name": MATCH_CONDITION_NAME, "expression": match_expression()}],
    }


def configuration(
    namespace: str,
    ca_bundle: bytes | None = None,
    service: str = SERVICE_NAME,
    port: int = 443,
) -> dict[str, Any]:
    """The whole ``MutatingWebhookConfiguration`` object."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [webhook(service, namespace, ca_bundle, port)],
    }


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else vocab.PRODUCT_NAME
    yaml.safe_dump(configuration(target), sys.stdout, sort_keys=False)
