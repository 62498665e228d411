"""Status bodies the admission chain fails a request with, worded as the apiserver words them.

The bodies are ``sandbox.kube.errors``'s; this module only words the admission-specific
failures and wraps them as ``AdmissionError``.

Sources: kubernetes/apimachinery ``pkg/api/errors/errors.go`` (``NewInternalError``,
``NewBadRequest``, ``NewForbidden``, ``NewInvalid``) and kubernetes/apiserver
``pkg/admission/plugin/webhook/errors/statuserror.go`` (``ToStatusErr``).
"""

from __future__ import annotations

from typing import Any

from sandbox.kube import errors as api
from sandbox.kube.admission.hook import AdmissionError


def refusal(error: api.ApiError) -> AdmissionError:
    """The emulator's error (``sandbox.kube.errors``) as an admission failure."""
    return AdmissionError(error.code, error.status)


def internal_error(cause: str) -> AdmissionError:
    """500 InternalError: ``Internal error occurred: <cause>``."""
    details = {"causes": [{"message": cause}]}
    message = f"Internal error occurred: {cause}"
    return refusal(api.error(500, "InternalError", message, details))


def bad_request(message: str) -> AdmissionError:
    """400 BadRequest with ``message`` as is."""
    return refusal(api.bad_request(message))


def forbidden(group: str, resource: str, name: str, cause: str) -> AdmissionError:
    """403 Forbidden: ``<resource>[.<group>] ["<name>"] is forbidden: <cause>``."""
    qualified = api.qualified(resource, group)
    subject = f'{qualified} "{name}"' if name else qualified
    details = {"name": name, "group": group, "kind": resource}
    return refusal(api.error(403, "Forbidden", f"{subject} is forbidden: {cause}", details))


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
