"""The gateway with its calls made on the caller's event loop (the webhook's hot path).

``shared.gateway.Gateway`` runs every call on a worker thread through the official
client's urllib3 (CONVENTIONS 4). For the webhook's ledger writes that costs more than
the write is worth: the executor hop, hand-offs of the interpreter lock, and
``http.client`` parsing headers through the email package — about 1.1–1.3 ms of CPU
per write (docs/performance.md, "Webhook"). ``LoopGateway`` keeps everything else of
the gateway — the configuration (kubeconfig or in-cluster), the API root and
authentication headers with their reuse-and-rotation rule (``root_and_auth``), the
throttling retries, the answer's decoding and error mapping (``answer``), the watch
query and line decoding — and sends the calls through ``shared.http1`` on the running
loop: watches too, each on a connection of its own read as it arrives.

A gateway is used on one event loop (its connections belong to it). Through an HTTP
proxy (the configuration names one) the calls stay on the worker threads.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

from shared import http1, http1pool
from shared.errors import ServerError
from shared.gateway import (
    Configuration,
    Endpoint,
    Gateway,
    Response,
    WatchEvent,
    answer,
    encoded,
    failure,
    strict_verification,
    watch_event,
    watch_lines,
    watch_query,
)
from shared.resources import Resource

#: Keep-alive connections to the API server the loop's calls share (each carries one
#: call at a time; more concurrent calls wait for one to come free).
LOOP_CONNECTIONS = 8
#: Methods a request may be sent again for after a kept-alive connection closed before
#: answering (RFC 9110 §9.2.2; GET has no side effect). A write is never sent twice: a
#: JSON Patch or PUT the server may have applied is reported as failed instead, and the
#: ledger's caller reads the object again.
IDEMPOTENT = frozenset({"GET"})


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


class _Origin:
    """The serialized parts of every request to the API server's origin."""

    def __init__(
        self, endpoint: Endpoint, size: int, monotonic: Callable[[], float], strict: bool
    ) -> None:
        url = urlsplit(endpoint.root)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"the API server URL {endpoint.root!r} is not http(s)://host")
        secure = url.scheme == "https"
        self.prefix = f"{url.scheme}://{url.netloc}"
        self.host = url.netloc.rpartition("@")[2]
        tls = tls_context(endpoint, strict) if secure else None
        port = url.port or (443 if secure else 80)
        self.pool = http1pool.Pool(url.hostname, port, tls, endpoint.server_name, size, monotonic)


class LoopGateway(Gateway):
    """``Gateway`` whose calls, watches included, run on the caller's event loop."""

    def __init__(
        self,
        configuration: Configuration,
        connections: int = LOOP_CONNECTIONS,
        **kwargs: Any,
    ) -> None:
        super().__init__(configuration, **kwargs)
        endpoint = self.endpoint()
        self._origin = (
            None
            if endpoint.proxied
            else _Origin(endpoint, connections, self._monotonic, self.strict_tls)
        )

    def close(self) -> None:
        """Close the loop's idle connections, then the worker threads' (call it on the
        loop: closing a connection is the loop's work). Prefer ``aclose``."""
        if self._origin is not None:
            self._origin.pool.close()
        super().close()

    async def aclose(self) -> None:
        """Close every connection — idle, in use, watching — and wait until they are
        gone (bounded: ``http1.CLOSE_WAIT_S``), then the worker threads: the loop can
        then be closed (a TLS connection still shutting down would keep it busy)."""
        if self._origin is not None:
            await self._origin.pool.aclose()
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
        data = encoded(body, hdrs) or b""
        try:
            request = http1.serialize(method, url[len(origin.prefix) :], origin.host, hdrs, data)
            async with asyncio.timeout(self._timeout_s):
                got = await origin.pool.request(request, method in IDEMPOTENT)
        except TimeoutError as exc:
            raise ServerError(0, f"{method} {path}: no answer within {self._timeout_s}s") from exc
        except http1.TransportError as exc:
            raise ServerError(0, f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        return answer(method, path, got.status, got.body, got.headers, decode)

    async def watch(
        self,
        res: Resource,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_s: int = 270,
        known: Callable[[bytes], WatchEvent | None] | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """``Gateway.watch`` on the running loop: the stream on a connection of its own,
        read as it arrives (no thread). The answer's head must come within the call
        timeout; the server ends the watch after ``timeout_s`` and one not ended 30 s
        after that is broken. A 410 (status or ERROR event) raises ``Gone``. A line
        ``known`` returns an event for is not decoded: that event stands for it."""
        origin = self._origin
        if origin is None:
            async for event in super().watch(
                res, resource_version, namespace, label_selector, timeout_s
            ):
                yield event
            return
        path = res.path(namespace)
        query = watch_query(resource_version, label_selector, timeout_s)
        url, hdrs = self._url_and_headers("GET", path, query, None)
        loop = asyncio.get_running_loop()
        stream: http1.Stream | None = None
        try:
            try:
                request = http1.serialize("GET", url[len(origin.prefix) :], origin.host, hdrs, b"")
                async with asyncio.timeout(self._timeout_s):
                    stream = await origin.pool.stream(request)
                    status, headers = await stream.head
                    if status >= 300:
                        raise failure(status, await stream.read_all(), headers)
            except TimeoutError as exc:
                raise ServerError(0, f"watch {path}: no answer within {self._timeout_s}s") from exc
            deadline = loop.time() + timeout_s + 30
            buffer = b""
            while True:
                try:
                    async with asyncio.timeout_at(deadline):
                        chunk = await stream.chunk()
                except TimeoutError as exc:
                    raise ServerError(0, f"watch {path} did not end in time") from exc
                if not chunk:
                    return
                lines, buffer = watch_lines(buffer, chunk)
                if len(buffer) > http1.MAX_ANSWER_BYTES:
                    raise ServerError(
                        0, f"watch {path}: a line over {http1.MAX_ANSWER_BYTES} bytes"
                    )
                for line in lines:
                    seen = known(line) if known is not None else None
                    yield watch_event(line) if seen is None else seen
        except http1.TransportError as exc:
            raise ServerError(0, f"watch {path} broke: {type(exc).__name__}: {exc}") from exc
        finally:
            if stream is not None:
                stream.close()
