"""The one place httpx is called: send a request, get an ``Answer`` or a ``Transient``.

Every httpx exception is caught here and turned into a ``Transient`` (timeout or
network). The API key goes into the pooled client's default headers once and is
never logged: log lines carry its public ``key_prefix`` (the first 15 characters,
§1.3). The current unit of work's trace id is sent as ``X-Client-Trace``.

Requests in flight at once each get a *lane*: a pooled ``httpx.AsyncClient`` of one
keep-alive connection that serves one request at a time. One shared client was measured
at ≈ 2.5 ms of CPU per request with 16 in flight against ≈ 0.7 ms this way: httpcore's
pool re-scans every connection (polling each idle socket, ``getpeername``) for every
queued request on every arrival and departure, and hands one idle connection to several
queued requests that then retry (``ConnectionNotAvailable``). A lane has one connection
to scan and one request to hand it to. Lanes are made on first need, at most
``MAX_LANES``; a request waits for a free lane within its own timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from shared.appclient import trace
from shared.appclient.outcomes import Transient, TransientReason
from shared.appclient.reading import excerpt
from shared.logs import log

logger = logging.getLogger("shared.appclient")

#: ``gpures_`` plus 8 hex digits: the part of a key that is safe to log.
KEY_PREFIX_LENGTH = 15
#: Requests in flight at once (each on its own lane; more wait for one). Above the lease
#: path's 16 concurrent asks plus the other loops' occasional calls.
MAX_LANES = 32


def key_prefix(api_key: str) -> str:
    """The loggable public prefix of a service key."""
    return api_key[:KEY_PREFIX_LENGTH]


@dataclass(frozen=True)
class Timeouts:
    """Seconds per call class (§1.8): reads of small maps, and everything else."""

    default: float = 10.0
    #: The reservation list, creates, cancels, selections and overstay reports.
    long: float = 15.0


@dataclass(frozen=True)
class Answer:
    """A response that arrived completely (any status)."""

    status: int
    text: str
    headers: Mapping[str, str]

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300


class Lanes:
    """Up to ``limit`` clients of one connection each, one request per client at a time
    (see the module docstring). Idle lanes are reused last-in first-out, so the warmest
    connections serve a trickle and the others expire idle."""

    def __init__(self, make: Callable[[], httpx.AsyncClient], limit: int = MAX_LANES) -> None:
        self._make = make
        self._free: list[httpx.AsyncClient] = []
        self._all: list[httpx.AsyncClient] = []
        self._slots = asyncio.Semaphore(limit)

    @asynccontextmanager
    async def lane(self) -> AsyncIterator[httpx.AsyncClient]:
        """A client no other request uses until this one is done."""
        async with self._slots:
            client = self._free.pop() if self._free else self._new()
            try:
                yield client
            finally:
                self._free.append(client)

    def _new(self) -> httpx.AsyncClient:
        client = self._make()
        self._all.append(client)
        return client

    async def aclose(self) -> None:
        for client in self._all:
            await client.aclose()


class Http:
    """A pooled async HTTP client bound to one app and one key."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        transport: httpx.AsyncBaseTransport | None = None,
        lanes: int = MAX_LANES,
    ) -> None:
        self.key_prefix = key_prefix(api_key)
        self._base_url = base_url.rstrip("/")

        def make() -> httpx.AsyncClient:
            return httpx.AsyncClient(
                base_url=self._base_url,
                headers={"X-API-Key": api_key, "Accept": "application/json"},
                transport=transport,
                follow_redirects=False,
                limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            )

        self._lanes = Lanes(make, lanes)

    def __repr__(self) -> str:
        return f"Http(base_url={self._base_url!r}, key_prefix={self.key_prefix!r})"

    async def aclose(self) -> None:
        await self._lanes.aclose()

    async def send(
        self,
        method: str,
        path: str,
        *,
        seconds: float,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> Answer | Transient:
        """One request with a ``seconds`` timeout (waiting for a lane included); never
        raises for anything the network or the server does."""
        headers = {}
        current = trace.current()
        if current is not None:
            headers[trace.TRACE_HEADER] = current
        try:
            async with asyncio.timeout(seconds), self._lanes.lane() as client:
                response = await client.request(
                    method,
                    path,
                    params=dict(params) if params else None,
                    json=body,
                    headers=headers,
                    timeout=seconds,
                )
        except (httpx.TimeoutException, TimeoutError) as exc:
            return self._failed(method, path, TransientReason.TIMEOUT, exc)
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
            return self._failed(method, path, TransientReason.NETWORK, exc)
        answer = Answer(response.status_code, response.text, dict(response.headers))
        if not answer.is_success:
            self._log_status(method, path, answer)
        return answer

    def _failed(self, method: str, path: str, reason: TransientReason, exc: Exception) -> Transient:
        detail = excerpt(f"{type(exc).__name__}: {exc}")
        log(
            logger,
            logging.WARNING,
            "appclient.request_failed",
            method=method,
            path=path,
            reason=str(reason),
            detail=detail,
            key_prefix=self.key_prefix,
            trace=trace.current(),
        )
        return Transient(reason, detail)

    def _log_status(self, method: str, path: str, answer: Answer) -> None:
        level = logging.WARNING if answer.status >= 500 else logging.INFO
        log(
            logger,
            level,
            "appclient.error_status",
            method=method,
            path=path,
            status=answer.status,
            body=excerpt(answer.text),
            key_prefix=self.key_prefix,
            trace=trace.current(),
        )
