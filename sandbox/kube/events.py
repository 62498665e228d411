"""Events: one store, two views (core/v1 and events.k8s.io/v1), and their validation.

Objects are stored in core/v1 form; the events.k8s.io view renames fields
(``regarding`` ↔ ``involvedObject``, ``note`` ↔ ``message``, ``reportingController`` ↔
``reportingComponent``, ``deprecated*`` ↔ ``source``/``firstTimestamp``/...) on the way
in and out (facts §5).
"""

from __future__ import annotations

from typing import Any

from sandbox.kube.clone import clone
from sandbox.kube.errors import (
    FieldError,
    forbidden,
    invalid_value,
    not_supported,
    required,
    too_long,
)
from sandbox.kube.meta import key_problem
from sandbox.kube.strategy import Strategy, WriteContext

Obj = dict[str, Any]

#: core/v1 field ↔ events.k8s.io/v1 field.
RENAMES = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
)
DEPRECATED = tuple(new for _, new in RENAMES if new.startswith("deprecated"))


def to_new(core: Obj) -> Obj:
    """The events.k8s.io/v1 view of a stored event."""
    out = clone(core)
    for old, new in RENAMES:
        if old in out:
            out[new] = out.pop(old)
    out["apiVersion"] = "events.k8s.io/v1"
    return out


def to_core(new: Obj) -> Obj:
    """The stored (core/v1) form of an events.k8s.io/v1 event."""
    out = clone(new)
    for old, renamed in RENAMES:
        if renamed in out:
            out[old] = out.pop(renamed)
    out["apiVersion"] = "v1"
    return out


def _strict_fields(event: Obj, message_key: str, component_key: str) -> list[FieldError]:
    """Rules for events that carry ``eventTime``."""
    errors: list[FieldError] = []
    component = event.get(component_key) or ""
    if not component:
        errors.append(required(component_key))
    elif problem := key_problem(component):
        errors.append(invalid_value(component_key, component, problem))
    instance = event.get("reportingInstance") or ""
    if not instance:
        errors.append(required("reportingInstance"))
    elif len(instance) > 128:
        errors.append(too_long("reportingInstance", "may not be more than 128 bytes"))
    for key in ("action", "reason"):
        value = event.get(key) or ""
        if not value:
            errors.append(required(key))
        elif len(value) > 128:
            errors.append(too_long(key, "may not be more than 128 bytes"))
    if len(event.get(message_key) or "") > 1024:
        errors.append(too_long(message_key, "may not be more than 1024 bytes"))
    return errors


class EventStrategy(Strategy):
    """core/v1 Events: PUT may omit the RV and may create."""

    create_on_update = True

    def validate_create(self, obj: Obj) -> list[FieldError]:
        errors: list[FieldError] = []
        namespace = obj["metadata"].get("namespace") or ""
        involved = (obj.get("involvedObject") or {}).get("namespace") or ""
        if involved and involved != namespace:
            errors.append(
                invalid_value(
                    "involvedObject.namespace", involved, "does not match event.namespace"
                )
            )
        if not involved and namespace not in ("", "default"):
            errors.append(
                invalid_value(
                    "involvedObject.namespace", involved, "does not match event.namespace"
                )
            )
        if obj.get("eventTime"):
            errors += _strict_fields(obj, "message", "reportingComponent")
        kind = obj.get("type")
        if kind and kind not in ("Normal", "Warning"):
            errors.append(not_supported("type", kind, ["Normal", "Warning"]))
        return errors


class NewEventStrategy(EventStrategy):
    """events.k8s.io/v1 Events: stricter create, only ``series`` changes on update."""

    def to_storage(self, obj: Obj) -> Obj:
        return to_core(obj)

    def from_storage(self, obj: Obj) -> Obj:
        return to_new(obj)

    def validate_create(self, obj: Obj) -> list[FieldError]:
        new = to_new(obj)
        errors: list[FieldError] = []
        if not new.get("eventTime"):
            errors.append(required("eventTime"))
        errors += [
            forbidden(key, "deprecated field must not be set") for key in DEPRECATED if new.get(key)
        ]
        if new.get("type") not in ("Normal", "Warning"):
            errors.append(not_supported("type", new.get("type"), ["Normal", "Warning"]))
        series = new.get("series")
        if series is not None:
            if (series.get("count") or 0) < 2:
                errors.append(
                    invalid_value("series.count", series.get("count"), "should be at least 2")
                )
            if not series.get("lastObservedTime"):
                errors.append(required("series.lastObservedTime"))
        return errors + _strict_fields(new, "note", "reportingController")

    def validate_update(self, new: Obj, old: Obj, ctx: WriteContext) -> list[FieldError]:
        errors = self.validate_create(new)
        strip = ("metadata", "series", "apiVersion", "kind")
        if {k: v for k, v in new.items() if k not in strip} != {
            k: v for k, v in old.items() if k not in strip
        }:
            errors.append(forbidden("", "updates may only change series"))
        return errors
