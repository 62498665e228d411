"""API errors as the apiserver reports them: ``Status`` bodies with a code and reason.

Handlers raise ``ApiError``; the HTTP layer turns it into a JSON ``Status`` (facts
§3.2). ``FieldError`` is one validation cause; ``invalid`` builds the 422 with the
``<Kind> "<name>" is invalid: ...`` message and one cause per field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: Cause reason and the text that precedes the detail in its message.
_CAUSE_TEXT = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueRequired": "Required value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "FieldValueNotFound": "Not found",
}


class ApiError(Exception):
    """A failed request: HTTP ``code`` and the ``Status`` body to send."""

    def __init__(self, code: int, status: dict[str, Any]) -> None:
        super().__init__(status.get("message", ""))
        self.code = code
        self.status = status


def status_body(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A failure ``Status`` object."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def success_status(code: int = 200, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``Success`` Status (deleted custom objects, bindings)."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}}
    body["status"] = "Success"
    if details:
        body["details"] = details
    body["code"] = code
    return body


def error(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> ApiError:
    """An ``ApiError`` with a failure Status."""
    return ApiError(code, status_body(code, reason, message, details))


def _gr_details(name: str, group: str, plural: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name} if name else {}
    if group:
        details["group"] = group
    details["kind"] = plural
    return details


def qualified(plural: str, group: str) -> str:
    """``pods`` for core, ``<plural>.<group>`` otherwise (how messages name a resource)."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    """404 ``<resource> "<name>" not found``."""
    return error(
        404,
        "NotFound",
        f'{qualified(plural, group)} "{name}" not found',
        _gr_details(name, group, plural),
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    """409 AlreadyExists."""
    return error(
        409,
        "AlreadyExists",
        f'{qualified(plural, group)} "{name}" already exists',
        _gr_details(name, group, plural),
    )


def conflict(plural: str, group: str, name: str, why: str) -> ApiError:
    """409 ``Operation cannot be fulfilled on <resource> "<name>": <why>``."""
    return error(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
        _gr_details(name, group, plural),
    )


MODIFIED_MSG = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def stale(plural: str, group: str, name: str) -> ApiError:
    """409 for an update from a stale resourceVersion."""
    return conflict(plural, group, name, MODIFIED_MSG)


def bad_request(message: str) -> ApiError:
    """400 BadRequest."""
    return error(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    """410 Expired."""
    return error(410, "Expired", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    """405 MethodNotAllowed."""
    return error(405, "MethodNotAllowed", message)


def unsupported_media(accepted: list[str]) -> ApiError:
    """415 for a PATCH content type the resource does not accept."""
    return error(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def too_large(message: str = "Request entity too large: limit is 3145728") -> ApiError:
    """413 RequestEntityTooLarge."""
    return error(413, "RequestEntityTooLarge", message)


#: etcd's default ``--max-request-bytes``: the largest write it accepts.
ETCD_MAX_REQUEST = 1572864


def etcd_too_large() -> ApiError:
    """What the apiserver answers when etcd refuses a write over its request limit: the
    etcd error is no API status, so it becomes a 500 with no reason and etcd's message
    (``ErrorToAPIStatus``; kubectl prints ``Error from server: etcdserver: request is
    too large``)."""
    body = status_body(500, "", "etcdserver: request is too large")
    del body["reason"]  # StatusReasonUnknown is "", omitted from the JSON
    return ApiError(500, body)


@dataclass(frozen=True)
class FieldError:
    """One validation failure: ``reason`` is a ``FieldValue*`` cause reason."""

    reason: str
    field: str
    detail: str = ""
    value: Any = None
    has_value: bool = False

    def message(self) -> str:
        """The cause message: ``Forbidden: ...``, ``Invalid value: "x": ...``."""
        text = _CAUSE_TEXT[self.reason]
        if self.has_value:
            text += f": {_render(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def full(self) -> str:
        """``<field>: <message>`` as it appears in the Status message."""
        return f"{self.field}: {self.message()}" if self.field else self.message()


def _render(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, sort_keys=True)


def forbidden(field: str, detail: str) -> FieldError:
    """A FieldValueForbidden cause."""
    return FieldError("FieldValueForbidden", field, detail)


def invalid_value(field: str, value: Any, detail: str) -> FieldError:
    """A FieldValueInvalid cause (the value is quoted in the message)."""
    return FieldError("FieldValueInvalid", field, detail, value, True)


def required(field: str, detail: str = "") -> FieldError:
    """A FieldValueRequired cause."""
    return FieldError("FieldValueRequired", field, detail)


def not_supported(field: str, value: Any, supported: list[str]) -> FieldError:
    """A FieldValueNotSupported cause."""
    quoted = ", ".join(json.dumps(s) for s in supported)
    return FieldError("FieldValueNotSupported", field, f"supported values: {quoted}", value, True)


def not_found_field(field: str, value: Any) -> FieldError:
    """A FieldValueNotFound cause."""
    return FieldError("FieldValueNotFound", field, "", value, True)


def duplicate(field: str, value: Any) -> FieldError:
    """A FieldValueDuplicate cause."""
    return FieldError("FieldValueDuplicate", field, "", value, True)


def too_long(field: str, detail: str) -> FieldError:
    """A FieldValueTooLong cause."""
    return FieldError("FieldValueTooLong", field, detail)


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    """422 Invalid: ``<Kind>[.<group>] "<name>" is invalid: <err>`` (or ``[e1, e2]``)."""
    shown = f"{kind}.{group}" if group else kind
    texts = [e.full() for e in errors]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    causes = [{"reason": e.reason, "message": e.message(), "field": e.field} for e in errors]
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details.update(kind=kind, causes=causes)
    return error(422, "Invalid", f'{shown} "{name}" is invalid: {joined}', details)


def check(kind: str, group: str, name: str, errors: list[FieldError]) -> None:
    """Raise ``invalid`` if ``errors`` is not empty."""
    if errors:
        raise invalid(kind, group, name, errors)
