"""JSON encoding of what the emulator answers and streams, each stored state once.

A stored object is never changed after it is stored (the store's contract: every write
builds a new object), so its JSON is fixed: ``ObjectBytes`` keeps the encoding of the
newest stored states shown, by identity, holding each object so its ``id`` cannot be
reused while kept. A write's answer, the watch event of that write (``watch_line``
wraps the same bytes) and a GET of the unchanged object after it then encode it once
(a real apiserver's watch cache likewise encodes each event once per format).

The encoding is Starlette's ``JSONResponse``'s: compact separators, UTF-8 (no ASCII
escapes), NaN refused.
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from typing import Any

Obj = dict[str, Any]

#: Stored states whose encoding is kept (the newest shown).
OBJECTS_KEPT = 256


def encode(body: Any) -> bytes:
    """``body`` as the API's JSON."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


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
