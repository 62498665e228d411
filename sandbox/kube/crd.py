"""CustomResourceDefinitions and the custom resources they serve (facts §8, §3.6).

``CrdStrategy`` validates a CRD and marks it Established; ``resource_types`` turns an
established CRD into the ``ResourceType``s the registry serves; ``CustomStrategy`` is
the behaviour of one served version: pruning and defaulting by the structural schema,
validation (422 with one cause per field), the ``/status`` split and a PUT that must
carry a resourceVersion.
"""

from __future__ import annotations

from typing import Any

from sandbox.kube import schema
from sandbox.kube.clone import clone
from sandbox.kube.errors import FieldError, bad_request, invalid_value, required
from sandbox.kube.meta import is_dns_subdomain
from sandbox.kube.registry import ResourceType
from sandbox.kube.strategy import ConditionalStrategy, Strategy, WriteContext

Obj = dict[str, Any]


class CrdStrategy(ConditionalStrategy):
    """apiextensions.k8s.io/v1 CustomResourceDefinition."""

    status_subresource = True

    def reset_status_on_create(self, obj: Obj) -> None:
        names = (obj.get("spec") or {}).get("names") or {}
        accepted = dict(names)
        accepted.setdefault("singular", str(names.get("kind", "")).lower())
        accepted.setdefault("listKind", f"{names.get('kind', '')}List")
        storage = [v["name"] for v in _versions(obj) if v.get("storage")]
        conditions = [
            {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": None}
            for t, r, m in (
                ("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            )
        ]
        obj["status"] = {
            "acceptedNames": accepted,
            "conditions": conditions,
            "storedVersions": storage,
        }

    def prepare_create(self, obj: Obj, ctx: WriteContext) -> None:
        super().prepare_create(obj, ctx)
        from sandbox.kube.meta import format_time

        for condition in obj["status"]["conditions"]:
            condition["lastTransitionTime"] = format_time(ctx.now)

    def validate_create(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        errors: list[FieldError] = []
        for key in ("plural", "kind"):
            if not names.get(key):
                errors.append(required(f"spec.names.{key}"))
        plural, group = names.get("plural", ""), spec.get("group", "")
        if not group:
            errors.append(required("spec.group"))
        if obj["metadata"].get("name") != f"{plural}.{group}":
            errors.append(
                invalid_value(
                    "metadata.name",
                    obj["metadata"].get("name"),
                    'must be spec.names.plural+"."+spec.group',
                )
            )
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            errors.append(
                invalid_value(
                    "spec.scope", spec.get("scope"), "must be either Namespaced or Cluster"
                )
            )
        versions = _versions(obj)
        if sum(1 for v in versions if v.get("storage")) != 1:
            errors.append(
                invalid_value(
                    "spec.versions",
                    len(versions),
                    "must have exactly one version marked as storage version",
                )
            )
        for i, version in enumerate(versions):
            root = (version.get("schema") or {}).get("openAPIV3Schema")
            if root is None:
                errors.append(
                    required(f"spec.versions[{i}].schema.openAPIV3Schema", "schemas are required")
                )
                continue
            errors += [
                invalid_value(f"spec.versions[{i}].schema", "", p)
                for p in schema.structural_problems(root)
            ]
        return errors


def _versions(crd: Obj) -> list[Obj]:
    versions: list[Obj] = (crd.get("spec") or {}).get("versions") or []
    return versions


def resource_types(crd: Obj) -> list[ResourceType]:
    """The served versions of ``crd`` as resource types."""
    spec = crd["spec"]
    names = spec["names"]
    return [
        ResourceType(
            group=spec["group"],
            version=version["name"],
            plural=names["plural"],
            kind=names["kind"],
            namespaced=spec.get("scope") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            subresources=tuple(sorted((version.get("subresources") or {}).keys())),
            strategic=False,
            crd_version=clone(version),
            singular_name=names.get("singular") or names["kind"].lower(),
        )
        for version in _versions(crd)
        if version.get("served", True)
    ]


class CustomStrategy(ConditionalStrategy):
    """One served version of a custom resource."""

    def __init__(self, rtype: ResourceType) -> None:
        version = rtype.crd_version or {}
        self.schema: Obj = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        self.status_subresource = "status" in (version.get("subresources") or {})
        self.version = rtype.version

    def prune(self, obj: Obj, ctx: WriteContext) -> Obj:
        pruned, dropped = schema.prune(obj, self.schema)
        if dropped and ctx.strict:
            unknown = ", ".join(f'unknown field "{d}"' for d in dropped)
            raise bad_request(
                f'{obj.get("kind")} in version "{self.version}" cannot be handled as a '
                f"{obj.get('kind')}: strict decoding error: {unknown}"
            )
        ctx.warnings.extend(f'unknown field "{d}"' for d in dropped)
        result = schema.default(pruned, self.schema)
        return result if isinstance(result, dict) else obj

    def reset_status_on_create(self, obj: Obj) -> None:
        obj.pop("status", None)

    def status_only(self, new: Obj, old: Obj) -> Obj:
        """The stored object with ``new``'s status (``new`` is this write's own decoded
        body, so its status is taken as it is; the stored status is not copied)."""
        merged = {k: clone(v) for k, v in old.items() if k != "status"}
        merged["metadata"]["resourceVersion"] = (new.get("metadata") or {}).get("resourceVersion")
        if "status" in new:
            merged["status"] = new["status"]
        return merged

    def validate_create(self, obj: Obj) -> list[FieldError]:
        errors: list[FieldError] = []
        name = obj["metadata"].get("name", "")
        if not is_dns_subdomain(name):
            errors.append(
                invalid_value(
                    "metadata.name",
                    name,
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                    "characters, '-' or '.'",
                )
            )
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        return errors + schema.validate(
            body,
            {
                **self.schema,
                "properties": {
                    k: v
                    for k, v in (self.schema.get("properties") or {}).items()
                    if k not in ("apiVersion", "kind", "metadata")
                },
            },
        )

    def validate_update(self, new: Obj, old: Obj, ctx: WriteContext) -> list[FieldError]:
        return self.validate_create(new)


def strategy_for(rtype: ResourceType) -> Strategy:
    """The strategy of a custom resource type."""
    return CustomStrategy(rtype)
