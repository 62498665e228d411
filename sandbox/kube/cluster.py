"""The emulated cluster's state and the pieces every request handler shares.

``Cluster`` owns the store, the registry of served types with their strategies, the
clock, the authenticator, the authorizer and the mutating admission plugins. ``Call``
is one resolved API request. ``present`` shows a stored object through the resource it
was requested from; ``admit`` runs the mutating admission chain (``admission_api``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sandbox.kube import crd, events, kinds, pods, workloads
from sandbox.kube.admission_api import (
    AdmissionAttributes,
    AdmissionError,
    MutatingAdmission,
    UserInfo,
)
from sandbox.kube.auth import TokenAuthenticator
from sandbox.kube.clone import clone
from sandbox.kube.errors import ApiError, bad_request
from sandbox.kube.rbac import Authorizer
from sandbox.kube.registry import Registry, ResourceType
from sandbox.kube.store import Store
from sandbox.kube.strategy import ConditionalStrategy, Strategy, WriteContext
from shared.clock import Clock, SystemClock

Obj = dict[str, Any]

#: Built-in strategies by (group, plural); every other built-in type is generic.
STRATEGIES: dict[tuple[str, str], Strategy] = {
    ("", "pods"): pods.PodStrategy(),
    ("", "nodes"): kinds.NodeStrategy(),
    ("", "namespaces"): kinds.NamespaceStrategy(),
    ("", "events"): events.EventStrategy(),
    ("", "secrets"): kinds.SecretStrategy(),
    ("", "services"): kinds.ServiceStrategy(),
    ("events.k8s.io", "events"): events.NewEventStrategy(),
    ("coordination.k8s.io", "leases"): kinds.LeaseStrategy(),
    ("apps", "deployments"): workloads.DeploymentStrategy(),
    ("apps", "replicasets"): workloads.ReplicaSetStrategy(),
    ("batch", "jobs"): workloads.JobStrategy(),
    ("apiextensions.k8s.io", "customresourcedefinitions"): crd.CrdStrategy(),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): ConditionalStrategy(),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): ConditionalStrategy(),
}
_GENERIC = Strategy()
#: Objects of these groups never go through admission webhooks.
NO_ADMISSION_GROUPS = frozenset({"admissionregistration.k8s.io"})


@dataclass
class Call:
    """One resolved API request."""

    rtype: ResourceType
    strategy: Strategy
    user: UserInfo
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    query: Mapping[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def dry_run(self) -> bool:
        """``dryRun=All`` was requested."""
        return self.query.get("dryRun") == "All"

    @property
    def key(self) -> tuple[str, str, str, str]:
        """The store key of the named object."""
        group, plural = self.rtype.store_key
        return (group, plural, self.namespace, self.name)


#: ``(namespace, pod, container, previous)`` → output; None: the reader does not run
#: that pod; ``LookupError(message)``: no such output (``sandbox.kube.podlog``).
LogReader = Callable[[str, str, str, bool], "bytes | None"]


class Cluster:
    """Everything the handlers operate on."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.store = Store()
        self.registry = Registry()
        self.authn = TokenAuthenticator()
        self.authz = Authorizer(self.store)
        self.mutating_admission: list[MutatingAdmission] = []
        self._custom: dict[tuple[str, str, str], Strategy] = {}
        #: Where ``pods/log`` reads a container's output (the kubelet emulation's).
        self.log_reader: LogReader | None = None

    def now(self) -> datetime:
        """The cluster's current instant."""
        return self.clock.now()

    def strategy(self, rtype: ResourceType) -> Strategy:
        """The strategy serving ``rtype``."""
        if rtype.is_custom:
            return self._custom.setdefault(
                (rtype.group, rtype.version, rtype.plural), crd.strategy_for(rtype)
            )
        return STRATEGIES.get((rtype.group, rtype.plural), _GENERIC)

    def serve_crd(self, definition: Obj) -> None:
        """Start serving the custom resources of an established CRD."""
        spec = definition["spec"]
        self.registry.remove_group_resource(spec["group"], spec["names"]["plural"])
        self._custom = {
            k: v
            for k, v in self._custom.items()
            if (k[0], k[2]) != (spec["group"], spec["names"]["plural"])
        }
        for rtype in crd.resource_types(definition):
            self.registry.add(rtype)

    def unserve_crd(self, definition: Obj) -> None:
        """Stop serving a deleted CRD's resources and drop their objects."""
        spec = definition["spec"]
        group, plural = spec["group"], spec["names"]["plural"]
        self.registry.remove_group_resource(group, plural)
        for obj in self.store.list(group, plural):
            meta = obj["metadata"]
            self.store.remove((group, plural, meta.get("namespace", ""), meta["name"]))

    def context(self, call: Call) -> WriteContext:
        """The strategy context of a write."""
        strict = call.query.get("fieldValidation") == "Strict"
        return WriteContext(self.now(), call.subresource, call.namespace, strict, call.warnings)

    async def admit(
        self, call: Call, operation: str, obj: Obj | None, old: Obj | None, options: Obj | None
    ) -> Obj | None:
        """Run every mutating admission plugin in order; returns the final object.

        Each plugin sees copies; when none changed the object, ``obj`` itself comes back
        (callers skip re-pruning what they pruned already).
        """
        if call.rtype.group in NO_ADMISSION_GROUPS:
            return obj
        for plugin in list(self.mutating_admission):
            passes_over = getattr(plugin, "passes_over", None)
            if passes_over is not None and await passes_over(
                self._attributes(call, operation, obj, None, None, objects=False)
            ):
                continue  # it would call nothing for this request: no copies made for it
            attrs = self._attributes(call, operation, obj, old, options)
            try:
                result = await plugin.admit(attrs)
            except AdmissionError as exc:
                raise ApiError(exc.code, exc.status) from exc
            call.warnings.extend(result.warnings)
            if operation == "DELETE":
                continue
            if not isinstance(result.object, dict):
                raise bad_request("admission returned no object")
            if result.object != obj:
                obj = clone(result.object)
        return obj

    def _attributes(
        self,
        call: Call,
        operation: str,
        obj: Obj | None,
        old: Obj | None,
        options: Obj | None,
        objects: bool = True,
    ) -> AdmissionAttributes:
        """The attributes a plugin sees, with copies of the objects (``objects=False``:
        without any object, for ``passes_over``)."""
        rtype = call.rtype
        kind = (obj or {}).get("kind") or rtype.kind
        name = call.name or ((obj or {}).get("metadata") or {}).get("name") or ""
        return AdmissionAttributes(
            operation=operation,
            group=rtype.group,
            version=rtype.version,
            kind=kind,
            resource=rtype.plural,
            subresource=call.subresource,
            namespace=call.namespace or None,
            name=name,
            object=clone(obj) if objects else None,
            old_object=clone(old) if objects else None,
            user=call.user,
            dry_run=call.dry_run,
            options=clone(options) if objects else None,
        )


def present(call: Call, obj: Obj) -> Obj:
    """A stored object as the requested resource shows it (kind, apiVersion, view).

    ``obj`` is never changed: when the view is ``obj`` itself and its apiVersion or kind
    differ from the resource's, a shallow copy carries the resource's (only those two
    top-level keys differ). So the store's own object may be shown without a copy; the
    result must then only be read (encoded, compared, copied).
    """
    shown = call.strategy.from_storage(obj)
    api_version, kind = call.rtype.api_version, call.rtype.kind
    if shown.get("apiVersion") == api_version and shown.get("kind") == kind:
        return shown
    if shown is obj:
        shown = dict(obj)
    shown["apiVersion"] = api_version
    shown["kind"] = kind
    return shown


def options_body(kind: str, call: Call, extra: Obj | None = None) -> Obj:
    """Create/Update/DeleteOptions as admission sees them."""
    body: Obj = {"apiVersion": "meta.k8s.io/v1", "kind": kind}
    if call.dry_run:
        body["dryRun"] = ["All"]
    if manager := call.query.get("fieldManager"):
        body["fieldManager"] = manager
    body.update(extra or {})
    return body
