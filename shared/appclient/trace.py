"""``X-Client-Trace``: a correlation id per unit of work (§1.3).

A unit of work (a fetch, a queue tick, a sweep …) opens ``unit_of_work("fetch")``;
every app call inside it carries ``X-Client-Trace: fetch-<10 hex>``. Outside any
unit no header is sent. The app silently drops values not matching ``TRACE_PATTERN``,
so we never send one.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

TRACE_HEADER = "X-Client-Trace"
TRACE_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,36}$")

_current: ContextVar[str | None] = ContextVar("app_client_trace", default=None)


def mint(prefix: str) -> str:
    """``<prefix>-<10 hex>``."""
    return f"{prefix}-{secrets.token_hex(5)}"


def is_valid(trace: str) -> bool:
    return bool(TRACE_PATTERN.match(trace))


def current() -> str | None:
    """The active unit of work's trace id, if any."""
    return _current.get()


@contextmanager
def unit_of_work(prefix: str) -> Iterator[str]:
    """Run the block under a freshly minted trace id (restored afterwards)."""
    trace = mint(prefix)
    if not is_valid(trace):
        raise ValueError(f"trace prefix {prefix!r} makes an invalid trace id")
    token = _current.set(trace)
    try:
        yield trace
    finally:
        _current.reset(token)
