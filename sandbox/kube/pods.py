"""Pods: create defaults, the update rules of ``ValidatePodUpdate``, and grace (facts §2).

Create: decoding defaults, the in-tree admission plugins that run before webhooks
(ServiceAccount, DefaultTolerationSeconds), then ``status.phase=Pending``, ``qosClass``
and the ``SchedulingGated`` condition. Update: only images, a lowered
``activeDeadlineSeconds``, added tolerations and removed gates may change, plus (while
the stored pod is gated) narrowing of ``nodeSelector`` and required node affinity.
"""

from __future__ import annotations

from typing import Any

from sandbox.kube import podspec
from sandbox.kube.clone import clone
from sandbox.kube.errors import FieldError, forbidden, invalid_value, required
from sandbox.kube.strategy import StatusStrategy, WriteContext

Obj = dict[str, Any]

GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
UPDATABLE = (
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)
#: The subresource ``kubectl debug`` writes a pod's ephemeral containers through.
EPHEMERAL = "ephemeralcontainers"
#: Tolerations DefaultTolerationSeconds adds to every pod that lacks them.
DEFAULT_TOLERATION_KEYS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


class PodStrategy(StatusStrategy):
    """The pod registry strategy."""

    tracks_generation = True

    def default(self, obj: Obj) -> None:
        podspec.default_spec(obj.setdefault("spec", {}))

    def admit_in_tree(self, obj: Obj, operation: str) -> None:
        if operation != "CREATE":
            return
        spec = obj.setdefault("spec", {})
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        spec.setdefault("priority", 0)
        tolerations = spec.setdefault("tolerations", [])
        for key in DEFAULT_TOLERATION_KEYS:
            if not any(
                t.get("key") == key and t.get("effect") in ("NoExecute", "", None)
                for t in tolerations
            ):
                tolerations.append(
                    {
                        "key": key,
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    }
                )

    def reset_status_on_create(self, obj: Obj) -> None:
        status = obj.setdefault("status", {})
        status["phase"] = "Pending"
        status["qosClass"] = podspec.qos_class(obj.get("spec") or {})
        if (obj.get("spec") or {}).get("schedulingGates"):
            conditions = status.setdefault("conditions", [])
            if not any(c.get("type") == "PodScheduled" for c in conditions):
                conditions.append(
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "lastProbeTime": None,
                        "lastTransitionTime": None,
                        "reason": "SchedulingGated",
                        "message": GATED_MESSAGE,
                    }
                )

    def prepare_create(self, obj: Obj, ctx: WriteContext) -> None:
        super().prepare_create(obj, ctx)
        obj["status"]["conditions"] = [
            dict(c, lastTransitionTime=c.get("lastTransitionTime") or _now(ctx))
            for c in obj["status"].get("conditions") or []
        ]

    def prepare_update(self, new: Obj, old: Obj, ctx: WriteContext) -> Obj:
        if ctx.subresource == EPHEMERAL:
            return ephemeral_only(new, old)
        return super().prepare_update(new, old, ctx)

    def status_only(self, new: Obj, old: Obj) -> Obj:
        merged = super().status_only(new, old)
        meta = merged.setdefault("metadata", {})
        old_refs = (old.get("metadata") or {}).get("ownerReferences")
        meta.pop("ownerReferences", None)
        if old_refs is not None:
            meta["ownerReferences"] = old_refs
        return merged

    def validate_create(self, obj: Obj) -> list[FieldError]:
        return podspec.validate_spec(obj.get("spec") or {}, creating=True)

    def validate_update(self, new: Obj, old: Obj, ctx: WriteContext) -> list[FieldError]:
        if ctx.subresource == "status":
            return []
        if ctx.subresource == EPHEMERAL:
            return validate_ephemeral_update(new.get("spec") or {}, old.get("spec") or {})
        return validate_pod_update(new.get("spec") or {}, old.get("spec") or {})


def ephemeral_only(new: Obj, old: Obj) -> Obj:
    """A ``pods/ephemeralcontainers`` write: the stored pod with only the written
    ``spec.ephemeralContainers`` (``dropNonEphemeralContainerUpdates``: every other
    change — metadata, spec, status — is dropped silently)."""
    merged = clone(old)
    containers = (new.get("spec") or {}).get("ephemeralContainers")
    merged.setdefault("spec", {}).pop("ephemeralContainers", None)
    if containers:
        merged["spec"]["ephemeralContainers"] = clone(containers)
    return merged


def validate_ephemeral_update(new: Obj, old: Obj) -> list[FieldError]:
    """``ValidatePodEphemeralContainersUpdate``: the new containers valid, and every
    existing one still there, unchanged (append only)."""
    errors = podspec.validate_ephemeral(new)
    by_name = {c.get("name"): c for c in new.get("ephemeralContainers") or []}
    for existing in old.get("ephemeralContainers") or []:
        name = existing.get("name")
        if name not in by_name:
            errors.append(
                forbidden(
                    "spec.ephemeralContainers",
                    f'existing ephemeral containers "{name}" may not be removed\n',
                )
            )
        elif by_name[name] != existing:
            errors.append(
                forbidden(
                    "spec.ephemeralContainers",
                    f'existing ephemeral containers "{name}" may not be changed\n',
                )
            )
    return errors


def _now(ctx: WriteContext) -> str:
    from sandbox.kube.meta import format_time

    return format_time(ctx.now)


def validate_pod_update(new: Obj, old: Obj) -> list[FieldError]:
    """``ValidatePodUpdate``: every spec change except the allowed ones is forbidden."""
    errors = podspec.validate_spec(new, creating=False)
    munged = clone(new)
    errors += _images(munged, old)
    errors += _active_deadline(munged, old)
    errors += _tolerations(munged, old)
    errors += _gates(munged, old)
    if (old.get("terminationGracePeriodSeconds") or 0) < 0 and new.get(
        "terminationGracePeriodSeconds"
    ) == 1:
        munged["terminationGracePeriodSeconds"] = old["terminationGracePeriodSeconds"]
    if old.get("schedulingGates"):
        errors += _gated_scheduling_constraints(munged, old)
    if munged != old:
        errors.append(
            forbidden(
                "spec",
                f"pod updates may not change fields other than {UPDATABLE}\n{_diff(munged, old)}",
            )
        )
    return errors


def _images(munged: Obj, old: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    for kind in ("containers", "initContainers"):
        olds = old.get(kind) or []
        for i, container in enumerate(munged.get(kind) or []):
            if i >= len(olds):
                break
            image = container.get("image") or ""
            if not image or image != image.strip():
                errors.append(required(f"spec.{kind}[{i}].image"))
            if "image" in olds[i]:
                container["image"] = olds[i]["image"]
            else:
                container.pop("image", None)
    return errors


def _active_deadline(munged: Obj, old: Obj) -> list[FieldError]:
    new_value, old_value = munged.get("activeDeadlineSeconds"), old.get("activeDeadlineSeconds")
    errors: list[FieldError] = []
    if old_value is not None and new_value is None:
        errors.append(
            invalid_value(
                "spec.activeDeadlineSeconds",
                None,
                "must not update from a positive integer to nil value",
            )
        )
    elif old_value is not None and new_value is not None and new_value > old_value:
        errors.append(
            invalid_value(
                "spec.activeDeadlineSeconds",
                new_value,
                "must be less than or equal to previous value",
            )
        )
    munged.pop("activeDeadlineSeconds", None)
    if old_value is not None:
        munged["activeDeadlineSeconds"] = old_value
    return errors


def _clean(toleration: Obj) -> Obj:
    return {k: v for k, v in toleration.items() if v not in ("", None)}


def _tolerations(munged: Obj, old: Obj) -> list[FieldError]:
    """``validateOnlyAddedTolerations``: each old toleration must survive unchanged."""
    news = [_clean(t) for t in munged.get("tolerations") or []]
    for old_tol in old.get("tolerations") or []:
        found = any(_same_except_seconds(_clean(old_tol), n) for n in news)
        if not found:
            _restore(munged, old, "tolerations")
            return [
                forbidden(
                    "spec.tolerations",
                    "existing toleration can not be modified except its tolerationSeconds",
                )
            ]
    _restore(munged, old, "tolerations")
    return []


def _same_except_seconds(old: Obj, new: Obj) -> bool:
    clone = {k: v for k, v in old.items() if k != "tolerationSeconds"}
    if "tolerationSeconds" in new:
        clone["tolerationSeconds"] = new["tolerationSeconds"]
    return clone == new


def _gates(munged: Obj, old: Obj) -> list[FieldError]:
    """``validateOnlyDeletedSchedulingGates``: a gate name not in the old list is refused."""
    old_names = {g.get("name") for g in old.get("schedulingGates") or []}
    errors = [
        forbidden(
            f"spec.schedulingGates[{i}].name",
            f"only deletion is allowed, but found new scheduling gate '{g.get('name')}'",
        )
        for i, g in enumerate(munged.get("schedulingGates") or [])
        if g.get("name") not in old_names
    ]
    _restore(munged, old, "schedulingGates")
    return errors


def _gated_scheduling_constraints(munged: Obj, old: Obj) -> list[FieldError]:
    """While gated: nodeSelector may grow; required node affinity terms may only gain entries."""
    errors: list[FieldError] = []
    new_sel, old_sel = munged.get("nodeSelector") or {}, old.get("nodeSelector") or {}
    if any(new_sel.get(k) != v for k, v in old_sel.items()):
        errors.append(
            invalid_value(
                "spec.nodeSelector",
                new_sel,
                "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
            )
        )
    _restore(munged, old, "nodeSelector")
    errors += _node_affinity(munged, old)
    new_aff = clone(munged.get("affinity") or {})
    new_aff.pop("nodeAffinity", None)
    old_aff = old.get("affinity") or {}
    if "nodeAffinity" in old_aff:
        new_aff["nodeAffinity"] = old_aff["nodeAffinity"]
    munged.pop("affinity", None)
    if new_aff or "affinity" in old:
        munged["affinity"] = new_aff
    return errors


def _node_affinity(munged: Obj, old: Obj) -> list[FieldError]:
    path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    path += ".nodeSelectorTerms"
    old_terms = _required_terms(old)
    if not old_terms:
        return []
    new_terms = _required_terms(munged)
    if len(new_terms) != len(old_terms):
        return [
            invalid_value(
                path,
                new_terms,
                "no additions/deletions to non-empty NodeSelectorTerms list are allowed",
            )
        ]
    errors = []
    for i, (new_term, old_term) in enumerate(zip(new_terms, old_terms, strict=True)):
        for part in ("matchExpressions", "matchFields"):
            olds, news = old_term.get(part) or [], new_term.get(part) or []
            if news[: len(olds)] != olds:
                errors.append(
                    invalid_value(
                        f"{path}[{i}].{part}",
                        news,
                        "only additions are allowed (no mutations or deletions)",
                    )
                )
    return errors


def _required_terms(spec: Obj) -> list[Obj]:
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required_part = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms: list[Obj] = required_part.get("nodeSelectorTerms") or []
    return terms


def _restore(munged: Obj, old: Obj, key: str) -> None:
    munged.pop(key, None)
    if key in old:
        munged[key] = clone(old[key])


def _diff(new: Obj, old: Obj) -> str:
    lines = []
    for key in sorted(set(new) | set(old)):
        if new.get(key) != old.get(key):
            lines.append(f"  -  {key}: {old.get(key)!r}\n  +  {key}: {new.get(key)!r}")
    return "  core.PodSpec{\n" + "\n".join(lines) + "\n  }"


def delete_grace(pod: Obj, requested: int | None) -> int:
    """Seconds of grace a DELETE gets (facts §2.5): 0 when unbound or finished."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    grace = requested if requested is not None else spec.get("terminationGracePeriodSeconds", 30)
    if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        return 0
    return 1 if grace is not None and grace < 0 else int(grace or 0)


def binding_refusal(pod: Obj, target: str) -> str:
    """Why ``pods/binding`` must refuse (409), or ``""`` (facts §2.1)."""
    name = pod["metadata"]["name"]
    spec = pod.get("spec") or {}
    if pod["metadata"].get("deletionTimestamp"):
        return f"pod {name} is being deleted, cannot be assigned to a host"
    if spec.get("nodeName"):
        return f'pod {name} is already assigned to node "{spec["nodeName"]}"'
    if spec.get("schedulingGates"):
        return f"pod {name} has non-empty .spec.schedulingGates"
    if not target:
        return "target node name is required"
    return ""


def bind(pod: Obj, node: str, now: str) -> Obj:
    """The pod after a successful binding: ``spec.nodeName`` and PodScheduled=True."""
    bound = clone(pod)
    bound["spec"]["nodeName"] = node
    conditions = [
        c
        for c in bound.setdefault("status", {}).get("conditions") or []
        if c.get("type") != "PodScheduled"
    ]
    conditions.append(
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
    )
    bound["status"]["conditions"] = conditions
    return bound
