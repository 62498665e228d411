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

#: The webhook's name (three or more DNS labels, kubernetes-facts §1.6).
WEBHOOK_NAME = f"pods.{vocab.PRODUCT_NAME}.{vocab.CRD_GROUP}"
#: Name of the configuration object and, by default, of the webhook Service.
CONFIGURATION_NAME = vocab.PRODUCT_NAME
SERVICE_NAME = f"{vocab.PRODUCT_NAME}-webhook"
PATH = "/mutate"
TIMEOUT_SECONDS = 3


def _gpu_in(containers: str) -> str:
    """CEL: some container of ``containers`` requests or limits GPUs."""
    gpu = vocab.GPU_RESOURCE
    has_gpu = (
        f"(has(c.resources) && ((has(c.resources.limits) && '{gpu}' in c.resources.limits) "
        f"|| (has(c.resources.requests) && '{gpu}' in c.resources.requests)))"
    )
    return f"(has(object.spec.{containers}) && object.spec.{containers}.exists(c, {has_gpu}))"


def match_expression() -> str:
    """CEL: the pod carries a ``gpu-class`` label or asks for GPUs."""
    labelled = (
        f"(has(object.metadata.labels) && '{vocab.GPU_CLASS_LABEL}' in object.metadata.labels)"
    )
    return " || ".join((labelled, _gpu_in("containers"), _gpu_in("initContainers")))


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
        "matchConditions": [{"name": "gpu-pods", "expression": match_expression()}],
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
