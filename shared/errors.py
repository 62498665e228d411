"""Our Kubernetes API error classes, mapped from HTTP status by the gateway.

Loops and handlers catch only these, never the client library's exceptions. Each
carries the apiserver's Status ``reason`` and ``message`` (bodies that are not a
Status are truncated), so a log line or an Event can say what the server said.
"""

from __future__ import annotations

from typing import Any

from shared import jsontext

#: How much of a non-Status error body we keep.
BODY_EXCERPT_CHARS = 300


class KubeError(Exception):
    """Any failed call to the Kubernetes API (also the transport failures: code 0)."""

    def __init__(
        self, code: int, message: str, reason: str = "", details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{code} {reason}: {message}" if reason else f"{code}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}


class BadRequest(KubeError):
    """400: the request was malformed (a bug on our side, or an emulator refusal)."""


class Unauthorized(KubeError):
    """401: no or bad credentials."""


class Forbidden(KubeError):
    """403: RBAC (or an admission webhook) refused the request."""


class NotFound(KubeError):
    """404: the object (or its namespace) does not exist."""


class Conflict(KubeError):
    """409: stale resourceVersion, AlreadyExists, or a failed precondition."""


class Gone(KubeError):
    """410: a watch or list resourceVersion is too old; relist."""


class Invalid(KubeError):
    """422: validation refused the object (or a JSON Patch ``test`` failed)."""


class TooManyRequests(KubeError):
    """429: throttled; retry later."""

    #: The answer's ``Retry-After`` in seconds, when it had a readable one (the gateway
    #: has already waited and retried it as far as ``shared.gateway`` allows).
    retry_after_s: float | None = None


class ServerError(KubeError):
    """5xx, an unreadable answer, a timeout or a connection failure (code 0)."""


_BY_CODE: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def from_status(code: int, body: bytes | str | dict[str, Any] | None) -> KubeError:
    """Build the error for an HTTP answer ``code`` with body ``body``.

    A ``kind: Status`` body gives the reason, message and details; anything else is
    kept as a truncated excerpt.
    """
    cls = _BY_CODE.get(code, ServerError if code >= 500 or code == 0 else KubeError)
    status = body if isinstance(body, dict) else _parse_status(body)
    if status is not None:
        return cls(
            code,
            str(status.get("message", "")),
            str(status.get("reason", "")),
            status.get("details") if isinstance(status.get("details"), dict) else None,
        )
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    return cls(code, text[:BODY_EXCERPT_CHARS])


def _parse_status(body: bytes | str | None) -> dict[str, Any] | None:
    if not body:
        return None
    try:
        parsed = jsontext.from_server(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(parsed, dict) and parsed.get("kind") == "Status":
        return parsed
    return None
