"""The gateway with its calls made on the caller's event loop, through aiohttp (the
webhook's hot path).

``shared.gateway.Gateway`` runs every call on a worker thread through the official
client's urllib3 (CONVENTIONS 4). For the webhook's ledger writes that costs more than
the write is worth (the executor hop, hand-offs of the interpreter lock, ``http.client``
parsing headers: docs/developer/performance.md). ``LoopGateway`` keeps everything else of the
gateway — the configuration (kubeconfig or in-cluster), the API root and authentication
headers with their reuse-and-rotation rule (``root_and_auth``), the throttling retries,
the answer's decoding and error mapping (``shared.kubewire``), the watch query and line
decoding — and sends the calls through an aiohttp session on the running loop: its
connector's keep-alive connections (at most ``connections`` calls at once, plus the
watches), its TLS (the configuration's CA, client certificate and strictness).

Our rules on top of aiohttp's: an answer must be delimited (``Content-Length`` or
chunked; the API server never sends one ended by the connection's close) and at most
``MAX_ANSWER_BYTES``; a header value the request line could be split by, or that is
not Latin-1, is refused before anything is sent; no ``Accept-Encoding`` is offered
(answers are read as sent, never compressed); every failure below HTTP is a
``ServerError`` with code 0. aiohttp sends a GET, PUT or DELETE again, once, when a
kept-alive connection closes before answering; a PATCH (the claim write) never — a
write the server may have applied is reported as failed, and the ledger reads again.

A gateway is used on one event loop (its session belongs to it). Through an HTTP
proxy (the configuration names one) the calls stay on the worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from shared.errors import ServerError
from shared.gateway import Configuration, Endpoint, Gateway, strict_verification
from shared.kubewire import (
    Response,
    WatchEvent,
    answer,
    encoded,
    failure,
    watch_event,
    watch_lines,
    watch_query,
)
from shared.resources import Resource

#: Calls to the API server on the loop at once (each on a kept-alive connection; more
#: wait for one to come free). Watches hold connections beyond these.
LOOP_CONNECTIONS = 8
#: Watches a gateway may hold open beside its calls.
LOOP_WATCHES = 8
#: Most bytes one answer's body may take; more is refused.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
#: A watch the server has not ended this long after its ``timeoutSeconds`` is broken.
WATCH_GRACE_S = 30.0
#: A connection idle longer than this is closed instead of reused (a server or a load
#: balancer may drop idle connections).
IDLE_KEEP_S = 15.0


def tls_context(endpoint: Endpoint, strict: bool = True) -> ssl.SSLContext:
    """The TLS context the configuration asks for: its CA (else the system's), its
    client certificate and key when it has them, verification off only when it says
    ``insecure-skip-tls-verify``; OpenSSL's strict checks as ``strict`` says
    (K8S_TLS_STRICT_VERIFY)."""
    context = strict_verification(ssl.create_default_context(cafile=endpoint.ca_file), strict)
    if endpoint.cert_file:
        context.load_cert_chain(endpoint.cert_file, endpoint.key_file)
    if not endpoint.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif not endpoint.check_hostname:
        context.check_hostname = False
    return context


class _Headers:
    """An answer's headers as ``shared.kubewire`` reads them (``get``, ``getlist``)."""

    __slots__ = ("_headers",)

    def __init__(self, headers: Any) -> None:
        self._headers = headers

    def get(self, name: str, default: str | None = None) -> str | None:
        value = self._headers.get(name, default)
        return value if value is None else str(value)

    def getlist(self, name: str) -> list[str]:
        return [str(v) for v in self._headers.getall(name, [])]


class _Origin:
    """The API server's origin: its TLS, and the session on the loop once made."""

    def __init__(self, endpoint: Endpoint, size: int, strict: bool) -> None:
        url = urlsplit(endpoint.root)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"the API server URL {endpoint.root!r} is not http(s)://host")
        secure = url.scheme == "https"
        self.tls: ssl.SSLContext | None = tls_context(endpoint, strict) if secure else None
        self.server_hostname = endpoint.server_name if secure else None
        self.size = size
        self.session: aiohttp.ClientSession | None = None
        #: At most ``size`` calls at once (watches apart), made with the session.
        self.calls = asyncio.Semaphore(size)
        #: The watches' answers being read (ended when the gateway closes).
        self.watches: set[aiohttp.ClientResponse] = set()

    def on_loop(self) -> aiohttp.ClientSession:
        """The session, made on the running loop at the first call."""
        if self.session is None or self.session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.size + LOOP_WATCHES,
                ssl=self.tls if self.tls is not None else False,
                keepalive_timeout=IDLE_KEEP_S,
            )
            self.session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                trust_env=False,
                # answers are read as sent: no compression offered (an API server
                # gzips a large answer, a LIST, for a client that accepts it)
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return self.session


def _checked(method: str, path: str, headers: Mapping[str, str]) -> None:
    """Refuse a header a line break could split the request by, or not Latin-1."""
    for name, value in headers.items():
        if "\r" in value or "\n" in value or (not value.isascii() and not _latin1(value)):
            raise ServerError(0, f"{method} {path}: header {name} cannot be sent as it is")


def _latin1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


async def _body(method: str, path: str, resp: aiohttp.ClientResponse) -> bytes:
    """The answer's whole body: delimited, and within ``MAX_ANSWER_BYTES``."""
    length = resp.headers.get("Content-Length")
    chunked = "chunked" in resp.headers.get("Transfer-Encoding", "").lower()
    if length is None and not chunked and resp.status not in (204, 304):
        raise ServerError(0, f"{method} {path}: truncated answer (no length)")
    if length is not None and length.isdigit() and int(length) > MAX_ANSWER_BYTES:
        raise ServerError(0, f"{method} {path}: answer larger than {MAX_ANSWER_BYTES} bytes")
    if length is not None and length.isdigit():
        return await resp.read()  # framed by its length, checked above: read at once
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise ServerError(0, f"{method} {path}: answer larger than {MAX_ANSWER_BYTES} bytes")
        parts.append(chunk)
    return b"".join(parts)


def _below_http(method: str, path: str, exc: Exception) -> ServerError:
    """Our error for a failure below HTTP (code 0), saying which."""
    if isinstance(exc, aiohttp.ClientPayloadError):
        why = "truncated answer"
    elif isinstance(exc, aiohttp.ClientConnectorError):
        why = "cannot connect"
    elif isinstance(exc, aiohttp.ClientResponseError):
        why = "malformed answer"
    else:
        why = "connection failed"
    return ServerError(0, f"{method} {path}: {why}: {type(exc).__name__}: {exc}")


class LoopGateway(Gateway):
    """``Gateway`` whose calls, watches included, run on the caller's event loop."""

    def __init__(
        self, configuration: Configuration, connections: int = LOOP_CONNECTIONS, **kwargs: Any
    ) -> None:
        super().__init__(configuration, **kwargs)
        endpoint = self.endpoint()
        self._origin = None if endpoint.proxied else _Origin(endpoint, connections, self.strict_tls)

    def close(self) -> None:
        """Close the worker threads' connections, and the session's once the loop runs
        (prefer ``aclose``)."""
        origin = self._origin
        if origin is not None and origin.session is not None and not origin.session.closed:
            with contextlib.suppress(RuntimeError):  # no loop: its connections went with it
                self._closing = asyncio.get_running_loop().create_task(origin.session.close())
        super().close()

    async def aclose(self) -> None:
        """Close every connection of the session — idle, in use, watching — and wait
        until they are gone, then the worker threads'."""
        origin = self._origin
        if origin is not None and origin.session is not None:
            for resp in list(origin.watches):  # a read in progress wakes with it
                resp.content.set_exception(aiohttp.ClientConnectionError("the gateway closed"))
            await origin.session.close()
        super().close()

    async def _send(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None,
        body: Any,
        headers: dict[str, str] | None,
        decode: bool = True,
    ) -> Response:
        """One HTTP call on the running loop, bounded by the timeout (no thread)."""
        origin = self._origin
        if origin is None:
            return await super()._send(method, path, query, body, headers, decode)
        url, hdrs = self._url_and_headers(method, path, query, headers)
        data = encoded(body, hdrs)
        _checked(method, path, hdrs)
        session = origin.on_loop()
        try:
            async with (
                origin.calls,
                asyncio.timeout(self._timeout_s),
                session.request(
                    method,
                    url,
                    data=data,
                    headers=hdrs,
                    allow_redirects=False,
                    server_hostname=origin.server_hostname,
                ) as resp,
            ):
                got = await _body(method, path, resp)
                status, found = resp.status, _Headers(resp.headers)
        except TimeoutError as exc:
            raise ServerError(0, f"{method} {path}: no answer within {self._timeout_s}s") from exc
        except (aiohttp.ClientError, ValueError, OSError) as exc:
            raise _below_http(method, path, exc) from exc
        return answer(method, path, status, got, found, decode)

    async def watch(
        self,
        res: Resource,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_s: int = 270,
        known: Callable[[bytes], WatchEvent | None] | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """``Gateway.watch`` on the running loop, read as it arrives (no thread). The
        answer's head must come within the call timeout; the server ends the watch
        after ``timeout_s`` and one not ended 30 s after that is broken. A 410 (status
        or ERROR event) raises ``Gone``. A line ``known`` returns an event for is not
        decoded: that event stands for it."""
        origin = self._origin
        if origin is None:
            stream = super().watch(res, resource_version, namespace, label_selector, timeout_s)
            async for event in stream:
                yield event
            return
        path = res.path(namespace)
        query = watch_query(resource_version, label_selector, timeout_s)
        url, hdrs = self._url_and_headers("GET", path, query, None)
        _checked("watch", path, hdrs)
        loop = asyncio.get_running_loop()
        session = origin.on_loop()
        resp: aiohttp.ClientResponse | None = None
        late: asyncio.TimerHandle | None = None
        try:
            try:
                async with asyncio.timeout(self._timeout_s):
                    resp = await session.get(
                        url, headers=hdrs, server_hostname=origin.server_hostname
                    )
                    origin.watches.add(resp)
                    if resp.status >= 300:
                        raise failure(resp.status, await resp.read(), _Headers(resp.headers))
            except TimeoutError as exc:
                raise ServerError(0, f"watch {path}: no answer within {self._timeout_s}s") from exc
            # one timer for the whole watch, not one per chunk read: when it fires,
            # the read waiting (or the next) raises
            overdue = ServerError(0, f"watch {path} did not end in time")
            late = loop.call_at(
                loop.time() + timeout_s + WATCH_GRACE_S, resp.content.set_exception, overdue
            )
            buffer = b""
            while True:
                chunk = await resp.content.readany()
                if not chunk:
                    return
                lines, buffer = watch_lines(buffer, chunk)
                if len(buffer) > MAX_ANSWER_BYTES:
                    raise ServerError(0, f"watch {path}: a line over {MAX_ANSWER_BYTES} bytes")
                for line in lines:
                    seen = known(line) if known is not None else None
                    yield watch_event(line) if seen is None else seen
        except (aiohttp.ClientError, ValueError, OSError) as exc:
            raise _below_http("watch", path, exc) from exc
        finally:
            if late is not None:
                late.cancel()
            if resp is not None:
                origin.watches.discard(resp)
                resp.close()
