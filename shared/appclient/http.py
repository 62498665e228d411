"""The one place httpx is called: send a request, get an ``Answer`` or a ``Transient``.

Every httpx exception is caught here and turned into a ``Transient`` (timeout or
network). The API key goes into the pooled client's default headers once and is
never logged: log lines carry its public ``key_prefix`` (the first 15 characters,
§1.3). The current unit of work's trace id is sent as ``X-Client-Trace``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
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


class Http:
    """A pooled async HTTP client bound to one app and one key."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.key_prefix = key_prefix(api_key)
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={"X-API-Key": api_key, "Accept": "application/json"},
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"Http(base_url={str(self._client.base_url)!r}, key_prefix={self.key_prefix!r})"

    async def aclose(self) -> None:
        await self._client.aclose()

    async def send(
        self,
        method: str,
        path: str,
        *,
        seconds: float,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> Answer | Transient:
        """One request with a ``seconds`` timeout; never raises for anything the network
        or the server does."""
        headers = {}
        current = trace.current()
        if current is not None:
            headers[trace.TRACE_HEADER] = current
        try:
            response = await self._client.request(
                method,
                path,
                params=dict(params) if params else None,
                json=body,
                headers=headers,
                timeout=seconds,
            )
        except httpx.TimeoutException as exc:
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
