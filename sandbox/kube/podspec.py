"""Pod spec defaults and field validation shared by create and update.

Defaults follow the v1 defaulting functions (restart policy, grace period, DNS policy,
scheduler name, container pull policy, requests copied from limits). Validation covers
what a scheduler-facing emulator needs: containers, resource quantities (extended
resources such as GPUs are whole numbers with request equal to limit, facts §2.4),
tolerations, scheduling gates, and ``nodeName`` with gates at create; and what the
process kubelet reads: each probe names one handler (a liveness or startup probe's
``successThreshold`` is 1), each ``env[].valueFrom`` one source, each ``volumeMounts``
entry a volume of the pod (``validateHandler``, ``validateEnvVarValueFrom``,
``validateVolumeMounts`` of the apiserver's validation).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from sandbox.kube.errors import (
    FieldError,
    duplicate,
    forbidden,
    invalid_value,
    not_found_field,
    not_supported,
    required,
)
from sandbox.kube.meta import is_dns_label, key_problem, label_value_problem
from shared import vocab

Obj = dict[str, Any]

EFFECTS = (vocab.TAINT_EFFECT_NO_SCHEDULE, "PreferNoSchedule", "NoExecute")
COMPUTE = ("cpu", "memory")


def default_spec(spec: Obj) -> None:
    """v1 defaulting of a pod spec (in place)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for container in spec.get(kind) or []:
            _default_container(container)


def _default_container(container: Obj) -> None:
    image = str(container.get("image") or "")
    tag = image.rsplit("/", 1)[-1]
    latest = ":" not in tag or tag.endswith(":latest")
    container.setdefault(
        "imagePullPolicy", "Always" if latest and "@" not in image else "IfNotPresent"
    )
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")


def qos_class(spec: Obj) -> str:
    """Guaranteed, Burstable or BestEffort from cpu/memory requests and limits."""
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for name in COMPUTE:
            if name in requests or name in limits:
                any_set = True
            if name not in limits or _quantity(requests.get(name, limits.get(name))) != _quantity(
                limits.get(name)
            ):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _quantity(value: Any) -> Decimal | None:
    if value is None:
        return None
    try:
        return Decimal(parse_quantity(value))  # type: ignore[no-untyped-call]
    except (ValueError, TypeError):
        return None


def validate_spec(spec: Obj, creating: bool) -> list[FieldError]:
    """Field validation of a pod spec (create and update)."""
    errors: list[FieldError] = []
    containers = spec.get("containers") or []
    if not containers:
        errors.append(required("spec.containers"))
    volumes = {str(v.get("name")) for v in spec.get("volumes") or [] if isinstance(v, dict)}
    for kind in ("containers", "initContainers"):
        errors += _containers(spec.get(kind) or [], f"spec.{kind}", creating)
        for i, container in enumerate(spec.get(kind) or []):
            errors += _runtime_fields(container, f"spec.{kind}[{i}]", volumes)
    policy = spec.get("restartPolicy")
    if policy not in ("Always", "OnFailure", "Never"):
        errors.append(not_supported("spec.restartPolicy", policy, ["Always", "OnFailure", "Never"]))
    errors += validate_tolerations(spec.get("tolerations") or [], "spec.tolerations")
    errors += _scheduling_gates(spec.get("schedulingGates") or [])
    if creating and spec.get("ephemeralContainers"):
        errors.append(forbidden("spec.ephemeralContainers", "cannot be set on create"))
    if creating and spec.get("nodeName") and spec.get("schedulingGates"):
        errors.append(
            forbidden("spec.nodeName", "cannot be set until all schedulingGates have been cleared")
        )
    return errors


def _containers(containers: list[Obj], path: str, creating: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, container in enumerate(containers):
        where = f"{path}[{i}]"
        name = container.get("name") or ""
        if not name:
            errors.append(required(f"{where}.name"))
        elif not is_dns_label(name):
            errors.append(
                invalid_value(
                    f"{where}.name",
                    name,
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                    "characters or '-'",
                )
            )
        elif name in seen:
            errors.append(duplicate(f"{where}.name", name))
        seen.add(name)
        if creating and not container.get("image"):
            errors.append(required(f"{where}.image"))
        errors += _resources(container.get("resources") or {}, f"{where}.resources")
    return errors


_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")


def _probe(probe: Any, path: str, kind: str) -> list[FieldError]:
    if not isinstance(probe, dict):
        return []
    handlers = [h for h in _HANDLERS if probe.get(h) is not None]
    errors: list[FieldError] = []
    if not handlers:
        errors.append(required(path, "must specify a handler type"))
    for extra in handlers[1:]:
        errors.append(forbidden(f"{path}.{extra}", "may not specify more than 1 handler type"))
    threshold = probe.get("successThreshold")
    if kind != "readinessProbe" and threshold not in (None, 1):
        errors.append(invalid_value(f"{path}.successThreshold", threshold, "must be 1"))
    return errors


def _value_from(var: Any, path: str) -> list[FieldError]:
    source = var.get("valueFrom") if isinstance(var, dict) else None
    if not isinstance(source, dict):
        return []
    count = sum(1 for key in _SOURCES if source.get(key) is not None)
    if count == 0:
        detail = (
            "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or "
            "`secretKeyRef`"
        )
        return [invalid_value(f"{path}.valueFrom", "", detail)]
    if count > 1:
        detail = "may not have more than one field specified at a time"
        return [invalid_value(f"{path}.valueFrom", "", detail)]
    return []


def _runtime_fields(container: Obj, where: str, volumes: set[str]) -> list[FieldError]:
    """Probes, env sources and volume mounts of one container."""
    errors: list[FieldError] = []
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        errors += _probe(container.get(kind), f"{where}.{kind}", kind)
    for i, var in enumerate(container.get("env") or []):
        errors += _value_from(var, f"{where}.env[{i}]")
    for i, mount in enumerate(container.get("volumeMounts") or []):
        name = mount.get("name") if isinstance(mount, dict) else None
        if name not in volumes:
            errors.append(not_found_field(f"{where}.volumeMounts[{i}].name", name))
    return errors


def _resources(resources: Obj, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for part, values in (("requests", requests), ("limits", limits)):
        for name, value in values.items():
            amount = _quantity(value)
            if amount is None or amount < 0:
                errors.append(
                    invalid_value(f"{path}.{part}[{name}]", value, "must be a valid quantity")
                )
            elif is_extended(name) and amount != amount.to_integral_value():
                errors.append(invalid_value(f"{path}.{part}[{name}]", value, "must be an integer"))
    for name, value in requests.items():
        if not is_extended(name):
            continue
        if name not in limits:
            errors.append(
                forbidden(f"{path}.limits", "Limit must be set for non overcommitable resources")
            )
        elif _quantity(value) != _quantity(limits[name]):
            errors.append(
                invalid_value(
                    f"{path}.requests", value, f"must be equal to {name} limit of {limits[name]}"
                )
            )
    return errors


def is_extended(name: str) -> bool:
    """An extended resource (``vendor.example/thing``), which cannot be overcommitted."""
    return (
        "/" in name
        and not name.split("/", 1)[0].endswith("kubernetes.io")
        and not name.startswith("requests.")
    )


def validate_tolerations(tolerations: list[Obj], path: str) -> list[FieldError]:
    """``ValidateTolerations``: key syntax, operator/value pairing, effect, seconds."""
    errors: list[FieldError] = []
    for i, tol in enumerate(tolerations):
        where = f"{path}[{i}]"
        key, operator, value = (
            tol.get("key") or "",
            tol.get("operator") or "Equal",
            tol.get("value") or "",
        )
        effect = tol.get("effect") or ""
        if key and (problem := key_problem(key)):
            errors.append(invalid_value(f"{where}.key", key, problem))
        if not key and operator != "Exists":
            errors.append(
                invalid_value(
                    f"{where}.operator",
                    operator,
                    'operator must be Exists when `key` is empty, which means "match all values '
                    'and all keys"',
                )
            )
        if operator == "Exists" and value:
            errors.append(
                invalid_value(
                    f"{where}.operator", tol, "value must be empty when `operator` is 'Exists'"
                )
            )
        elif operator == "Equal" and (problem := label_value_problem(value)):
            errors.append(invalid_value(f"{where}.value", value, problem))
        elif operator not in ("Equal", "Exists"):
            errors.append(not_supported(f"{where}.operator", operator, ["Equal", "Exists"]))
        if effect and effect not in EFFECTS:
            errors.append(not_supported(f"{where}.effect", effect, list(EFFECTS)))
        if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
            errors.append(
                invalid_value(
                    f"{where}.effect",
                    effect,
                    "effect must be 'NoExecute' when `tolerationSeconds` is set",
                )
            )
    return errors


def _scheduling_gates(gates: list[Obj]) -> list[FieldError]:
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, gate in enumerate(gates):
        name = gate.get("name") or ""
        if problem := key_problem(name):
            errors.append(invalid_value(f"spec.schedulingGates[{i}].name", name, problem))
        elif name in seen:
            errors.append(duplicate(f"spec.schedulingGates[{i}].name", name))
        seen.add(name)
    return errors


#: Container fields an ephemeral container may not set (``validateEphemeralContainers``).
EPHEMERAL_FORBIDDEN = (
    "ports",
    "resources",
    "resizePolicy",
    "lifecycle",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "restartPolicy",
)
_EPHEMERAL_MESSAGE = "cannot be set for an Ephemeral Container"


def validate_ephemeral(spec: Obj) -> list[FieldError]:
    """``validateEphemeralContainers``: a DNS-label name unique among all of the pod's
    containers, an image, a ``targetContainerName`` naming one of its containers, none
    of the fields that make no sense for a container added to a running pod."""
    errors: list[FieldError] = []
    others = {
        str(c.get("name"))
        for kind in ("containers", "initContainers")
        for c in spec.get(kind) or []
    }
    seen: set[str] = set()
    for i, container in enumerate(spec.get("ephemeralContainers") or []):
        where = f"spec.ephemeralContainers[{i}]"
        if not isinstance(container, dict):
            errors.append(invalid_value(where, container, "must be an object"))
            continue
        name = container.get("name") or ""
        if not name:
            errors.append(required(f"{where}.name"))
        elif not isinstance(name, str) or not is_dns_label(name):
            errors.append(
                invalid_value(
                    f"{where}.name",
                    name,
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                    "characters or '-'",
                )
            )
        elif name in seen or name in others:
            errors.append(duplicate(f"{where}.name", name))
        seen.add(str(name))
        image = container.get("image")
        if not image or not isinstance(image, str) or image != image.strip():
            errors.append(required(f"{where}.image"))
        target = container.get("targetContainerName")
        if target and target not in others:
            errors.append(not_found_field(f"{where}.targetContainerName", target))
        for key in EPHEMERAL_FORBIDDEN:
            if container.get(key):
                errors.append(forbidden(f"{where}.{key}", _EPHEMERAL_MESSAGE))
    return errors
