"""Reading what the app answered: error excerpts, the denial envelope, failures.

Pure functions over a status code and body text (no I/O, no httpx), so every rule of
§1.5 is testable on its own:

- an error excerpt is the JSON ``detail`` stringified whatever its type, else the
  raw body text, truncated to ``EXCERPT_LIMIT`` characters plus "…"; an empty body
  gives "" (never a placeholder);
- the envelope is read field by field: a field of the wrong JSON type is ignored as
  if absent; ``retryable`` defaults to True; a naive ``not_before`` is UTC;
- a failure is classified by status alone, except that a 409 (or a 400 carrying
  ``code``/``retryable``) is a denial.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from shared.appclient.outcomes import (
    Denial,
    Denied,
    Failure,
    Forbidden,
    Invalid,
    Rejected,
    Transient,
    TransientReason,
    Unauthorised,
    WithheldPod,
)

EXCERPT_LIMIT = 200
_ENVELOPE_KEYS = ("code", "retryable")


def excerpt(text: str, limit: int = EXCERPT_LIMIT) -> str:
    """``text`` stripped and cut to ``limit`` characters (plus "…" when cut)."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


def parse_json(text: str) -> tuple[bool, Any]:
    """``(True, value)`` when ``text`` is JSON, else ``(False, None)``."""
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None


def detail_of(text: str) -> str:
    """The human reason in an error body, as an excerpt (§1.5.1)."""
    is_json, body = parse_json(text)
    if is_json and isinstance(body, dict) and "detail" in body:
        detail = body["detail"]
        if detail is None:
            return ""
        return excerpt(detail if isinstance(detail, str) else json.dumps(detail))
    return excerpt(text)


def parse_instant(value: Any) -> datetime | None:
    """An ISO-8601 instant in UTC, or None when ``value`` is not one."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def read_denial(fields: dict[str, Any], detail: str) -> Denial:
    """Read the envelope fields of ``fields`` tolerantly (§1.5.2)."""
    code = fields.get("code")
    retryable = fields.get("retryable")
    return Denial(
        retryable=retryable if isinstance(retryable, bool) else True,
        code=code if isinstance(code, str) else None,
        not_before=parse_instant(fields.get("not_before")),
        detail=detail,
    )


def _body_dict(text: str) -> dict[str, Any]:
    is_json, body = parse_json(text)
    return body if is_json and isinstance(body, dict) else {}


def _carries_envelope(body: dict[str, Any]) -> bool:
    return any(key in body for key in _ENVELOPE_KEYS)


def classify_failure(status: int, text: str, unknown: str = "") -> Failure:
    """The failure a non-2xx answer means. ``unknown`` names what a 404 refers to."""
    detail = detail_of(text)
    body = _body_dict(text)
    if status == 409 or (status == 400 and _carries_envelope(body)):
        return Denied(read_denial(body, detail), status=status)
    if status == 401:
        return Unauthorised(detail)
    if status == 403:
        return Forbidden(detail)
    if status == 404:
        return Rejected(unknown=unknown, detail=detail)
    if status >= 500 or status in (408, 429):
        return Transient(TransientReason.SERVER_ERROR, detail, status)
    return Invalid(status, detail)


def malformed(detail: str, status: int | None) -> Transient:
    """A 2xx answer whose body we could not read."""
    return Transient(TransientReason.MALFORMED, excerpt(detail), status)


def read_withheld(entries: Any, offered: Iterable[str]) -> tuple[WithheldPod, ...]:
    """Parse ``withheld`` entry by entry; malformed entries and unknown uids are dropped."""
    if not isinstance(entries, list):
        return ()
    allowed = set(offered)
    result = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        uid = entry.get("pod_uid")
        if not isinstance(uid, str) or uid not in allowed:
            continue
        raw_detail = entry.get("detail")
        detail = excerpt(raw_detail) if isinstance(raw_detail, str) else ""
        result.append(WithheldPod(uid, read_denial(entry, detail)))
    return tuple(result)


def only_offered(uids: Any, offered: Iterable[str]) -> tuple[str, ...] | None:
    """The offered uids of a JSON array of strings, in its order; None if not an array."""
    if not isinstance(uids, list):
        return None
    allowed = set(offered)
    seen: list[str] = []
    for uid in uids:
        if isinstance(uid, str) and uid in allowed and uid not in seen:
            seen.append(uid)
    return tuple(seen)
