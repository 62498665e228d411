"""The HTTPS call to one webhook, as kube-apiserver's webhook client makes it.

kube-apiserver keeps one REST client per webhook *client configuration* — its
``ClientManager`` caches them by everything of ``clientConfig`` but the webhook's name
(URL, ``caBundle``, service namespace, name, path and port;
``k8s.io/apiserver/pkg/util/webhook/client.go``) — and each client keeps its HTTP/1.1
connections alive between calls. Here each ``ClientConfig`` has one client:

- TLS 1.2 or newer, ALPN ``http/1.1``, the server certificate verified against the
  configuration's ``caBundle`` (the system roots when it is empty) and, for a service
  reference, for the name ``<service>.<namespace>.svc``, sent as SNI, while the TCP
  connection goes to the endpoint chosen for the round trip;
- every call resolves the Service to a ready endpoint anew (``EndpointResolver``) and
  goes there, over a kept-alive connection to that endpoint when the client has one
  idle, a new one otherwise — kube-apiserver's ``WebhookRoundTripLoadBalancing``;
- a client's connections are its own, so a connection checked for one name is never
  used for a call that must be checked for another;
- the query carries ``timeout=<N>s`` and the whole call is cut after
  ``timeoutSeconds`` (a cut call's connection is closed, never reused).

When the configurations change, ``retain`` closes the clients no webhook uses any more
(a new ``caBundle`` or service makes a new client; the old one is closed once its calls
in flight have ended). ``aclose`` closes them all (the server's stop).

The client is ``sandbox.kube.admission.http1``: one keep-alive ``Pool`` per endpoint, parsed by
httptools on the server's own loop — Python's cost per call kept small, as the real
client's is. A reused connection the webhook closed before answering fails the call (a
POST is not sent twice; Go's transport retries it only when nothing was written). The
pools of endpoints the Service no longer lists are closed as soon as a call sees they
are gone. Tests may pass an ``httpx`` transport instead (a mocked network); the calls
then go through an ``httpx.AsyncClient`` built the same way.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from sandbox.kube import encoding
from sandbox.kube.admission import http1
from sandbox.kube.admission.config import ServiceRef, Webhook
from sandbox.kube.admission.endpoints import EndpointResolver, ResolveError

#: Connections open at once to one endpoint (Go's transport sets no limit; a bound keeps
#: a runaway caller from exhausting file descriptors).
CONNECTIONS_PER_ENDPOINT = 256
#: httpx (tests' mocked network only): idle connections kept, and for how long.
KEEPALIVE_CONNECTIONS = 100
KEEPALIVE_EXPIRY_S = 90.0


class CallError(Exception):
    """The webhook could not be called or answered unusably (failurePolicy applies)."""


@functools.lru_cache(maxsize=64)
def tls_context(ca_bundle: bytes) -> ssl.SSLContext:
    """A client context trusting ``ca_bundle`` (PEM), or the system roots when empty."""
    if ca_bundle:
        context = ssl.create_default_context(cadata=ca_bundle.decode("ascii", "replace"))
    else:
        context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    return context


@dataclass(frozen=True)
class ClientConfig:
    """What selects a webhook's client: its ``clientConfig`` without the webhook name."""

    url: str | None
    ca_bundle: bytes
    service: ServiceRef | None

    @classmethod
    def of(cls, webhook: Webhook) -> ClientConfig:
        """The client configuration ``webhook`` is called with."""
        return cls(webhook.url, webhook.ca_bundle, webhook.service)


@dataclass(frozen=True)
class Target:
    """Where one call goes: the endpoint dialled (``None``: the URL's own host), the TLS
    name, the request's target (path and query) and ``Host`` header."""

    endpoint: tuple[str, int]
    server_name: str
    path: str
    host: str


class _Sender(Protocol):
    async def send(self, target: Target, body: bytes) -> tuple[int, bytes]: ...

    def keep_only(self, endpoints: list[tuple[str, int]]) -> None: ...

    def endpoints(self) -> list[tuple[str, int]]: ...

    async def aclose(self) -> None: ...


class _Pools:
    """A client configuration's connections: one ``http1.Pool`` per endpoint."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        self._pools: dict[tuple[str, int], http1.Pool] = {}

    async def send(self, target: Target, body: bytes) -> tuple[int, bytes]:
        pool = self._pools.get(target.endpoint)
        if pool is None:
            ip, port = target.endpoint
            pool = http1.Pool(
                ip, port, self._context, target.server_name, size=CONNECTIONS_PER_ENDPOINT
            )
            self._pools[target.endpoint] = pool
        headers = {"Content-Type": "application/json", "Accept": "application/json, */*"}
        request = http1.serialize("POST", target.path, target.host, headers, body)
        answer = await pool.request(request, idempotent=False)
        return answer.status, answer.body

    def keep_only(self, endpoints: list[tuple[str, int]]) -> None:
        """Close the pools of endpoints no longer listed (calls in flight finish)."""
        listed = set(endpoints)
        for endpoint in [e for e in self._pools if e not in listed]:
            self._pools.pop(endpoint).close()

    def endpoints(self) -> list[tuple[str, int]]:
        return list(self._pools)

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        await asyncio.gather(*(pool.aclose() for pool in pools))


class _Httpx:
    """The same calls through an ``httpx`` transport (tests' mocked network)."""

    def __init__(self, context: ssl.SSLContext, transport: httpx.AsyncBaseTransport) -> None:
        limits = httpx.Limits(
            max_connections=None,
            max_keepalive_connections=KEEPALIVE_CONNECTIONS,
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
        )
        self._http = httpx.AsyncClient(
            verify=context, trust_env=False, transport=transport, limits=limits, timeout=None
        )

    async def send(self, target: Target, body: bytes) -> tuple[int, bytes]:
        ip, port = target.endpoint
        host = f"[{ip}]" if ":" in ip else ip
        response = await self._http.post(
            f"https://{host}:{port}{target.path}",
            content=body,
            headers={"Host": target.host, "Content-Type": "application/json"},
            extensions={"sni_hostname": target.server_name},
        )
        return response.status_code, response.content

    def keep_only(self, endpoints: list[tuple[str, int]]) -> None:
        """Nothing to do: httpx pools by origin and expires idle connections itself."""

    def endpoints(self) -> list[tuple[str, int]]:
        return []

    async def aclose(self) -> None:
        await self._http.aclose()


class _Client:
    """One cached client and the calls in flight on it."""

    def __init__(self, sender: _Sender) -> None:
        self.sender = sender
        self.in_flight = 0
        self.retired = False


class WebhookTransport:
    """Posts AdmissionReviews; ``transport`` lets tests swap the network (httpx mock)."""

    def __init__(
        self, resolver: EndpointResolver, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._resolver = resolver
        self._transport = transport
        self._clients: dict[ClientConfig, _Client] = {}
        #: Clients made so far (tests: a new ``caBundle`` makes one, a call does not).
        self.clients_made = 0

    @property
    def open_clients(self) -> int:
        """Clients cached now (one per client configuration in use)."""
        return len(self._clients)

    def pooled_endpoints(self) -> set[tuple[str, int]]:
        """The endpoints the cached clients hold connection pools for."""
        return {e for c in self._clients.values() for e in c.sender.endpoints()}

    async def post(self, webhook: Webhook, review: dict[str, Any]) -> Any:
        """The decoded JSON answer; raises ``CallError`` for every kind of failed call."""
        shown = display_url(webhook)
        client = self._client(ClientConfig.of(webhook))
        client.in_flight += 1
        errors = (ResolveError, http1.TransportError, httpx.HTTPError, ssl.SSLError, OSError)
        try:
            async with asyncio.timeout(webhook.timeout_s):
                target = await self._target(webhook, client)
                status, content = await client.sender.send(target, encoding.encode(review))
        except (*errors, TimeoutError) as exc:
            raise CallError(f'failed to call webhook: Post "{shown}": {_describe(exc)}') from exc
        finally:
            client.in_flight -= 1
            if client.retired and client.in_flight == 0:
                await client.sender.aclose()
        if status != 200:
            raise CallError(
                f'failed to call webhook: Post "{shown}": the server responded with status {status}'
            )
        try:
            return encoding.decode(content)
        except ValueError as exc:
            raise CallError(f"failed to call webhook: response body is not JSON: {exc}") from exc

    async def retain(self, webhooks: Iterable[Webhook]) -> None:
        """Close the clients of configurations none of ``webhooks`` uses any more (each
        once its calls in flight have ended)."""
        wanted = {ClientConfig.of(w) for w in webhooks}
        for config in [c for c in self._clients if c not in wanted]:
            await self._retire(self._clients.pop(config))

    async def aclose(self) -> None:
        """Close every client (one with calls in flight closes when the last ends)."""
        while self._clients:
            await self._retire(self._clients.popitem()[1])

    async def _retire(self, client: _Client) -> None:
        client.retired = True
        if client.in_flight == 0:
            await client.sender.aclose()

    def _client(self, config: ClientConfig) -> _Client:
        client = self._clients.get(config)
        if client is None:
            context = tls_context(config.ca_bundle)
            sender: _Sender = (
                _Pools(context) if self._transport is None else _Httpx(context, self._transport)
            )
            client = _Client(sender)
            self._clients[config] = client
            self.clients_made += 1
        return client

    async def _target(self, webhook: Webhook, client: _Client) -> Target:
        """Where this call goes: for a service, an endpoint chosen now among the ready
        ones (the pools of endpoints gone are closed)."""
        query = f"timeout={webhook.timeout_s}s"
        if webhook.service is None:
            url = urlsplit(str(webhook.url or ""))
            if url.scheme != "https" or not url.hostname:
                raise ResolveError(f"unusable webhook URL {webhook.url!r}")
            path = (url.path or "/") + "?" + (f"{url.query}&" if url.query else "") + query
            endpoint = (url.hostname, url.port or 443)
            return Target(endpoint, url.hostname, path, url.netloc)
        ref = webhook.service
        candidates = await self._resolver.candidates(ref)
        client.sender.keep_only(candidates)
        endpoint = self._resolver.choose(candidates)
        host = ref.host if ref.port == 443 else f"{ref.host}:{ref.port}"
        return Target(endpoint, ref.host, f"{ref.path}?{query}", host)


def display_url(webhook: Webhook) -> str:
    """The URL as the apiserver names it in errors (service DNS name, not the endpoint)."""
    query = f"timeout={webhook.timeout_s}s"
    if webhook.service is None:
        return f"{webhook.url}?{query}"
    ref = webhook.service
    return f"https://{ref.host}:{ref.port}{ref.path}?{query}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return "context deadline exceeded"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"tls: failed to verify certificate: {cause.verify_message}"
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__
