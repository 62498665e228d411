"""Resource types the emulator serves: the built-in ones and those CRDs add.

A ``ResourceType`` names one group/version/plural and carries the facts the generic
handlers need (scope, kind, short names, which subresources exist, which field
selectors are legal, which PATCH types are accepted). ``Registry`` finds a type by URL
segments or by kind, and grows and shrinks as CRDs come and go.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Field selectors every kind accepts.
META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
POD_FIELDS = META_FIELDS | {
    "spec.nodeName",
    "spec.host",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
}
EVENT_FIELDS = META_FIELDS | {
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
}
NEW_EVENT_FIELDS = META_FIELDS | {
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
}
NODE_FIELDS = META_FIELDS | {"spec.unschedulable"}
NAMESPACE_FIELDS = META_FIELDS | {"status.phase"}
SECRET_FIELDS = META_FIELDS | {"type"}

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    """One served group/version/resource."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    #: Subresources served (``status``, ``binding``, ``eviction``, ``scale``, …).
    subresources: tuple[str, ...] = ()
    field_labels: frozenset[str] = META_FIELDS
    #: Strategic merge is accepted (built-in kinds only).
    strategic: bool = True
    #: Where objects are stored, when another resource owns them (events.k8s.io).
    storage: tuple[str, str] | None = None
    #: The CRD version entry for custom resources.
    crd_version: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    singular_name: str = ""

    @property
    def api_version(self) -> str:
        """``v1`` or ``<group>/<version>``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        """Lower-case singular name."""
        return self.singular_name or self.kind.lower()

    @property
    def list_kind(self) -> str:
        """Kind of the collection."""
        return f"{self.kind}List"

    @property
    def store_key(self) -> tuple[str, str]:
        """(group, plural) the objects are stored under."""
        return self.storage or (self.group, self.plural)

    @property
    def kind_group(self) -> str:
        """The group a 422 message qualifies the kind with (``Kind.group``; none for core).

        The group of the stored type: events.k8s.io Events are core Events inside.
        """
        return self.store_key[0]

    @property
    def is_custom(self) -> bool:
        """A custom resource, served from a CRD."""
        return self.crd_version is not None

    def patch_types(self) -> list[str]:
        """Accepted PATCH content types."""
        kinds = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
        return [*kinds[:2], STRATEGIC_PATCH, kinds[2]] if self.strategic else kinds


def _core(plural: str, kind: str, **kw: Any) -> ResourceType:
    return ResourceType("", "v1", plural, kind, **kw)


BUILTIN: tuple[ResourceType, ...] = (
    _core(
        "pods",
        "Pod",
        short_names=("po",),
        categories=("all",),
        subresources=("status", "binding", "eviction", "ephemeralcontainers", "log"),
        field_labels=POD_FIELDS,
    ),
    _core(
        "nodes",
        "Node",
        namespaced=False,
        short_names=("no",),
        subresources=("status",),
        field_labels=NODE_FIELDS,
    ),
    _core(
        "namespaces",
        "Namespace",
        namespaced=False,
        short_names=("ns",),
        subresources=("status",),
        field_labels=NAMESPACE_FIELDS,
    ),
    _core("events", "Event", short_names=("ev",), field_labels=EVENT_FIELDS),
    _core("secrets", "Secret", field_labels=SECRET_FIELDS),
    _core("configmaps", "ConfigMap", short_names=("cm",)),
    _core(
        "services", "Service", short_names=("svc",), categories=("all",), subresources=("status",)
    ),
    _core("serviceaccounts", "ServiceAccount", short_names=("sa",)),
    _core("endpoints", "Endpoints", short_names=("ep",)),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease"),
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        short_names=("deploy",),
        categories=("all",),
        subresources=("status", "scale"),
    ),
    ResourceType(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        short_names=("rs",),
        categories=("all",),
        subresources=("status", "scale"),
        field_labels=META_FIELDS | {"status.replicas"},
    ),
    ResourceType(
        "batch",
        "v1",
        "jobs",
        "Job",
        categories=("all",),
        subresources=("status",),
        field_labels=META_FIELDS | {"status.successful"},
    ),
    ResourceType(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        short_names=("ev",),
        field_labels=NEW_EVENT_FIELDS,
        storage=("", "events"),
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        namespaced=False,
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        namespaced=False,
    ),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
        short_names=("crd", "crds"),
        subresources=("status",),
    ),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    ResourceType(
        "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False
    ),
    ResourceType(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        namespaced=False,
    ),
)


class Registry:
    """Every resource type currently served."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        for rtype in BUILTIN:
            self.add(rtype)

    def add(self, rtype: ResourceType) -> None:
        """Serve ``rtype`` (replacing an earlier type with the same group/version/plural)."""
        self._types[(rtype.group, rtype.version, rtype.plural)] = rtype

    def remove_group_resource(self, group: str, plural: str) -> None:
        """Stop serving every version of ``plural.group``."""
        for key in [k for k in self._types if k[0] == group and k[2] == plural]:
            del self._types[key]

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type at ``/apis/<group>/<version>/<plural>`` (core: group ``""``)."""
        return self._types.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        """The type serving ``kind`` at ``api_version``."""
        group, _, version = api_version.rpartition("/")
        for rtype in self._types.values():
            if (rtype.group, rtype.version, rtype.kind) == (group, version, kind):
                return rtype
        return None

    def all(self) -> list[ResourceType]:
        """Every type, in a stable order."""
        return sorted(self._types.values(), key=lambda t: (t.group, t.version, t.plural))

    def groups(self) -> dict[str, list[str]]:
        """Group name → served versions (the core group excluded)."""
        found: dict[str, list[str]] = {}
        for rtype in self.all():
            if rtype.group and rtype.version not in found.setdefault(rtype.group, []):
                found[rtype.group].append(rtype.version)
        return found
