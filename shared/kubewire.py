"""The Kubernetes API's wire, as every client of ours reads and writes it (no I/O).

A call's body encoded, an answer decoded (``jsontext.from_server``: orjson, else
``json.loads``) or mapped to our errors (``shared.errors``: a 429 with its
``Retry-After``), the throttling rule, the ``Warning`` header texts, and a watch's
query, lines and events (decoded the same way). ``shared.gateway`` and the loop's client share
them, so every client answers alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared import jsontext
from shared.errors import KubeError, ServerError, TooManyRequests, from_status


@dataclass(frozen=True)
class WatchEvent:
    """One watch event: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    object: dict[str, Any]


@dataclass
class ListResult:
    """All items of a LIST and the resourceVersion to resume a watch from."""

    items: list[dict[str, Any]]
    resource_version: str


@dataclass
class Response:
    """A decoded answer, with the apiserver's ``Warning`` header texts."""

    body: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def encoded(body: Any, headers: dict[str, str]) -> bytes | None:
    """A call's body as JSON bytes (None without one), setting ``headers``' content type
    unless the caller chose one (a patch's). Compact (``shared.jsontext``: a claim's JSON
    Patch ≈ 11 → 0.7 µs against ``json.dumps``); instants and dataclasses refused as
    ``json.dumps`` refuses them; a number that is not finite sent as ``null``
    (``json.dumps`` wrote ``NaN``, which no API server accepts)."""
    if body is None:
        return None
    headers.setdefault("Content-Type", "application/json")
    return jsontext.compact(body)


#: Times one call the apiserver throttled (429 with a ``Retry-After``) is sent again.
THROTTLE_RETRIES = 3


#: The longest wait honoured from one ``Retry-After``, in seconds (a larger one is cut
#: to it, so a throttled call gives up within a bounded time and its caller decides).
THROTTLE_WAIT_CAP_S = 5.0


def retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` header's delay in seconds; None when absent or not a whole
    non-negative number of seconds (the apiserver sends only that form; an HTTP date or
    anything malformed is not honoured)."""
    text = (value or "").strip()
    return float(text) if text.isascii() and text.isdigit() else None


def throttle_wait(error: KubeError, retries: int) -> float | None:
    """Seconds to wait before sending a call again after ``error``, when ``retries``
    retries were made already; None to give up and raise it (no side effects).

    Only a 429 carrying a readable ``Retry-After`` is retried (the apiserver throttled
    the request before doing anything, so any verb may be sent again; client-go does
    the same), at most ``THROTTLE_RETRIES`` times, each wait capped at
    ``THROTTLE_WAIT_CAP_S``."""
    if not isinstance(error, TooManyRequests) or error.retry_after_s is None:
        return None
    if retries >= THROTTLE_RETRIES:
        return None
    return min(error.retry_after_s, THROTTLE_WAIT_CAP_S)


def failure(status: int, body: bytes, headers: Any) -> KubeError:
    """Our error for an HTTP answer, a 429 with its ``Retry-After``."""
    error = from_status(status, body)
    if isinstance(error, TooManyRequests):
        error.retry_after_s = retry_after_s(headers.get("Retry-After"))
    return error


def answer(
    method: str, path: str, status: int, data: bytes, headers: Any, decode: bool = True
) -> Response:
    """The decoded answer to a call, or our error for it (either client's answer:
    ``headers`` has ``get`` and ``getlist``). ``decode=False``: a success's body is not
    decoded (an empty body comes back) — for a caller that needs only that the call
    succeeded; an error is decoded as always."""
    if status >= 300:
        raise failure(status, data, headers)
    if not decode:
        return Response({}, _warnings(headers.getlist("Warning")))
    try:
        decoded = jsontext.from_server(data) if data else {}
    except ValueError as exc:
        raise ServerError(status, f"{method} {path}: answer is not JSON") from exc
    if not isinstance(decoded, dict):
        raise ServerError(status, f"{method} {path}: answer is not a JSON object")
    return Response(decoded, _warnings(headers.getlist("Warning")))


def watch_query(
    resource_version: str, label_selector: str | None, timeout_s: int
) -> dict[str, Any]:
    """The query of a watch from ``resource_version`` (bookmarks asked for)."""
    query: dict[str, Any] = {
        "watch": "true",
        "resourceVersion": resource_version,
        "allowWatchBookmarks": "true",
        "timeoutSeconds": timeout_s,
    }
    if label_selector:
        query["labelSelector"] = label_selector
    return query


def watch_lines(buffer: bytes, chunk: bytes) -> tuple[list[bytes], bytes]:
    """The complete, non-blank lines of ``buffer + chunk`` and the incomplete rest."""
    *lines, rest = (buffer + chunk).split(b"\n")
    return [line for line in lines if line.strip()], rest


def watch_event(line: bytes) -> WatchEvent:
    """One watch line decoded; an ERROR event raises its error (410: ``Gone``). A line
    that is not a JSON object, or whose ``object`` is not one, is a ``ServerError`` like
    a line that is not JSON (never a crash of the watch's reader)."""
    try:
        raw = jsontext.from_server(line)
    except ValueError as exc:
        raise ServerError(0, "watch stream carried a line that is not JSON") from exc
    if not isinstance(raw, dict):
        raise ServerError(0, "watch stream carried a line that is not a JSON object")
    kind = str(raw.get("type", ""))
    obj = raw.get("object") or {}
    if not isinstance(obj, dict):
        raise ServerError(0, "watch stream carried an event whose object is not a JSON object")
    if kind == "ERROR":
        err = from_status(int(obj.get("code", 500) or 500), obj)
        raise err
    return WatchEvent(kind, obj)


def _warnings(values: list[str]) -> list[str]:
    """The texts of ``Warning: 299 - "<text>"`` headers (RFC 9111 §5.5 quoted strings:
    ``\\"`` and ``\\\\`` unescaped); a header that is not in that form is kept whole."""
    return [_warning_text(value) for value in values]


def _warning_text(value: str) -> str:
    parts = value.split(" ", 2)
    if len(parts) < 3 or not parts[2].startswith('"'):
        return value.strip()
    text: list[str] = []
    chars = iter(parts[2][1:])
    for char in chars:
        if char == "\\":
            text.append(next(chars, ""))
        elif char == '"':
            break
        else:
            text.append(char)
    return "".join(text)
