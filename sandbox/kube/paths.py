"""URL paths of the resource API: ``/api/v1/...`` and ``/apis/<g>/<v>/...``.

``parse`` resolves a path to a resource type, namespace, name and subresource (or
``None`` when nothing is served there); ``verb`` names the RBAC verb of a request.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox.kube.registry import Registry, ResourceType

_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclass(frozen=True)
class Target:
    """What a resource URL addresses."""

    rtype: ResourceType
    namespace: str = ""
    name: str = ""
    subresource: str = ""


def split_group_version(parts: list[str]) -> tuple[str, str, list[str]] | None:
    """(group, version, rest) of ``api/v1/...`` or ``apis/<g>/<v>/...`` segments."""
    if len(parts) >= 2 and parts[0] == "api":
        return "", parts[1], parts[2:]
    if len(parts) >= 3 and parts[0] == "apis":
        return parts[1], parts[2], parts[3:]
    return None


def parse(registry: Registry, path: str) -> Target | None:
    """Resolve a resource path."""
    parts = [p for p in path.split("/") if p]
    split = split_group_version(parts)
    if split is None:
        return None
    group, version, rest = split
    namespace = ""
    if (
        len(rest) >= 3
        and rest[0] == "namespaces"
        and not (len(rest) == 3 and rest[2] in _NAMESPACE_SUBRESOURCES and group == "")
    ):
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    rtype = registry.find(group, version, rest[0])
    if rtype is None or (namespace and not rtype.namespaced):
        return None
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and sub not in rtype.subresources:
        return None
    return Target(rtype, namespace, name, sub)


def verb(method: str, target: Target, watch: bool) -> str:
    """The RBAC verb of ``method`` on ``target``."""
    if method == "GET":
        if target.name:
            return "get"
        return "watch" if watch else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if target.name else "deletecollection"
    return method.lower()
