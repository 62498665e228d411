"""Keep-alive connections to one origin for ``shared.http1``'s exchanges.

A ``Pool`` hands each call an idle connection still fresh (``http1.IDLE_KEEP_S``) or
opens one, at most ``size`` in use at once; a watch gets a connection of its own. A
reused connection the server closed before answering (``http1.Unanswered``) is
replaced and the request sent again, once, only for an idempotent call.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from typing import TypeVar

from shared import http1
from shared.http1 import Answer, Connection, Stream, TransportError, Unanswered

P = TypeVar("P", Connection, Stream)


class Pool:
    """Keep-alive connections to one origin, at most ``size`` at a time."""

    def __init__(
        self,
        host: str,
        port: int,
        tls: ssl.SSLContext | None,
        server_hostname: str | None = None,
        size: int = 8,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._host = host
        self._port = port
        self._tls = tls
        self._server_hostname = (server_hostname or host) if tls else None
        self._size = size
        self._monotonic = monotonic
        #: Idle connections, the most recently used last (reused first).
        self._idle: list[Connection] = []
        self._slots: asyncio.Semaphore | None = None
        self._closed = False
        #: Every connection not yet gone, idle, in use or streaming.
        self._live: set[Connection | Stream] = set()

    async def request(self, request: bytes, idempotent: bool) -> Answer:
        """Send one serialized request and return its answer.

        Raises ``TransportError`` (``Unanswered`` included) for anything below HTTP. A
        reused connection that closes before answering is replaced and the request
        sent again, once, when ``idempotent``. A call cancelled mid-exchange (a
        timeout) closes its connection: an answer may still be on its way."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._size)
        async with self._slots:
            conn = self._take()
            if conn is not None and idempotent:
                try:
                    return self._finish(conn, await self._exchange(conn, request))
                except Unanswered:
                    pass
            elif conn is not None:
                return self._finish(conn, await self._exchange(conn, request))
            conn = await self._open(Connection)
            return self._finish(conn, await self._exchange(conn, request))

    def close(self) -> None:
        """Close every idle connection; one in use closes when its call ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    async def aclose(self, timeout_s: float = http1.CLOSE_WAIT_S) -> None:
        """Close every connection, in use and streaming too, and wait until they are
        gone: a TLS connection's close is a shutdown exchange the loop must still run
        (a loop closed before it ends refuses to close, uvloop's with EBUSY). One not
        gone within ``timeout_s`` is aborted."""
        self.close()
        live = list(self._live)
        for conn in live:
            conn.close()
        pending = [conn.gone for conn in live if not conn.gone.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        for conn in live:
            if not conn.gone.done() and conn.transport is not None:
                conn.transport.abort()
        if any(not conn.gone.done() for conn in live):
            await asyncio.wait([c.gone for c in live if not c.gone.done()], timeout=1.0)

    def _take(self) -> Connection | None:
        """The most recently used idle connection still open and fresh enough."""
        now = self._monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < http1.IDLE_KEEP_S:
                return conn
            conn.close()
        return None

    async def stream(self, request: bytes) -> Stream:
        """Send ``request`` on a connection of its own (not one of the pool's ``size``:
        a watch holds it for minutes) and return the answer as it arrives."""
        stream = await self._open(Stream)
        stream.send(request)
        return stream

    async def _open(self, kind: Callable[[], P]) -> P:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(
                kind,
                self._host,
                self._port,
                ssl=self._tls,
                server_hostname=self._server_hostname,
            )
        except OSError as exc:  # refused, unreachable, TLS verification (SSLError)
            raise TransportError(f"cannot connect: {type(exc).__name__}: {exc}") from exc
        self._live.add(conn)
        conn.gone.add_done_callback(lambda _: self._live.discard(conn))
        return conn

    @staticmethod
    async def _exchange(conn: Connection, request: bytes) -> Answer:
        try:
            return await conn.exchange(request)
        except BaseException:
            conn.close()
            raise

    def _finish(self, conn: Connection, answer: Answer) -> Answer:
        if conn.keep_alive and not conn.closed and not self._closed:
            conn.idle_since = self._monotonic()
            self._idle.append(conn)
        else:
            conn.close()
        return answer
