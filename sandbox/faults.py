"""Fault injection for the emulators' HTTP APIs: the reservation app's contract
endpoints (never its ``/_sandbox/`` control API) and the Kubernetes API.

A fault matches a request by method (``*`` for any), path (``fnmatch`` pattern) and,
when ``query`` is set, a query string containing that text (``watch=true`` tells a
WATCH from a LIST of the same path); it lets ``skip`` matching requests through first,
then fires ``count`` times (None = until removed). Firing means, in this order:

- ``delay_s``: wait that many wall-clock seconds (to exercise client timeouts);
- ``drop``: start a response and close the connection mid-body;
- ``malformed``: answer ``status`` (default 200) with a truncated, non-JSON body;
- ``status``: answer that status with ``body`` (JSON value, or text sent as HTML)
  and ``headers``, default body ``{"detail": "injected fault"}``;
- with only ``delay_s``, the real handler answers after the delay;
- ``answer_after_s``: the real handler runs at once (its writes land) and its answer
  is held back that many wall-clock seconds — a slow or lost answer to a request that
  succeeded (e.g. to kill the caller between a grant and its use).
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

CONTROL_PREFIX = "/_sandbox/"


@dataclass
class Fault:
    id: int
    method: str
    path: str
    status: int | None = None
    delay_s: float = 0.0
    answer_after_s: float = 0.0
    drop: bool = False
    malformed: bool = False
    count: int | None = 1
    skip: int = 0
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    query: str | None = None
    fired: int = 0

    def matches(self, method: str, path: str, query: str = "") -> bool:
        method_ok = self.method == "*" or self.method.upper() == method.upper()
        query_ok = self.query is None or self.query in query
        return method_ok and query_ok and fnmatch.fnmatchcase(path, self.path)

    @property
    def exhausted(self) -> bool:
        return self.count is not None and self.fired >= self.count

    def describe(self) -> dict[str, Any]:
        return dict(vars(self))


class FaultBook:
    """The active faults, in the order they were added."""

    def __init__(self) -> None:
        self.faults: list[Fault] = []
        self._next = 1

    def add(self, **spec: Any) -> Fault:
        fault = Fault(id=self._next, **spec)
        self._next += 1
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        self.faults.clear()

    def take(self, method: str, path: str, query: str = "") -> Fault | None:
        """The first live fault for this request, counted as fired (or skipped)."""
        for fault in self.faults:
            if fault.exhausted or not fault.matches(method, path, query):
                continue
            if fault.skip > 0:
                fault.skip -= 1
                continue
            fault.fired += 1
            return fault
        return None


async def _send_body(
    send: Send, status: int, body: bytes, content_type: str, extra: dict[str, str]
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    headers += [(k.lower().encode(), v.encode()) for k, v in extra.items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _drop(send: Send) -> None:
    """Announce a body, send part of it, and return: the server closes the connection."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"4096")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b'[{"id": 1, ', "more_body": True})


def _rendered(fault: Fault) -> tuple[bytes, str]:
    if fault.body is None:
        return json.dumps({"detail": "injected fault"}).encode(), "application/json"
    if isinstance(fault.body, str):
        return fault.body.encode(), "text/html; charset=utf-8"
    return json.dumps(fault.body).encode(), "application/json"


class FaultMiddleware:
    """ASGI middleware applying the first matching fault of ``book``."""

    def __init__(self, app: ASGIApp, book: FaultBook) -> None:
        self.app = app
        self.book = book

    async def _answer_late(self, scope: Scope, receive: Receive, send: Send, after: float) -> None:
        """Run the real handler now, hold its answer back ``after`` seconds."""
        held: list[Any] = []

        async def keep(message: Any) -> None:
            held.append(message)

        await self.app(scope, receive, keep)
        await asyncio.sleep(after)
        for message in held:
            await send(message)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.book.faults:  # none armed: nothing to match (every request pays this)
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if scope["type"] != "http" or path.startswith(CONTROL_PREFIX):
            await self.app(scope, receive, send)
            return
        query = (scope.get("query_string") or b"").decode("latin-1")
        fault = self.book.take(scope["method"], path, query)
        if fault is None:
            await self.app(scope, receive, send)
            return
        if fault.delay_s > 0:
            await asyncio.sleep(fault.delay_s)
        if fault.answer_after_s > 0:
            await self._answer_late(scope, receive, send, fault.answer_after_s)
        elif fault.drop:
            await _drop(send)
        elif fault.malformed:
            await _send_body(
                send, fault.status or 200, b'{"id": 1, "sta', "application/json", fault.headers
            )
        elif fault.status is not None:
            body, content_type = _rendered(fault)
            await _send_body(send, fault.status, body, content_type, fault.headers)
        else:
            await self.app(scope, receive, send)
