"""The Kubernetes resources we address, and how their URLs are built.

A ``Resource`` names a group/version/plural; the gateway turns it and a namespace,
name and subresource into a path. Kept free of the client library so every layer can
name resources.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared import vocab


@dataclass(frozen=True)
class Resource:
    """One API resource: ``group`` is ``""`` for the core group."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``v1`` for core, ``<group>/<version>`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path of the collection, or of one object and its subresource."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods", "Pod")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
EVENTS = Resource("", "v1", "events", "Event")
SECRETS = Resource("", "v1", "secrets", "Secret")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SERVICES = Resource("", "v1", "services", "Service")
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
)
CRDS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)
GPU_RESERVATIONS = Resource(vocab.CRD_GROUP, vocab.CRD_VERSION, vocab.CRD_PLURAL, vocab.CRD_KIND)
