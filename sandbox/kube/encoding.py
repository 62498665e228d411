"""JSON encoding of what the emulator answers and streams, each stored state once.

A stored object is never changed after it is stored (the store's contract: every write
builds a new object), so its JSON is fixed: ``ObjectBytes`` keeps the encoding of the
newest stored states shown, by identity, holding each object so its ``id`` cannot be
reused while kept. A write's answer, the watch event of that write (``watch_line``
wraps the same bytes) and a GET of the unchanged object after it then encode it once
(a real apiserver's watch cache likewise encodes each event once per format).

The encoding is compact UTF-8 JSON (no ASCII escapes), as Starlette's ``JSONResponse``
gives, made by orjson: a 50-hold GPUReservation (8 KB) encodes in ≈ 6 µs instead of
≈ 75 µs with ``json`` — a ledger write's answer was a fifth of the emulator's own work
per write (docs/developer/performance.md). What orjson cannot encode (an integer beyond 64 bits,
a string with a lone surrogate, a key that is no JSON scalar) goes to ``json``, which
encodes it or refuses it as before. NaN and the infinities are not JSON: ``decode``
refuses them in what the emulator reads (request bodies, webhook answers), as the
apiserver's JSON decoder does — the literals ``NaN``/``Infinity`` and a number beyond
the float range such as ``1e400`` alike — so no stored object holds one (orjson would
write ``null``).

Decoding is orjson's too (a claim's 1 KB JSON Patch in a few µs instead of ≈ 15–20 with
``json``) where it gives ``json``'s result: a text with a run of 19 digits (an integer
orjson would turn into a float beyond 64 bits) and whatever orjson refuses (lone
surrogates, a BOM, UTF-16, overflowing numbers, invalid JSON) go to ``json``, which
decides as before — so what is accepted, and the value it gives, do not change, except
that a lone surrogate escape becomes U+FFFD, as in Go (``json`` would keep it, and no
answer holding it could be encoded).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import OrderedDict
from typing import Any

import orjson

Obj = dict[str, Any]

#: Stored states whose encoding is kept (the newest shown).
OBJECTS_KEPT = 256


def encode(body: Any) -> bytes:
    """``body`` as the API's JSON."""
    try:
        return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError: beyond orjson, to json's rules
        return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _not_json(constant: str) -> Any:
    raise ValueError(f"invalid character {constant[0]!r} looking for beginning of value")


#: A run of digits orjson may read differently from ``json`` (as a float, beyond 64
#: bits): looked for in bytes with every digit made ``0`` (two C passes, ≈ 1 µs a KB —
#: a regular expression took as long as ``json`` itself), in text by a pattern.
_LONG_RUN = b"0" * 19
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= b <= 0x39 else b for b in range(256))
_LONG_DIGITS_TEXT = re.compile(r"[0-9]{19}")


def decode(raw: bytes | str) -> Any:
    """JSON as the apiserver reads it: ``NaN``, ``Infinity`` and ``-Infinity`` (which
    Python's ``json`` accepts), and numbers that overflow to an infinity, are refused
    with ``ValueError``."""
    if isinstance(raw, bytes):
        plain = _LONG_RUN not in raw.translate(_DIGITS_AS_ZERO)
    else:
        plain = _LONG_DIGITS_TEXT.search(raw) is None
    if plain:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # json's verdict (it accepts more, and words its refusals)
    return replace_lone_surrogates(refuse_non_finite(json.loads(raw, parse_constant=_not_json)))


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_lone_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate (a ``\\ud800`` escape with no partner, which
    ``json`` keeps and no UTF-8 can hold) replaced by U+FFFD, as Go's JSON decoder
    replaces it: such a text is stored and answered, never a 500 after storing."""
    if type(value) is str:
        return _LONE_SURROGATE.sub("\ufffd", value) if _LONE_SURROGATE.search(value) else value
    if type(value) is dict:
        return {replace_lone_surrogates(k): replace_lone_surrogates(v) for k, v in value.items()}
    if type(value) is list:
        return [replace_lone_surrogates(v) for v in value]
    return value


def refuse_non_finite(value: Any) -> Any:
    """``value`` (decoded YAML) unchanged; ``ValueError`` when a number in it is NaN or
    infinite — YAML's ``.nan`` and ``.inf`` have no JSON form (the apiserver converts
    YAML to JSON first and refuses them there)."""
    if type(value) is float and not math.isfinite(value):
        raise ValueError(f"json: unsupported value: {value}")
    if type(value) is dict:
        for item in value.values():
            refuse_non_finite(item)
    elif type(value) is list:
        for item in value:
            refuse_non_finite(item)
    return value


@functools.cache
def _line_start(kind: str) -> bytes:
    return b'{"type":' + encode(kind) + b',"object":'


def watch_line(kind: str, encoded_object: bytes) -> bytes:
    """One line of a JSON watch stream, around an object already encoded."""
    return _line_start(kind) + encoded_object + b"}\n"


class ObjectBytes:
    """Encodings of stored objects, by identity (the newest ``kept``)."""

    def __init__(self, kept: int = OBJECTS_KEPT) -> None:
        self._kept = kept
        self._bytes: OrderedDict[int, tuple[Obj, bytes]] = OrderedDict()

    def of(self, stored: Obj) -> bytes:
        """The JSON of ``stored``, a state the store keeps (or kept): never changed."""
        found = self._bytes.get(id(stored))
        if found is not None and found[0] is stored:
            self._bytes.move_to_end(id(stored))
            return found[1]
        encoded = encode(stored)
        self._bytes[id(stored)] = (stored, encoded)
        while len(self._bytes) > self._kept:
            self._bytes.popitem(last=False)
        return encoded
