"""JSON in and out: one bounded-depth reader for every body we are sent, one reader for
what the API server answers, and compact JSON text for what we send and log.

``loads`` reads a request body (an AdmissionReview, a push of reservations) with
pydantic-core's parser (``jiter``), which refuses nesting deeper than ``MAX_DEPTH``
levels as it parses, without recursing in Python: a body nested 100,000 deep is a
``BadJson`` (answered 4xx), never a ``RecursionError``, and every value it gives is
shallow enough for anything after it to walk or encode recursively (Python's own
limit is 1,000 frames). It parses a review faster than ``json.loads``; a separate
depth scan to a lower bound cost more than the parse itself (docs/developer/webhook.md).

``from_server`` reads an answer or a watch line of the API server: orjson, which
decodes an 11 KB GPUReservation watch line in about half of ``json.loads``' time
(every process decodes every ledger event, so this is on every admitted pod's path).
What orjson refuses (``NaN`` and ``Infinity``, a lone surrogate escape, a number
beyond a double's range, a byte-order mark or UTF-16/32 text, nesting deeper than
1,024 levels) goes to ``json.loads``, which decodes it or raises as it always did
(but a ``RecursionError`` is a ``ValueError`` here, so that a line nested too deep is
an answer that is not JSON, not a crash of its reader): the value is ``json.loads``'
for every JSON text but one kind. An integer beyond 64
bits (above 2**64 - 1 or below -2**63) comes back as the nearest float where
``json.loads`` gives an int. No API server holds such an integer: Kubernetes decodes
a JSON number to an int64 when it fits and to a float64 otherwise, typed fields are
int32/int64, a CRD's ``type: integer`` refuses it, and Go writes a float64 below
1e21 without an exponent; so such a literal is the text of a float64, and the float
is the very value the server holds. Detecting those literals to hand them to
``json.loads`` would cost a scan of every line (≈ 8 µs for 9 KB, a quarter of the
decode).

The writer:

orjson encodes a claim's JSON Patch or a log line about ten times faster than ``json``
(docs/developer/performance.md). Both encoders here give the same text for the same value:
compact separators, UTF-8 unescaped, keys that are not strings written as strings,
instants and dataclasses left to ``default`` (refused without one, as ``json`` refuses
them), and a number that is not finite written as ``null`` (orjson's rule; ``json``
would write ``NaN``, which no JSON reader of ours or the API server's accepts). What
orjson refuses (an integer beyond 64 bits, a string that is not valid Unicode) goes to
``json``, which encodes it or raises as it always did.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import orjson
import pydantic_core

#: Deepest nesting ``loads`` reads (the parser's own bound: ``jiter``'s recursion limit).
MAX_DEPTH = 200


class BadJson(ValueError):
    """A body that is not JSON, or nests deeper than ``MAX_DEPTH``."""

    def __init__(self, message: str, *, too_deep: bool = False) -> None:
        super().__init__(message)
        #: The body nests too deep (otherwise it is not JSON at all).
        self.too_deep = too_deep


def loads(body: bytes | str) -> Any:
    """The JSON value of ``body``; raises ``BadJson`` (not JSON, not UTF-8, or nested
    deeper than ``MAX_DEPTH``). Like ``json.loads`` it accepts ``NaN`` and ``Infinity``
    and keeps the last of repeated keys."""
    try:
        return pydantic_core.from_json(body, cache_strings="keys")
    except ValueError as exc:
        if "recursion limit" in str(exc):
            raise BadJson(f"nested deeper than {MAX_DEPTH} levels", too_deep=True) from None
        raise BadJson("not JSON") from None


def from_server(data: bytes | str) -> Any:
    """The JSON value of an API server's answer or watch line (module docstring):
    orjson's, else ``json.loads``' (which raises ``ValueError`` for what is not JSON,
    ``UnicodeDecodeError`` for bytes that are not Unicode, and here ``ValueError`` too
    for nesting deeper than Python's stack, where it raised ``RecursionError``). An
    integer beyond 64 bits in a text orjson reads comes back as the nearest float."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data)
    except RecursionError:  # deeper than Python's stack: as not JSON, never a crash
        raise ValueError("nested too deep to decode") from None


_OPTIONS = (
    orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)
_SEPARATORS = (",", ":")


def compact(value: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """``value`` as compact JSON bytes (``default`` renders what JSON has no form for)."""
    try:
        return orjson.dumps(value, default=default, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: to json's rules
        text = json.dumps(
            finite(value), default=default, ensure_ascii=False, separators=_SEPARATORS
        )
        return text.encode()


def finite(value: Any) -> Any:
    """``value`` with every number that is not finite as None, in the containers JSON
    has."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
