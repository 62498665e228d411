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
- ``matchConditions`` — only pods with a ``gpu-class`` label or an ``nvidia.com/gpu``
  request or limit in any container are sent.
- ``namespaceSelector`` — never ``kube-system`` nor the controller's own namespace.
"""

from __future__ import annotations

import base64
import sys
from typing import Any

import yaml

from shared import vocab

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


def _asks() -> str:
    """CEL: container ``c`` requests or limits GPUs."""
    gpu = vocab.GPU_RESOURCE
    return (
        f"has(c.resources) && ((has(c.resources.requests) && '{gpu}' in c.resources.requests)"
        f" || (has(c.resources.limits) && '{gpu}' in c.resources.limits))"
    )


def match_expression() -> str:
    """CEL: the pod carries a ``gpu-class`` label or asks for GPUs (the chart's text;
    ``containers`` is required by the Pod schema, ``initContainers`` is not)."""
    labelled = (
        f"(has(object.metadata.labels) && '{vocab.GPU_CLASS_LABEL}' in object.metadata.labels)"
    )
    containers = f"object.spec.containers.exists(c, {_asks()})"
    init = f"(has(object.spec.initContainers) && object.spec.initContainers.exists(c, {_asks()}))"
    return " || ".join((labelled, containers, init))


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
