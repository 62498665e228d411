"""Discovery and OpenAPI documents, enough for real kubectl (1.28+).

Legacy discovery (``/api``, ``/api/v1``, ``/apis``, ``/apis/<g>``, ``/apis/<g>/<v>``)
is served as JSON; aggregated discovery is not advertised, so kubectl falls back to
it. ``/openapi/v3`` lists one document per group/version whose PATCH operations name
their kind and the ``fieldValidation`` parameter: that is how kubectl decides that the
server validates fields itself (``--validate=strict``), instead of downloading full
schemas. A custom resource's document also carries its CRD's schema, which is what
``kubectl explain`` reads; built-in kinds have none.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sandbox.kube import selfreviews
from sandbox.kube.clone import clone
from sandbox.kube.registry import ALL_VERBS, Registry, ResourceType

Obj = dict[str, Any]

VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-sandbox",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}
#: Subresources: (verbs, kind, group, version) of the subresource document entry.
_SUBRESOURCES: dict[str, tuple[list[str], str | None, str, str]] = {
    "status": (["get", "patch", "update"], None, "", ""),
    "binding": (["create"], "Binding", "", ""),
    "eviction": (["create"], "Eviction", "policy", "v1"),
    "ephemeralcontainers": (["get", "patch", "update"], None, "", ""),
    "scale": (["get", "patch", "update"], "Scale", "autoscaling", "v1"),
    "log": (["get"], "Pod", "", ""),
}


def api_versions(address: str) -> Obj:
    """``/api``."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def _group(name: str, versions: list[str]) -> Obj:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(registry: Registry) -> Obj:
    """``/apis``."""
    served = {**registry.groups(), **selfreviews.GROUPS}
    groups = [_group(name, versions) for name, versions in sorted(served.items())]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, name: str) -> Obj | None:
    """``/apis/<group>``."""
    versions = registry.groups().get(name) or selfreviews.GROUPS.get(name)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _entries(rtype: ResourceType) -> list[Obj]:
    main: Obj = {
        "name": rtype.plural,
        "singularName": rtype.singular,
        "namespaced": rtype.namespaced,
        "kind": rtype.kind,
        "verbs": list(ALL_VERBS),
    }
    if rtype.short_names:
        main["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        main["categories"] = list(rtype.categories)
    entries = [main]
    for sub in rtype.subresources:
        verbs, kind, group, version = _SUBRESOURCES.get(sub, (["get"], None, "", ""))
        entry: Obj = {
            "name": f"{rtype.plural}/{sub}",
            "singularName": "",
            "namespaced": rtype.namespaced,
            "kind": kind or rtype.kind,
            "verbs": verbs,
        }
        if group:
            entry.update(group=group, version=version)
        entries.append(entry)
    return entries


def resource_list(registry: Registry, group: str, version: str) -> Obj | None:
    """``/api/v1`` or ``/apis/<group>/<version>``."""
    types = [t for t in registry.all() if (t.group, t.version) == (group, version)]
    if not types:
        return selfreviews.resource_list(group, version)
    resources = [e for t in types for e in _entries(t)]
    gv = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


#: The one shared schema a custom resource's model refers to.
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_OBJECT_META_SCHEMA: Obj = {
    "type": "object",
    "description": "Metadata every persisted object has: its name, namespace, labels, "
    "annotations and the fields the API server keeps.",
    "properties": {
        "name": {"type": "string", "description": "The object's name, unique in its namespace."},
        "namespace": {"type": "string", "description": "The namespace the object lives in."},
        "labels": {**_STRING_MAP, "description": "Keys and values to select objects by."},
        "annotations": {**_STRING_MAP, "description": "Keys and values tools keep."},
    },
}


def model_name(rtype: ResourceType) -> str:
    """A custom resource's schema name: its group reversed, its version, its kind."""
    return f"{'.'.join(reversed(rtype.group.split('.')))}.{rtype.version}.{rtype.kind}"


def custom_model(rtype: ResourceType) -> Obj | None:
    """A custom resource's schema as the API server publishes it (None without one):
    the CRD version's ``openAPIV3Schema`` with ``apiVersion``, ``kind`` and
    ``metadata`` described, tagged with its group, version and kind — what ``kubectl
    explain`` looks a kind up by."""
    version = rtype.crd_version or {}
    found = (version.get("schema") or {}).get("openAPIV3Schema")
    if not isinstance(found, dict):
        return None
    model: Obj = clone(found)
    properties = model.setdefault("properties", {})
    properties["apiVersion"] = {
        "type": "string",
        "description": "The group and version of this object's schema.",
    }
    properties["kind"] = {"type": "string", "description": "The kind of this object."}
    properties["metadata"] = {
        "allOf": [{"$ref": f"#/components/schemas/{OBJECT_META}"}],
        "description": "The object's metadata: name, namespace, labels, annotations.",
    }
    gvk = {"group": rtype.group, "kind": rtype.kind, "version": rtype.version}
    model["x-kubernetes-group-version-kind"] = [gvk]
    return model


def openapi_document(registry: Registry, group: str, version: str) -> Obj | None:
    """The OpenAPI v3 document of one group/version: paths and PATCH parameters, and the
    schemas of its custom resources (``custom_model``; built-in kinds have none)."""
    types = [t for t in registry.all() if (t.group, t.version) == (group, version)]
    if not types:
        return None
    paths: Obj = {}
    schemas: Obj = {}
    for rtype in types:
        if (model := custom_model(rtype)) is not None:
            schemas[model_name(rtype)] = model
            schemas[OBJECT_META] = _OBJECT_META_SCHEMA
        gvk = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
        params = [
            {"name": n, "in": "query", "schema": {"type": "string"}}
            for n in ("dryRun", "fieldManager", "fieldValidation")
        ]
        operation = {
            "x-kubernetes-group-version-kind": gvk,
            "x-kubernetes-action": "patch",
            "parameters": params,
            "responses": {"200": {"description": "OK"}},
        }
        scope = "/namespaces/{namespace}" if rtype.namespaced else ""
        base = f"/{_gv_path(rtype.group, rtype.version)}{scope}/{rtype.plural}"
        post = dict(operation, **{"x-kubernetes-action": "post"})
        paths[base] = {"post": post}
        paths[base + "/{name}"] = {
            "patch": operation,
            "put": dict(operation, **{"x-kubernetes-action": "put"}),
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def openapi_index(registry: Registry) -> Obj:
    """``/openapi/v3``: one entry per served group/version, with a content hash."""
    paths: Obj = {}
    pairs = sorted({(t.group, t.version) for t in registry.all()})
    for group, version in pairs:
        doc = openapi_document(registry, group, version)
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
        path = _gv_path(group, version)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}
