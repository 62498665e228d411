"""The small JSONPath subset printer columns use: ``.a.b``, ``[0]``, ``[*]``, and
``[?(@.key=="value")]`` filters; escaped dots (``\\.``) stay inside a key."""

from __future__ import annotations

import re
from typing import Any

_STEP = re.compile(
    r"""\.((?:\\\.|[^.\[])+)|\[(\d+|\*)\]|\[\?\(@\.([\w.-]+)\s*==\s*["']([^"']*)["']\)\]"""
)


def evaluate(obj: Any, path: str) -> list[Any]:
    """Every value ``path`` selects in ``obj`` (``{`` ``}`` wrappers are accepted)."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    if not text.startswith((".", "[")):
        text = "." + text
    current = [obj]
    pos = 0
    while pos < len(text):
        match = _STEP.match(text, pos)
        if match is None:
            return []
        current = _step(current, match)
        pos = match.end()
    return current


def _step(values: list[Any], match: re.Match[str]) -> list[Any]:
    key, index, filter_key, filter_value = match.groups()
    out: list[Any] = []
    for value in values:
        if key is not None and isinstance(value, dict):
            name = key.replace("\\.", ".")
            if name in value:
                out.append(value[name])
        elif index is not None and isinstance(value, list):
            out.extend(value if index == "*" else value[int(index) : int(index) + 1])
        elif filter_key is not None and isinstance(value, list):
            out.extend(
                v for v in value if isinstance(v, dict) and str(v.get(filter_key)) == filter_value
            )
    return out
