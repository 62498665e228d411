"""A minimal HTTP/1.1 client on the caller's event loop: the emulated API server's
webhook client (``transport``), as kube-apiserver keeps one of kept-alive connections.

One ``Pool`` talks to one origin (scheme, host, port) over a few keep-alive
connections (TLS when given a context). Each connection is an ``asyncio.Protocol``
whose answer is parsed by ``httptools`` (C, the parser uvicorn serves with), so a call
costs a write, the parser's callbacks and a future — no thread, no executor hop, no
``http.client`` header parsing (httpx cost the emulator more per call than the webhook
spends deciding). It knows nothing of admission: ``transport`` builds the requests and
reads the answers.

Terms: an *answer* is the status, headers and whole body of one response. A body is
delimited by ``Content-Length`` or chunked transfer coding; one delimited only by the
connection's end (HTTP/1.0 style) is refused as truncated, since the API server never
sends one. A kept-alive connection the server closed before any byte of the answer
arrived raises ``Unanswered``: the request may or may not have been processed, so the
pool sends it again (once, on a new connection) only when the caller says it is
idempotent.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import httptools

#: Most bytes one answer (headers and body) may take; more is refused as malformed.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
#: Seconds ``Pool.aclose`` waits for its connections' TLS shutdowns before aborting them.
CLOSE_WAIT_S = 2.0
#: Body chunks a stream buffers before its connection stops reading (the consumer is
#: behind; reading resumes when it has caught up to a quarter of this).
STREAM_BUFFER = 256
#: A connection idle longer than this is closed instead of reused; None: kept until the
#: server closes it, as kube-apiserver's webhook client does (client-go's TLS transport
#: sets no ``IdleConnTimeout``). A server that closes an idle connection as a request is
#: written on it fails that request with ``Unanswered``.
IDLE_KEEP_S: float | None = None


class TransportError(Exception):
    """The call failed below HTTP: connecting, TLS, a malformed or truncated answer."""


class Unanswered(TransportError):
    """The connection closed before any byte of the answer arrived."""


def serialize(method: str, target: str, host: str, headers: dict[str, str], body: bytes) -> bytes:
    """One request's bytes (``Content-Length`` added). A target or header that is not
    printable Latin-1 — a line break would split the request — is refused."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers.items():
        lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {len(body)}")
    if " " in target or not all(line.isprintable() for line in lines):
        raise TransportError("the request's target or a header has a space or a control character")
    try:
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    except UnicodeEncodeError as exc:
        raise TransportError("the request's target or a header is not Latin-1") from exc


class Headers:
    """An answer's headers, matched by name without regard to case (the interface
    ``gateway.failure`` and ``gateway.answer`` read). Kept as received and decoded only
    when asked: most answers are read for ``Warning`` alone."""

    __slots__ = ("_pairs",)

    def __init__(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self._pairs = pairs

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of ``name``, else ``default``."""
        found = self.getlist(name)
        return found[0] if found else default

    def getlist(self, name: str) -> list[str]:
        """Every value of ``name``, in order."""
        key = name.lower().encode("latin-1")
        return [v.decode("latin-1") for k, v in self._pairs if k.lower() == key]


@dataclass(frozen=True)
class Answer:
    """One whole response."""

    status: int
    headers: Headers
    body: bytes


class _Reader(asyncio.Protocol):
    """What both kinds of connection share: the transport, the ``gone`` signal, the
    response parser fed with every byte received, the headers it reports, and the two
    ways a connection ends (the server's EOF, the connection lost), both told to
    ``_lost``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        #: Resolved once the connection is gone (``Pool.aclose`` waits for it).
        self.gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._parser = httptools.HttpResponseParser(self)
        self._received = 0
        self._headers: list[tuple[bytes, bytes]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio's; they have its interface.
        self.transport = cast(asyncio.Transport, transport)

    def eof_received(self) -> bool | None:
        self._lost("the server closed the connection")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(f"the connection was lost: {exc}" if exc else "the server closed it")
        if not self.gone.done():
            self.gone.set_result(None)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def _feed(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(TransportError(f"malformed answer: {exc}"))

    def _lost(self, why: str) -> None:
        raise NotImplementedError

    def _fail(self, error: TransportError) -> None:
        raise NotImplementedError


class _Connection(_Reader):
    """One connection carrying one exchange at a time."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        self.idle_since = 0.0
        self.keep_alive = False
        self._waiter: asyncio.Future[Answer] | None = None
        self._body: list[bytes] = []

    # --- asyncio.Protocol ---------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._received += len(data)
        if self._waiter is None:
            self._fail(TransportError("bytes arrived with no request in flight"))
            return
        if self._received > MAX_ANSWER_BYTES:
            self._fail(TransportError(f"answer larger than {MAX_ANSWER_BYTES} bytes"))
            return
        self._feed(data)

    # --- httptools callbacks ----------------------------------------------------------

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        self.keep_alive = self._parser.should_keep_alive()
        answer = Answer(
            self._parser.get_status_code(), Headers(self._headers), b"".join(self._body)
        )
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    # --- the exchange -------------------------------------------------------------

    async def exchange(self, request: bytes) -> Answer:
        """Send ``request`` and wait for its whole answer (the caller bounds the wait)."""
        if self.closed or self.transport is None or self.transport.is_closing():
            raise Unanswered("the connection was closed before the request was sent")
        self._waiter = asyncio.get_running_loop().create_future()
        self._received = 0
        self._headers = []
        self._body = []
        self.keep_alive = False
        self.transport.write(request)
        return await self._waiter

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _lost(self, why: str) -> None:
        self.closed = True
        if self._received == 0:
            self._fail(Unanswered(why))
        else:
            self._fail(TransportError(f"truncated answer: {why}"))

    def _fail(self, error: TransportError) -> None:
        waiter, self._waiter = self._waiter, None
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)


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
        self._idle: list[_Connection] = []
        self._slots: asyncio.Semaphore | None = None
        self._closed = False
        #: Every connection not yet gone, idle, in use or streaming.
        self._live: set[_Connection | Stream] = set()

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
            conn = await self._open(_Connection)
            return self._finish(conn, await self._exchange(conn, request))

    def close(self) -> None:
        """Close every idle connection; one in use closes when its call ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    async def aclose(self, timeout_s: float = CLOSE_WAIT_S) -> None:
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

    def _take(self) -> _Connection | None:
        """The most recently used idle connection still open and fresh enough."""
        now = self._monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and (IDLE_KEEP_S is None or now - conn.idle_since < IDLE_KEEP_S):
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
    async def _exchange(conn: _Connection, request: bytes) -> Answer:
        try:
            return await conn.exchange(request)
        except BaseException:
            conn.close()
            raise

    def _finish(self, conn: _Connection, answer: Answer) -> Answer:
        if conn.keep_alive and not conn.closed and not self._closed:
            conn.idle_since = self._monotonic()
            self._idle.append(conn)
        else:
            conn.close()
        return answer


class Stream(_Reader):
    """One answer read as it arrives, on a connection of its own (a watch).

    ``head`` resolves to the status and headers; ``chunk()`` then gives the body's
    pieces, ``b""`` at its end. A connection lost before the end, or a malformed
    answer, raises ``TransportError`` from whichever is awaited. ``close()`` ends it."""

    def __init__(self) -> None:
        super().__init__()
        self.head: asyncio.Future[tuple[int, Headers]] = asyncio.get_running_loop().create_future()
        self._chunks: collections.deque[bytes] = collections.deque()
        self._ended = False
        self._error: TransportError | None = None
        self._wake: asyncio.Future[None] | None = None
        self._paused = False

    def send(self, request: bytes) -> None:
        """Write the request (once, right after connecting)."""
        assert self.transport is not None
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        self._received += len(data)
        self._feed(data)

    def on_headers_complete(self) -> None:
        if not self.head.done():
            self.head.set_result((self._parser.get_status_code(), Headers(self._headers)))

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        if len(self._chunks) >= STREAM_BUFFER and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()
        self._signal()

    def on_message_complete(self) -> None:
        self._ended = True
        self._signal()

    async def chunk(self) -> bytes:
        """The next piece of the body; ``b""`` once it has ended."""
        while not self._chunks:
            if self._ended:
                return b""
            if self._error is not None:
                raise self._error
            self._wake = asyncio.get_running_loop().create_future()
            await self._wake
        data = self._chunks.popleft()
        if self._paused and len(self._chunks) <= STREAM_BUFFER // 4 and self.transport:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def read_all(self) -> bytes:
        """The rest of the body (an error answer's), at most ``MAX_ANSWER_BYTES``."""
        parts: list[bytes] = []
        size = 0
        while piece := await self.chunk():
            size += len(piece)
            if size > MAX_ANSWER_BYTES:
                raise TransportError(f"answer larger than {MAX_ANSWER_BYTES} bytes")
            parts.append(piece)
        return b"".join(parts)

    def close(self) -> None:
        """Stop reading and close the connection (idempotent)."""
        if not self.head.done():
            self.head.cancel()  # nobody waits for it now: no error to leave unread
        if self.transport is not None:
            self.transport.close()

    def _lost(self, why: str) -> None:
        if not self._ended:
            error = Unanswered(why) if self._received == 0 else TransportError(f"truncated: {why}")
            self._fail(error)

    def _fail(self, error: TransportError) -> None:
        if self._error is None:
            self._error = error
        if not self.head.done():
            self.head.set_exception(error)
        self.close()
        self._signal()

    def _signal(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None and not wake.done():
            wake.set_result(None)


P = TypeVar("P", _Connection, Stream)
