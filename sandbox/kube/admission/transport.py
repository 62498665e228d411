"""The HTTPS call to one webhook, as the apiserver's webhook client makes it.

TLS 1.2 or newer, ALPN ``http/1.1``, the server certificate verified against the
webhook's ``caBundle`` (the system roots when it is empty) and, for a service
reference, for the name ``<service>.<namespace>.svc`` — while the TCP connection goes to
the loopback endpoint the resolver picked (the name is sent as SNI and checked against
the certificate's SANs). The query carries ``timeout=<N>s`` and the call is cut after
``timeoutSeconds``. No connection is reused across calls, so a certificate is checked
for the name of every call.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx

from sandbox.kube import encoding
from sandbox.kube.admission.config import Webhook
from sandbox.kube.admission.endpoints import EndpointResolver, ResolveError


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


class WebhookTransport:
    """Posts AdmissionReviews; ``transport`` lets tests swap the network (httpx mock)."""

    def __init__(
        self, resolver: EndpointResolver, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._resolver = resolver
        self._transport = transport

    async def post(self, webhook: Webhook, review: dict[str, Any]) -> Any:
        """The decoded JSON answer; raises ``CallError`` for every kind of failed call."""
        shown = display_url(webhook)
        try:
            url, headers, extensions = await self._target(webhook)
            response = await self._send(webhook, url, headers, extensions, review)
        except (ResolveError, httpx.HTTPError, ssl.SSLError, OSError) as exc:
            raise CallError(f'failed to call webhook: Post "{shown}": {_describe(exc)}') from exc
        if response.status_code != 200:
            raise CallError(
                f'failed to call webhook: Post "{shown}": '
                f"the server responded with status {response.status_code}"
            )
        try:
            return encoding.decode(response.content)
        except ValueError as exc:
            raise CallError(f"failed to call webhook: response body is not JSON: {exc}") from exc

    async def _target(self, webhook: Webhook) -> tuple[str, dict[str, str], dict[str, Any]]:
        query = f"timeout={webhook.timeout_s}s"
        if webhook.service is None:
            url = str(webhook.url or "")
            return url + ("&" if "?" in url else "?") + query, {}, {}
        ref = webhook.service
        ip, port = await self._resolver.resolve(ref)
        url = f"https://{ip}:{port}{ref.path}?{query}"
        host = ref.host if ref.port == 443 else f"{ref.host}:{ref.port}"
        return url, {"Host": host}, {"sni_hostname": ref.host}

    async def _send(
        self,
        webhook: Webhook,
        url: str,
        headers: dict[str, str],
        extensions: dict[str, Any],
        review: dict[str, Any],
    ) -> httpx.Response:
        timeout = httpx.Timeout(float(webhook.timeout_s))
        async with httpx.AsyncClient(
            verify=tls_context(webhook.ca_bundle),
            timeout=timeout,
            trust_env=False,
            transport=self._transport,
        ) as client:
            return await client.post(url, json=review, headers=headers, extensions=extensions)


def display_url(webhook: Webhook) -> str:
    """The URL as the apiserver names it in errors (service DNS name, not the endpoint)."""
    query = f"timeout={webhook.timeout_s}s"
    if webhook.service is None:
        return f"{webhook.url}?{query}"
    ref = webhook.service
    return f"https://{ref.host}:{ref.port}{ref.path}?{query}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "context deadline exceeded"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"tls: failed to verify certificate: {cause.verify_message}"
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__
