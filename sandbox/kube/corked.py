"""The emulator's HTTP protocol: uvicorn's httptools protocol with corked writes.

uvicorn writes an answer's head and its body with a write each, and every write to a
TLS transport is a TLS record and a ``send`` (on loopback the peer's receive and its
wake-up run inside that call). A corked transport gathers the writes made in one pass
of the event loop and hands them to the real transport in one write at the start of
the next, so an answer leaves as one record and one ``send``, and its reader wakes
once. The bytes, their order and the connection's end are unchanged: ``close`` sends
what is gathered first, ``abort`` drops it (an abort discards unsent data anyway).
Measured: the two writes were a third of the emulator's CPU under a create load
(docs/developer/performance.md, "Pod creation").
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CorkedTransport:
    """``transport`` with the writes of one loop pass sent together (see the module
    docstring); every other attribute is the transport's own."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def flush(self) -> None:
        """Send what was gathered (nothing to a transport that is closing)."""
        if not self._pending:
            return
        data, self._pending = b"".join(self._pending), []
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CorkedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a ``CorkedTransport``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        corked: Any = CorkedTransport(transport, self.loop)
        super().connection_made(corked)
