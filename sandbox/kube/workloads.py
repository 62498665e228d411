"""apps/v1 Deployments and ReplicaSets, batch/v1 Jobs: defaults, validation, the
``scale`` view (the apiserver's strategies for them; the controllers that act on them
are the ``cluster`` component's, ``sandbox.cluster.workloads``).

Deployments and ReplicaSets: ``replicas`` 1 by default; ``spec.selector`` required,
non-empty, matching the template's labels, and immutable; the template's pod spec is
defaulted and validated as a pod's, with ``restartPolicy: Always`` only. Deployments
also default ``strategy`` (RollingUpdate 25 %/25 %), ``revisionHistoryLimit`` 10 and
``progressDeadlineSeconds`` 600. Jobs: ``parallelism`` 1, ``completions`` 1 when
neither is set, ``backoffLimit`` 6, ``completionMode`` NonIndexed, ``suspend`` false;
without ``manualSelector`` the selector is generated from the Job's uid and the
template gets the ``batch.kubernetes.io/controller-uid``, ``batch.kubernetes.io/job-name``,
``controller-uid`` and ``job-name`` labels; ``restartPolicy`` must be Never or
OnFailure; selector and template are immutable. All three keep status behind
``/status`` and count ``metadata.generation``.
"""

from __future__ import annotations

from typing import Any

from sandbox.kube import podspec
from sandbox.kube.admission.selectors import SelectorError, matches
from sandbox.kube.clone import clone
from sandbox.kube.errors import FieldError, invalid_value, not_supported, required
from sandbox.kube.strategy import StatusStrategy, WriteContext

Obj = dict[str, Any]

JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_UID_LABEL = "controller-uid"
LEGACY_JOB_NAME_LABEL = "job-name"
IMMUTABLE = "field is immutable"


def _template_errors(spec: Obj, policies: tuple[str, ...]) -> list[FieldError]:
    """The pod template's spec validated as a pod's, paths under ``spec.template``."""
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    errors = []
    for error in podspec.validate_spec(pod_spec, creating=True):
        path = error.field.replace("spec.", "spec.template.spec.", 1)
        errors.append(FieldError(error.reason, path, error.detail, error.value, error.has_value))
    policy = pod_spec.get("restartPolicy")
    if policy not in policies and not any(
        e.field == "spec.template.spec.restartPolicy" for e in errors
    ):
        errors.append(not_supported("spec.template.spec.restartPolicy", policy, list(policies)))
    return errors


def selector_errors(spec: Obj) -> list[FieldError]:
    """``spec.selector`` present, non-empty, valid, and selecting the template's labels."""
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        return [required("spec.selector")]
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    try:
        selected = matches(selector, labels)
    except SelectorError as exc:
        return [invalid_value("spec.selector", selector, str(exc))]
    if not selected:
        return [
            invalid_value(
                "spec.template.metadata.labels",
                labels,
                "`selector` does not match template `labels`",
            )
        ]
    return []


def _replicas(spec: Obj, field: str = "spec.replicas") -> list[FieldError]:
    value = spec.get(field.rsplit(".", 1)[-1])
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        return [invalid_value(field, value, "must be greater than or equal to 0")]
    return []


def _immutable(new: Obj, old: Obj, key: str) -> list[FieldError]:
    if (new.get("spec") or {}).get(key) != (old.get("spec") or {}).get(key):
        return [invalid_value(f"spec.{key}", (new.get("spec") or {}).get(key), IMMUTABLE)]
    return []


def _default_template(spec: Obj) -> None:
    template = spec.setdefault("template", {})
    if isinstance(template, dict):
        template.setdefault("metadata", {})
        pod_spec = template.setdefault("spec", {})
        if isinstance(pod_spec, dict):
            podspec.default_spec(pod_spec)


class ReplicaSetStrategy(StatusStrategy):
    """apps/v1 ReplicaSets."""

    tracks_generation = True

    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        spec.setdefault("minReadySeconds", 0)
        _default_template(spec)

    def reset_status_on_create(self, obj: Obj) -> None:
        obj["status"] = {"replicas": 0}

    def validate_create(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec") or {}
        return _replicas(spec) + selector_errors(spec) + _template_errors(spec, ("Always",))

    def validate_update(self, new: Obj, old: Obj, ctx: WriteContext) -> list[FieldError]:
        if ctx.subresource == "status":
            return []
        return self.validate_create(new) + _immutable(new, old, "selector")


class DeploymentStrategy(ReplicaSetStrategy):
    """apps/v1 Deployments."""

    def default(self, obj: Obj) -> None:
        super().default(obj)
        spec = obj["spec"]
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", "25%")
            rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)

    def reset_status_on_create(self, obj: Obj) -> None:
        obj["status"] = {}

    def validate_create(self, obj: Obj) -> list[FieldError]:
        errors = super().validate_create(obj)
        kind = ((obj.get("spec") or {}).get("strategy") or {}).get("type")
        if kind not in ("RollingUpdate", "Recreate"):
            errors.append(not_supported("spec.strategy.type", kind, ["Recreate", "RollingUpdate"]))
        return errors


class JobStrategy(StatusStrategy):
    """batch/v1 Jobs."""

    tracks_generation = True

    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if spec.get("parallelism") is None and spec.get("completions") is None:
            spec["completions"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("manualSelector", None)
        if spec["manualSelector"] is None:
            del spec["manualSelector"]
        _default_template(spec)

    def reset_status_on_create(self, obj: Obj) -> None:
        obj["status"] = {}

    def prepare_create(self, obj: Obj, ctx: WriteContext) -> None:
        super().prepare_create(obj, ctx)
        spec, meta = obj.setdefault("spec", {}), obj["metadata"]
        if spec.get("manualSelector") is True:
            return
        uid, name = meta["uid"], meta.get("name") or meta.get("generateName") or ""
        template = spec.setdefault("template", {})
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels.update(
            {
                JOB_UID_LABEL: uid,
                JOB_NAME_LABEL: name,
                LEGACY_JOB_UID_LABEL: uid,
                LEGACY_JOB_NAME_LABEL: name,
            }
        )
        spec["selector"] = {"matchLabels": {JOB_UID_LABEL: uid}}

    def validate_create(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec") or {}
        errors = _replicas(spec, "spec.parallelism") + _replicas(spec, "spec.completions")
        errors += _replicas(spec, "spec.backoffLimit")
        errors += selector_errors(spec)
        return errors + _template_errors(spec, ("OnFailure", "Never"))

    def validate_update(self, new: Obj, old: Obj, ctx: WriteContext) -> list[FieldError]:
        if ctx.subresource == "status":
            return []
        errors = self.validate_create(new) + _immutable(new, old, "selector")
        return errors + _immutable(new, old, "template") + _immutable(new, old, "completions")


def scale_of(obj: Obj) -> Obj:
    """The autoscaling/v1 ``Scale`` view of a Deployment or ReplicaSet."""
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    shown = selector_text(spec.get("selector") or {})
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: clone(meta[k])
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": int(spec.get("replicas") or 0)},
        "status": {"replicas": int(status.get("replicas") or 0), "selector": shown},
    }


def selector_text(selector: Obj) -> str:
    """A label selector object as the query string form (``a=b,c in (d,e),!f``), as
    ``metav1.LabelSelectorAsSelector(...).String()`` writes it: requirements sorted by
    key."""
    parts: list[tuple[str, str]] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        parts.append((str(key), f"{key}={value}"))
    for expr in selector.get("matchExpressions") or []:
        key, operator = str(expr.get("key", "")), expr.get("operator")
        values = ",".join(sorted(str(v) for v in expr.get("values") or []))
        text = {
            "In": f"{key} in ({values})",
            "NotIn": f"{key} notin ({values})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }.get(str(operator), key)
        parts.append((key, text))
    return ",".join(text for _, text in sorted(parts))
