"""The HTTPS call to one webhook, as kube-apiserver's webhook client makes it.

kube-apiserver keeps one REST client per webhook *client configuration* — its
``ClientManager`` caches them by everything of ``clientConfig`` but the webhook's name
(URL, ``caBundle``, service namespace, name, path and port;
``k8s.io/apiserver/pkg/util/webhook/client.go``) — and each client keeps its HTTP/1.1
connections alive between calls. Here a ``ClientConfig`` has one ``httpx.AsyncClient``:

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
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from sandbox.kube import encoding
from sandbox.kube.admission.config import ServiceRef, Webhook
from sandbox.kube.admission.endpoints import EndpointResolver, ResolveError

#: Idle connections a client keeps (client-go keeps 25 per host; a client here talks to
#: one Service, whose endpoints are its hosts), and how long an idle one is kept
#: (Go's ``IdleConnTimeout`` of client-go's transports: 90 s).
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


class _Client:
    """One cached client and the calls in flight on it."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.http = client
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

    async def post(self, webhook: Webhook, review: dict[str, Any]) -> Any:
        """The decoded JSON answer; raises ``CallError`` for every kind of failed call."""
        shown = display_url(webhook)
        client = self._client(ClientConfig.of(webhook))
        client.in_flight += 1
        try:
            async with asyncio.timeout(webhook.timeout_s):
                url, headers, extensions = await self._target(webhook)
                response = await client.http.post(
                    url, json=review, headers=headers, extensions=extensions
                )
        except (ResolveError, httpx.HTTPError, ssl.SSLError, OSError, TimeoutError) as exc:
            raise CallError(f'failed to call webhook: Post "{shown}": {_describe(exc)}') from exc
        finally:
            client.in_flight -= 1
            if client.retired and client.in_flight == 0:
                await client.http.aclose()
        if response.status_code != 200:
            raise CallError(
                f'failed to call webhook: Post "{shown}": '
                f"the server responded with status {response.status_code}"
            )
        try:
            return encoding.decode(response.content)
        except ValueError as exc:
            raise CallError(f"failed to call webhook: response body is not JSON: {exc}") from exc

    async def retain(self, webhooks: Iterable[Webhook]) -> None:
        """Close the clients of configurations none of ``webhooks`` uses any more (each
        once its calls in flight have ended)."""
        wanted = {ClientConfig.of(w) for w in webhooks}
        for config in [c for c in self._clients if c not in wanted]:
            await self._retire(self._clients.pop(config))

    async def aclose(self) -> None:
        """Close every client (calls still in flight end first)."""
        while self._clients:
            await self._retire(self._clients.popitem()[1])

    async def _retire(self, client: _Client) -> None:
        client.retired = True
        if client.in_flight == 0:
            await client.http.aclose()

    def _client(self, config: ClientConfig) -> _Client:
        client = self._clients.get(config)
        if client is None:
            client = _Client(
                httpx.AsyncClient(
                    verify=tls_context(config.ca_bundle),
                    trust_env=False,
                    transport=self._transport,
                    limits=httpx.Limits(
                        max_connections=None,
                        max_keepalive_connections=KEEPALIVE_CONNECTIONS,
                        keepalive_expiry=KEEPALIVE_EXPIRY_S,
                    ),
                    timeout=None,  # the call's own deadline cuts it (``post``)
                )
            )
            self._clients[config] = client
            self.clients_made += 1
        return client

    async def _target(self, webhook: Webhook) -> tuple[str, dict[str, str], dict[str, Any]]:
        query = f"timeout={webhook.timeout_s}s"
        if webhook.service is None:
            url = str(webhook.url or "")
            return url + ("&" if "?" in url else "?") + query, {}, {}
        ref = webhook.service
        ip, port = await self._resolver.resolve(ref)
        host = f"[{ip}]" if ":" in ip else ip
        url = f"https://{host}:{port}{ref.path}?{query}"
        name = ref.host if ref.port == 443 else f"{ref.host}:{ref.port}"
        return url, {"Host": name}, {"sni_hostname": ref.host}


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
