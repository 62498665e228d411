"""Status bodies the admission chain fails a request with, worded as the apiserver words them.

Sources: kubernetes/apimachinery ``pkg/api/errors/errors.go`` (``NewInternalError``,
``NewBadRequest``, ``NewForbidden``, ``NewInvalid``) and kubernetes/apiserver
``pkg/admission/plugin/webhook/errors/statuserror.go`` (``ToStatusErr``).
"""

from __future__ import annotations

from typing import Any

from sandbox.kube.admission.hook import AdmissionError


def _status(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
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


def internal_error(cause: str) -> AdmissionError:
    """500 InternalError: ``Internal error occurred: <cause>``."""
    details = {"causes": [{"message": cause}]}
    message = f"Internal error occurred: {cause}"
    return AdmissionError(500, _status(500, "InternalError", message, details))


def bad_request(message: str) -> AdmissionError:
    """400 BadRequest with ``message`` as is."""
    return AdmissionError(400, _status(400, "BadRequest", message))


def forbidden(group: str, resource: str, name: str, cause: str) -> AdmissionError:
    """403 Forbidden: ``<resource>[.<group>] ["<name>"] is forbidden: <cause>``."""
    qualified = f"{resource}.{group}" if group else resource
    subject = f'{qualified} "{name}"' if name else qualified
    details = {"name": name, "group": group, "kind": resource}
    return AdmissionError(
        403, _status(403, "Forbidden", f"{subject} is forbidden: {cause}", details)
    )


def invalid(group: str, kind: str, name: str, causes: list[dict[str, str]]) -> AdmissionError:
    """422 Invalid: ``<Kind>[.<group>] "<name>" is invalid: <field>: <message>[, ...]``."""
    qualified = f"{kind}.{group}" if group else kind
    texts = [f"{c['field']}: {c['message']}" for c in causes]
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    message = f'{qualified} "{name}" is invalid: {summary}'
    details = {"name": name, "group": group, "kind": kind, "causes": causes}
    return AdmissionError(422, _status(422, "Invalid", message, details))


def denied(webhook: str, status: dict[str, Any] | None) -> AdmissionError:
    """A webhook's ``allowed: false``: its code (at least 400) and a prefixed message."""
    result = dict(status or {})
    prefix = f'admission webhook "{webhook}" denied the request'
    code = result.get("code")
    code = code if isinstance(code, int) and code >= 400 else 400
    if result.get("message"):
        message = f"{prefix}: {result['message']}"
    elif result.get("reason"):
        message = f"{prefix}: {result['reason']}"
    else:
        message = f"{prefix} without explanation"
    if result.get("status") in (None, "", "Success"):
        result["status"] = "Failure"
    result.update(kind="Status", apiVersion="v1", code=code, message=message)
    result.setdefault("metadata", {})
    return AdmissionError(code, result)
