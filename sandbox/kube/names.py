"""Object names, namespace existence and the side effects of some writes.

Name syntax differs by kind (RFC 1123 label for namespaces and services, path segment
for RBAC objects, subdomain otherwise). Namespaced creates need an existing, active
namespace (404 / 403, facts §3.1). Writing a CRD (re)starts serving its resources.
"""

from __future__ import annotations

from typing import Any

from sandbox.kube.cluster import Call, Cluster
from sandbox.kube.errors import FieldError, error, invalid_value, required
from sandbox.kube.meta import is_dns_label, is_dns_subdomain
from sandbox.kube.registry import ResourceType

Obj = dict[str, Any]

_LABEL_NAMED = frozenset({("", "namespaces"), ("", "services")})
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def name_errors(rtype: ResourceType, name: str) -> list[FieldError]:
    """Why ``name`` is not a valid name for ``rtype`` objects."""
    if not name:
        return [required("metadata.name", "name or generateName is required")]
    if rtype.group == "rbac.authorization.k8s.io":
        bad = name in (".", "..") or "/" in name or "%" in name
        return [invalid_value("metadata.name", name, "may not contain '/' or '%'")] if bad else []
    if (rtype.group, rtype.plural) in _LABEL_NAMED:
        return [] if is_dns_label(name) else [invalid_value("metadata.name", name, _LABEL_MSG)]
    return [] if is_dns_subdomain(name) else [invalid_value("metadata.name", name, _SUBDOMAIN_MSG)]


def require_namespace(cluster: Cluster, call: Call) -> None:
    """404 for a create in a missing namespace, 403 in a terminating one."""
    if not call.rtype.namespaced:
        return
    namespace = cluster.store.get("", "namespaces", "", call.namespace)
    if namespace is None:
        raise error(
            404,
            "NotFound",
            f'namespaces "{call.namespace}" not found',
            {"name": call.namespace, "kind": "namespaces"},
        )
    if namespace["metadata"].get("deletionTimestamp"):
        raise error(
            403,
            "Forbidden",
            f'{call.rtype.plural} "{call.name}" is forbidden: unable to create new content in '
            f"namespace {call.namespace} because it is being terminated",
            {"name": call.name, "kind": call.rtype.plural},
        )


def after_write(cluster: Cluster, call: Call, stored: Obj) -> None:
    """Side effects of a stored write (a CRD starts serving its resources)."""
    if (call.rtype.group, call.rtype.plural) == (
        "apiextensions.k8s.io",
        "customresourcedefinitions",
    ):
        cluster.serve_crd(stored)


def finished_deleting(obj: Obj) -> bool:
    """An object being deleted whose finalizers are gone and whose grace is over."""
    meta = obj["metadata"]
    return (
        bool(meta.get("deletionTimestamp"))
        and not meta.get("finalizers")
        and not meta.get("deletionGracePeriodSeconds")
    )
