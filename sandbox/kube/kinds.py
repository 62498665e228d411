"""Strategies of the small built-in kinds: namespaces, nodes, leases, secrets.

Namespaces carry the ``kubernetes.io/metadata.name`` label and phase Active; nodes keep
status on main-resource writes and validate taints and quantities; Leases need a
resourceVersion on PUT, may be created by PUT, and check their counters (facts §6).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from sandbox.kube.errors import FieldError, invalid_value, not_supported, required
from sandbox.kube.meta import is_dns_label, key_problem, label_value_problem
from sandbox.kube.podspec import EFFECTS, _quantity
from sandbox.kube.strategy import StatusStrategy, Strategy, WriteContext
from shared import vocab

Obj = dict[str, Any]


class NamespaceStrategy(StatusStrategy):
    """Namespaces: name label, ``kubernetes`` finalizer, phase Active."""

    def default(self, obj: Obj) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if name:
            obj["metadata"].setdefault("labels", {})[vocab.NAMESPACE_NAME_LABEL] = name
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])

    def reset_status_on_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Active"}

    def validate_create(self, obj: Obj) -> list[FieldError]:
        name = obj["metadata"].get("name", "")
        if not is_dns_label(name):
            return [
                invalid_value(
                    "metadata.name",
                    name,
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                    "characters or '-', and must start and end with an alphanumeric character",
                )
            ]
        return []


class NodeStrategy(StatusStrategy):
    """Nodes: taints, unschedulable, quantity maps (facts §7)."""

    def validate_create(self, obj: Obj) -> list[FieldError]:
        errors: list[FieldError] = []
        for i, taint in enumerate((obj.get("spec") or {}).get("taints") or []):
            where = f"spec.taints[{i}]"
            key = taint.get("key") or ""
            if problem := key_problem(key):
                errors.append(invalid_value(f"{where}.key", key, problem))
            if problem := label_value_problem(taint.get("value") or ""):
                errors.append(invalid_value(f"{where}.value", taint.get("value"), problem))
            effect = taint.get("effect")
            if not effect:
                errors.append(required(f"{where}.effect"))
            elif effect not in EFFECTS:
                errors.append(not_supported(f"{where}.effect", effect, list(EFFECTS)))
        status = obj.get("status") or {}
        for part in ("capacity", "allocatable"):
            for name, value in (status.get(part) or {}).items():
                if not isinstance(value, str | int) or _quantity(value) is None:
                    errors.append(
                        invalid_value(f"status.{part}[{name}]", value, "must be a valid quantity")
                    )
        return errors

    def validate_update(self, new: Obj, old: Obj, ctx: WriteContext) -> list[FieldError]:
        return self.validate_create(new)


class LeaseStrategy(Strategy):
    """coordination.k8s.io Leases: conditional PUT that may create (facts §6.1)."""

    unconditional_update = False
    create_on_update = True

    def validate_create(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec") or {}
        errors: list[FieldError] = []
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and (not isinstance(duration, int) or duration <= 0):
            errors.append(
                invalid_value("spec.leaseDurationSeconds", duration, "must be greater than 0")
            )
        transitions = spec.get("leaseTransitions")
        if transitions is not None and (not isinstance(transitions, int) or transitions < 0):
            errors.append(
                invalid_value(
                    "spec.leaseTransitions", transitions, "must be greater than or equal to 0"
                )
            )
        return errors


class SecretStrategy(Strategy):
    """Secrets: ``stringData`` folds into base64 ``data``; data must be base64."""

    def default(self, obj: Obj) -> None:
        string_data = obj.pop("stringData", None) or {}
        if string_data:
            data = obj.setdefault("data", {})
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()
        obj.setdefault("type", "Opaque")

    def validate_create(self, obj: Obj) -> list[FieldError]:
        errors: list[FieldError] = []
        for key, value in (obj.get("data") or {}).items():
            try:
                base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError):
                errors.append(
                    invalid_value(
                        f"data[{key}]", "<secret contents redacted>", "illegal base64 data"
                    )
                )
        return errors


class ServiceStrategy(StatusStrategy):
    """Services: a ClusterIP type by default."""

    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
