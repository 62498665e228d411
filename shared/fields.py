"""Strict readers of stored JSON values: one field at a time, named in every error.

The cluster objects we read back (a ``GPUReservation``'s spec and status, the usage
record in its status) are written by us, but anyone with the right RBAC can edit them.
Each reader takes the value and ``where`` (the field's path, ``spec.gpuCount``) and
returns it typed, or raises ``ValueError`` saying which field is wrong and how, so a
malformed object is skipped with a clear log line and never half-read.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

from shared.clock import parse_utc

E = TypeVar("E", bound=StrEnum)


def mapping(value: Any, where: str) -> dict[str, Any]:
    """``value`` if it is an object."""
    if not isinstance(value, dict):
        raise ValueError(f"{where}: not an object")
    return value


def entries(value: Any, where: str, limit: int | None = None) -> list[Any]:
    """``value`` if it is a list (absent: empty) of at most ``limit`` entries."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}: not a list")
    if limit is not None and len(value) > limit:
        raise ValueError(f"{where}: more than {limit} entries")
    return value


def text(value: Any, where: str, longest: int | None = None) -> str:
    """``value`` if it is a non-empty string (of at most ``longest`` characters)."""
    if not isinstance(value, str) or not value or (longest is not None and len(value) > longest):
        raise ValueError(f"{where}: expected a non-empty string, got {value!r:.40}")
    return value


def whole(value: Any, where: str, minimum: int | None = None) -> int:
    """``value`` if it is an integer (not a boolean, not a float) ≥ ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: expected an integer, got {value!r:.40}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{where}: must be >= {minimum}, got {value}")
    return value


def instant(value: Any, where: str) -> datetime:
    """``value`` if it is a UTC instant ``YYYY-MM-DDTHH:MM:SSZ``."""
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a UTC instant, got {value!r:.40}")
    try:
        return parse_utc(value)
    except ValueError as exc:
        raise ValueError(f"{where}: not a UTC instant: {value!r:.40}") from exc


def member(cls: type[E], value: Any, where: str) -> E:
    """``value`` if it is one of ``cls``'s values."""
    name = text(value, where)
    try:
        return cls(name)
    except ValueError as exc:
        choices = ", ".join(m.value for m in cls)
        raise ValueError(f"{where}: {name!r:.40} is not one of {choices}") from exc
