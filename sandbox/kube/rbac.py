"""RBAC authorization over Roles, ClusterRoles and their bindings in the store.

A request is allowed when a rule bound to the user (directly, through a group, or as a
service account) covers its verb, API group, resource (``pods/status`` for a
subresource) and, when the rule lists ``resourceNames``, its object name. Members of
``system:masters`` are never restricted. A refusal is the real 403 Status:
``<resource> "<name>" is forbidden: User "<u>" cannot <verb> resource "<r>" in API
group "<g>" in the namespace "<ns>"`` (or ``at the cluster scope``).

Decisions are remembered per (user, groups, verb, resource, namespace, name) while no
Role, ClusterRole or binding has been written since (the store's ``written`` stamps):
any RBAC write is seen by the very next request, as the apiserver's authorizer reads
its informers' current state (it keeps no decisions of its own; only the webhook
authorizer caches them, for a TTL).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.kube.admission_api import UserInfo
from sandbox.kube.auth import MASTERS, SA_PREFIX
from sandbox.kube.errors import ApiError, error
from sandbox.kube.store import Store

Obj = dict[str, Any]
RBAC_GROUP = "rbac.authorization.k8s.io"
_RBAC_PLURALS = ("clusterroles", "clusterrolebindings", "roles", "rolebindings")
#: Decisions remembered at most (all forgotten when full, and on any RBAC write).
DECISIONS_KEPT = 4096


@dataclass(frozen=True)
class Request:
    """What is being asked: ``name`` is empty for collections and creates."""

    user: UserInfo
    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""


def _subject_matches(subject: Obj, user: UserInfo, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user.username
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.username == f"{SA_PREFIX}{namespace}:{name}"
    return False


def _has(values: list[str], wanted: str) -> bool:
    return "*" in values or wanted in values


def rule_allows(rule: Obj, req: Request) -> bool:
    """Whether one PolicyRule covers ``req``."""
    if not _has(rule.get("verbs") or [], req.verb) or not _has(
        rule.get("apiGroups") or [], req.group
    ):
        return False
    resources = rule.get("resources") or []
    if req.subresource:
        full = f"{req.resource}/{req.subresource}"
        ok = any(r in ("*", full, f"{req.resource}/*", f"*/{req.subresource}") for r in resources)
    else:
        ok = "*" in resources or req.resource in resources
    names = rule.get("resourceNames") or []
    return ok and (not names or req.name in names)


class Authorizer:
    """Decides requests from the RBAC objects in ``store`` (read in place, never
    copied: every request is authorized, and nothing here writes them)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._stamp: tuple[int, ...] = ()
        self._decisions: dict[tuple[object, ...], bool] = {}

    def allowed(self, req: Request) -> bool:
        """Whether some binding grants ``req`` (remembered until an RBAC object is
        written: the decision reads nothing else)."""
        if MASTERS in req.user.groups:
            return True
        stamp = tuple(self._store.written(RBAC_GROUP, plural) for plural in _RBAC_PLURALS)
        if stamp != self._stamp or len(self._decisions) >= DECISIONS_KEPT:
            self._stamp = stamp
            self._decisions = {}
        user = req.user
        key: tuple[object, ...] = (user.username, user.groups, req.verb, req.group)
        key += (req.resource, req.subresource, req.namespace, req.name)
        decided = self._decisions.get(key)
        if decided is None:
            decided = self._decisions[key] = self._decide(req)
        return decided

    def _decide(self, req: Request) -> bool:
        for binding in self._store.peek_list(RBAC_GROUP, "clusterrolebindings"):
            if self._binding_grants(binding, req, ""):
                return True
        if req.namespace:
            for binding in self._store.peek_list(RBAC_GROUP, "rolebindings", req.namespace):
                if self._binding_grants(binding, req, req.namespace):
                    return True
        return False

    def _binding_grants(self, binding: Obj, req: Request, namespace: str) -> bool:
        role = self._bound_role(binding, req.user, namespace)
        return role is not None and any(rule_allows(r, req) for r in role.get("rules") or [])

    def _bound_role(self, binding: Obj, user: UserInfo, namespace: str) -> Obj | None:
        """The role ``binding`` gives ``user`` (None: it names someone else, or a role
        that does not exist)."""
        subjects = binding.get("subjects") or []
        if not any(_subject_matches(s, user, namespace) for s in subjects):
            return None
        ref = binding.get("roleRef") or {}
        if ref.get("kind") == "ClusterRole":
            return self._store.peek(RBAC_GROUP, "clusterroles", "", ref.get("name", ""))
        if namespace:
            return self._store.peek(RBAC_GROUP, "roles", namespace, ref.get("name", ""))
        return None

    def rules_of(self, user: UserInfo, namespace: str) -> list[Obj]:
        """Every rule bound to ``user`` at the cluster scope and, when given, in
        ``namespace`` (what a SelfSubjectRulesReview lists)."""
        bindings = [(b, "") for b in self._store.peek_list(RBAC_GROUP, "clusterrolebindings")]
        if namespace:
            local = self._store.peek_list(RBAC_GROUP, "rolebindings", namespace)
            bindings += [(b, namespace) for b in local]
        found: list[Obj] = []
        for binding, scope in bindings:
            role = self._bound_role(binding, user, scope)
            if role is not None:
                found.extend(r for r in role.get("rules") or [] if isinstance(r, dict))
        return found

    def check(self, req: Request) -> None:
        """Raise the 403 Forbidden Status unless ``req`` is allowed."""
        if not self.allowed(req):
            raise forbidden(req)


def forbidden(req: Request) -> ApiError:
    """The apiserver's 403 for an RBAC refusal."""
    resource = f"{req.resource}/{req.subresource}" if req.subresource else req.resource
    scope = f'in the namespace "{req.namespace}"' if req.namespace else "at the cluster scope"
    why = (
        f'User "{req.user.username}" cannot {req.verb} resource "{resource}" '
        f'in API group "{req.group}" {scope}'
    )
    qualified = f"{resource}.{req.group}" if req.group else resource
    subject = f'{qualified} "{req.name}"' if req.name else qualified
    details: Obj = {"name": req.name} if req.name else {}
    if req.group:
        details["group"] = req.group
    details["kind"] = resource
    return error(403, "Forbidden", f"{subject} is forbidden: {why}", details)


def cluster_admin_role() -> Obj:
    """The ``cluster-admin`` ClusterRole every cluster has."""
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": "cluster-admin",
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        },
        "rules": [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ],
    }


_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]


def _rule(group: str, resources: list[str], verbs: list[str]) -> Obj:
    return {"apiGroups": [group], "resources": resources, "verbs": verbs}


def edit_role() -> Obj:
    """The ``edit`` ClusterRole every cluster has (the aggregated ``edit`` with the
    ``view`` rules it includes), for the resources the emulator serves: read and write
    of pods (exec, attach, port-forward, ephemeral containers, eviction), workloads,
    configmaps, secrets, services, leases; read of events, pods/log and pods/status.
    Not in it, as on a real cluster: writes of pods/status, pods/binding, nodes,
    namespaces, RBAC, and any custom resource (GPUReservations included)."""
    pod_parts = ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]
    core_write = [
        "configmaps",
        "events",
        "persistentvolumeclaims",
        "replicationcontrollers",
        "replicationcontrollers/scale",
        "secrets",
        "serviceaccounts",
        "services",
        "services/proxy",
    ]
    workloads = [
        "daemonsets",
        "deployments",
        "deployments/rollback",
        "deployments/scale",
        "replicasets",
        "replicasets/scale",
        "statefulsets",
        "statefulsets/scale",
    ]
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": "edit",
            "labels": {
                "kubernetes.io/bootstrapping": "rbac-defaults",
                "rbac.authorization.k8s.io/aggregate-to-admin": "true",
            },
        },
        "rules": [
            _rule("", [*pod_parts, "secrets", "services/proxy"], _READ),
            _rule("", ["serviceaccounts"], ["impersonate"]),
            _rule("", ["pods", *pod_parts], _WRITE),
            _rule("", ["pods/ephemeralcontainers"], ["patch", "update"]),
            _rule("", ["pods/eviction"], ["create"]),
            _rule("", core_write, _WRITE),
            _rule("", ["serviceaccounts/token"], ["create"]),
            _rule("apps", workloads, _WRITE),
            _rule("batch", ["cronjobs", "jobs"], _WRITE),
            _rule("coordination.k8s.io", ["leases"], [*_READ, *_WRITE]),
            _rule("policy", ["poddisruptionbudgets"], _WRITE),
            _rule("networking.k8s.io", ["ingresses", "networkpolicies"], _WRITE),
            _rule(
                "",
                [
                    "configmaps",
                    "endpoints",
                    "persistentvolumeclaims",
                    "persistentvolumeclaims/status",
                    "pods",
                    "replicationcontrollers",
                    "replicationcontrollers/scale",
                    "serviceaccounts",
                    "services",
                    "services/status",
                ],
                _READ,
            ),
            _rule(
                "",
                [
                    "bindings",
                    "events",
                    "limitranges",
                    "namespaces/status",
                    "pods/log",
                    "pods/status",
                    "replicationcontrollers/status",
                    "resourcequotas",
                    "resourcequotas/status",
                ],
                _READ,
            ),
            _rule("", ["namespaces"], _READ),
            _rule(
                "apps",
                [
                    "controllerrevisions",
                    *workloads,
                    "daemonsets/status",
                    "deployments/status",
                    "replicasets/status",
                    "statefulsets/status",
                ],
                _READ,
            ),
            _rule("batch", ["cronjobs", "cronjobs/status", "jobs", "jobs/status"], _READ),
            _rule("events.k8s.io", ["events"], _READ),
            _rule("discovery.k8s.io", ["endpointslices"], _READ),
        ],
    }
