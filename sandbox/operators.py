"""Kinds the chart renders that a bare cluster does not serve, served as a cluster would.

- prometheus-operator's ``ServiceMonitor`` and ``PrometheusRule``
  (``monitoring.coreos.com/v1``) and cert-manager's ``Certificate`` and ``Issuer``
  (``cert-manager.io/v1``): on a cluster their operators install these CRDs; the
  sandbox installs minimal ones of its own (same group, version, names and scope, a
  schema that keeps every field) before the release, so the chart's objects are stored
  and ``kubectl get servicemonitors`` shows them. Nothing acts on them: no Prometheus
  scrapes and no cert-manager issues (cert-manager mode is not run by the sandbox:
  docs/developer/sandbox.md says why).
- ``PodDisruptionBudget`` (``policy/v1``) and ``NetworkPolicy``
  (``networking.k8s.io/v1``) are built into every API server; the emulator's built-in
  list does not have them yet, so ``serve_builtins`` adds them to its registry (stored
  and listed, not enforced: the emulator has no evictions by budget and no network).
"""

from __future__ import annotations

from typing import Any

from sandbox.kube.registry import ResourceType
from sandbox.kube.server import KubeServer

Obj = dict[str, Any]

#: (group, version, kind, plural, short names) of each operator CRD.
OPERATOR_KINDS: tuple[tuple[str, str, str, str, tuple[str, ...]], ...] = (
    ("monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors", ("smon",)),
    ("monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrules", ("promrule",)),
    ("cert-manager.io", "v1", "Certificate", "certificates", ("cert", "certs")),
    ("cert-manager.io", "v1", "Issuer", "issuers", ()),
)

#: Built-in kinds of a real API server the chart renders.
BUILTIN_KINDS: tuple[ResourceType, ...] = (
    ResourceType(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        short_names=("pdb",),
        subresources=("status",),
    ),
    ResourceType(
        "networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", short_names=("netpol",)
    ),
)


def operator_crd(group: str, version: str, kind: str, plural: str, short: tuple[str, ...]) -> Obj:
    """A minimal CRD for one operator kind: namespaced, every field kept."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "listKind": f"{kind}List",
                "shortNames": list(short),
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def operator_crds() -> list[Obj]:
    """Every operator CRD the sandbox installs before a release."""
    return [operator_crd(*kind) for kind in OPERATOR_KINDS]


def serve_builtins(server: KubeServer) -> None:
    """Serve ``BUILTIN_KINDS`` in ``server`` (idempotent)."""
    for rtype in BUILTIN_KINDS:
        if server.cluster.registry.find(rtype.group, rtype.version, rtype.plural) is None:
            server.cluster.registry.add(rtype)
