"""The one gateway to the Kubernetes API.

The official client is synchronous; every call here runs on a worker thread with an
explicit timeout and returns plain dicts (the client's generated models never leak
out). Errors come back as our classes from ``shared.errors`` — nothing else escapes.
The gateway speaks the REST API generically (any group/version/resource), using the
client only for configuration (kubeconfig or in-cluster: ``configuration``),
authentication and TLS; watches are read on worker threads (``threads``); the wire's
encoding, decoding and error mapping are ``shared.kubewire``'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal, Self
from urllib.parse import urlencode

import kubernetes.client
import kubernetes.config
import urllib3

from shared.errors import Gone, ServerError, TooManyRequests
from shared.gateway.configuration import (
    KUBECONFIG_SEPARATOR,
    Endpoint,
    load_configuration,
    strict_verification,
)
from shared.gateway.threads import watch_on_thread
from shared.kubewire import (
    THROTTLE_RETRIES,
    THROTTLE_WAIT_CAP_S,
    ListResult,
    Response,
    WatchEvent,
    answer,
    encoded,
    failure,
    retry_after_s,
    throttle_wait,
    watch_event,
    watch_lines,
    watch_query,
)
from shared.logs import log
from shared.resources import Resource

if TYPE_CHECKING:
    from shared.settings import CommonSettings

__all__ = [
    "AUTH_REUSE_S",
    "DEFAULT_TIMEOUT_S",
    "KUBECONFIG_SEPARATOR",
    "LIST_PAGE_SIZE",
    "THROTTLE_RETRIES",
    "THROTTLE_WAIT_CAP_S",
    "WATCH_CONNECTIONS",
    "Configuration",
    "Endpoint",
    "Gateway",
    "ListResult",
    "PatchType",
    "Response",
    "WatchEvent",
    "answer",
    "encoded",
    "failure",
    "load_configuration",
    "retry_after_s",
    "strict_verification",
    "throttle_wait",
    "watch_event",
    "watch_lines",
    "watch_query",
]

_log = logging.getLogger(__name__)

#: The official client's configuration (other modules name it through this alias).
Configuration = kubernetes.client.Configuration

PatchType = Literal["json", "merge", "strategic"]

_PATCH_CONTENT_TYPES: dict[str, str] = {
    "json": "application/json-patch+json",
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


#: Seconds a single non-watch call may take before it counts as failed.
DEFAULT_TIMEOUT_S = 10.0
#: Page size of LISTs.
LIST_PAGE_SIZE = 500


#: Connections kept beyond the workers' for long-running watches.
WATCH_CONNECTIONS = 8
#: Seconds the API root URL and the authentication headers are reused before they are
#: asked of the client configuration again. Asking runs the kubeconfig's refresh hook,
#: which re-applies the whole configuration (a proxy lookup through the environment
#: included): ≈ 0.1 ms per call. A rotated token (a projected service-account token
#: is rotated hourly, the old one valid for a while after) is picked up within this.
AUTH_REUSE_S = 1.0


class Gateway:
    """Async access to the Kubernetes API, returning dicts and raising ``KubeError``s."""

    def __init__(
        self,
        configuration: kubernetes.client.Configuration,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_workers: int = 16,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        strict_tls: bool = True,
    ) -> None:
        # urllib3 keeps cpu_count × 5 connections by default (10 on two cores): fewer
        # than the workers plus the open watches, so a burst kept discarding connections
        # and paying a new TLS handshake per request.
        configuration.connection_pool_maxsize = max(
            configuration.connection_pool_maxsize, max_workers + WATCH_CONNECTIONS
        )
        self._api = kubernetes.client.ApiClient(configuration)
        #: K8S_TLS_STRICT_VERIFY, for the official client's connections and the loop's.
        self.strict_tls = strict_tls
        # The official client builds its TLS context per connection from the pool's
        # arguments; a context of ours carries the strict flag (urllib3 still loads the
        # configuration's CA, client certificate and verify mode into it).
        pool_kw = self._api.rest_client.pool_manager.connection_pool_kw
        pool_kw["ssl_context"] = strict_verification(
            urllib3.util.ssl_.create_urllib3_context(), strict_tls
        )
        self._timeout_s = timeout_s
        #: (monotonic instant it was made, API root URL, authentication headers).
        self._base: tuple[float, str, dict[str, str]] | None = None
        self._monotonic = monotonic
        #: How a throttled call waits out its ``Retry-After`` (tests record it).
        self._sleep = sleep
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="kube")

    @classmethod
    def from_kubeconfig(
        cls, kubeconfig: str | Sequence[str] | None, context: str | None = None, **kwargs: Any
    ) -> Self:
        """A gateway for ``kubeconfig`` — one file or several, merged — and ``context``
        (``None``: in-cluster credentials; see ``load_configuration``)."""
        return cls(load_configuration(kubeconfig, context), **kwargs)

    @classmethod
    def for_process(cls, common: CommonSettings, **kwargs: Any) -> Self:
        """The gateway a process runs on: ``KUBECONFIG`` (else in-cluster credentials)
        and K8S_TLS_STRICT_VERIFY. Logs ``k8s.auth`` (which credentials) and, when the
        strict checks are off, ``k8s.tls_relaxed`` at WARNING — on every start."""
        source = "kubeconfig" if common.kubeconfig else "in-cluster"
        log(_log, logging.INFO, "k8s.auth", source=source)
        if not common.tls_strict_verify:
            log(
                _log,
                logging.WARNING,
                "k8s.tls_relaxed",
                detail="K8S_TLS_STRICT_VERIFY=false: strict X.509 checks are off on the "
                "connection to the API server (the chain, dates and host name are still "
                "verified); give the cluster's certificates an Authority Key Identifier "
                "and remove the setting",
            )
        return cls.from_kubeconfig(common.kubeconfig, strict_tls=common.tls_strict_verify, **kwargs)

    def endpoint(self) -> Endpoint:
        """Where and how the configuration says to connect (for the loop's client)."""
        cfg = self._api.configuration
        hostname = cfg.assert_hostname if isinstance(cfg.assert_hostname, str) else None
        return Endpoint(
            root=cfg.host,
            ca_file=cfg.ssl_ca_cert,
            cert_file=cfg.cert_file,
            key_file=cfg.key_file,
            verify=bool(cfg.verify_ssl),
            check_hostname=cfg.assert_hostname is not False,
            server_name=getattr(cfg, "tls_server_name", None) or hostname,
            proxied=bool(cfg.proxy),
        )

    def close(self) -> None:
        """Release the worker threads and connections."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._api.close()  # type: ignore[no-untyped-call]

    # --- the verbs ------------------------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        """GET one object."""
        return (await self.request("GET", res.path(namespace, name))).body

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ListResult:
        """LIST every page of a collection (a consistent snapshot; 410 mid-way restarts)."""
        query: dict[str, Any] = {"limit": LIST_PAGE_SIZE}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        for _attempt in range(3):
            items: list[dict[str, Any]] = []
            cont: str | None = None
            try:
                while True:
                    page_query = dict(query, **({"continue": cont} if cont else {}))
                    page = (await self.request("GET", res.path(namespace), page_query)).body
                    items.extend(page.get("items") or [])
                    meta = page.get("metadata") or {}
                    cont = meta.get("continue") or None
                    if not cont:
                        return ListResult(items, str(meta.get("resourceVersion", "")))
            except Gone:
                continue  # the continue token expired: start the snapshot again
        raise ServerError(0, "list kept expiring while paging")

    async def create(
        self,
        res: Resource,
        body: dict[str, Any],
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> Response:
        """POST a new object."""
        query = {"dryRun": "All"} if dry_run else None
        return await self.request("POST", res.path(namespace), query, body)

    async def replace(
        self,
        res: Resource,
        name: str,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PUT an object (optimistic concurrency through ``metadata.resourceVersion``)."""
        return (await self.request("PUT", res.path(namespace, name, subresource), None, body)).body

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: dict[str, Any] | list[dict[str, Any]],
        namespace: str | None = None,
        patch_type: PatchType = "json",
        subresource: str | None = None,
        read_answer: bool = True,
    ) -> dict[str, Any]:
        """PATCH an object with a JSON Patch, merge patch or strategic merge patch; the
        object as patched, or ``{}`` with ``read_answer=False`` (the answer's body is
        not decoded: for a caller that needs only that the write landed)."""
        headers = {"Content-Type": _PATCH_CONTENT_TYPES[patch_type]}
        path = res.path(namespace, name, subresource)
        return (await self.request("PATCH", path, None, patch, headers, read_answer)).body

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        grace_period_s: int | None = None,
        uid: str | None = None,
    ) -> dict[str, Any]:
        """DELETE an object; ``uid`` is a precondition (409 if the name was reused)."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_s is not None:
            body["gracePeriodSeconds"] = grace_period_s
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        return (await self.request("DELETE", res.path(namespace, name), None, body)).body

    async def watch(
        self,
        res: Resource,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_s: int = 270,
        known: Callable[[bytes], WatchEvent | None] | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Stream watch events from ``resource_version`` until the server closes
        (``shared.gateway.threads.watch_on_thread``: read on a worker thread)."""
        stream = watch_on_thread(self, res, resource_version, namespace, label_selector, timeout_s)
        async for event in stream:
            yield event

    # --- plumbing -------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
        decode: bool = True,
    ) -> Response:
        """One HTTP call; JSON in and out (``decode=False``: a success's body is not
        decoded, ``answer``). A call the apiserver throttled is sent again after its
        ``Retry-After`` (``throttle_wait``)."""
        retries = 0
        while True:
            try:
                return await self._send(method, path, query, body, headers, decode)
            except TooManyRequests as exc:
                wait = throttle_wait(exc, retries)
                if wait is None:
                    raise
            await self._sleep(wait)
            retries += 1

    async def _send(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None,
        body: Any,
        headers: dict[str, str] | None,
        decode: bool = True,
    ) -> Response:
        """One HTTP call on a worker thread, bounded by the timeout."""
        loop = asyncio.get_running_loop()
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancel
            # that arrives as the call completes, and a cancelled cache task (a
            # standby's watch when it becomes leader) then never ends.
            async with asyncio.timeout(self._timeout_s + 1):
                return await loop.run_in_executor(
                    self._pool, self._call, method, path, query, body, headers, decode
                )
        except TimeoutError as exc:
            raise ServerError(0, f"{method} {path}: no answer within {self._timeout_s}s") from exc

    def _url_and_headers(
        self, method: str, path: str, query: dict[str, Any] | None, headers: dict[str, str] | None
    ) -> tuple[str, dict[str, str]]:
        root, auth = self.root_and_auth()
        url = root + path
        if query:
            url += "?" + urlencode(query)
        return url, {**auth, "Accept": "application/json", **(headers or {})}

    def root_and_auth(self) -> tuple[str, dict[str, str]]:
        """The API root URL and the headers every call carries (the client's default
        headers and authentication), asked of the client at most every
        ``AUTH_REUSE_S`` (worker threads may race to renew: each gets a whole pair)."""
        now = self._monotonic()
        base = self._base
        if base is None or now - base[0] >= AUTH_REUSE_S:
            _, root, hdrs, _, _ = self._api.param_serialize(
                "GET", "", header_params={}, auth_settings=["BearerToken"]
            )
            base = self._base = (now, root, dict(hdrs))
        return base[1], base[2]

    def _call(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None,
        body: Any,
        headers: dict[str, str] | None,
        decode: bool = True,
    ) -> Response:
        url, hdrs = self._url_and_headers(method, path, query, headers)
        data = encoded(body, hdrs)
        pool = self._api.rest_client.pool_manager

        def send() -> urllib3.BaseHTTPResponse:
            return pool.request(
                method, url, body=data, headers=hdrs, timeout=self._timeout_s, retries=False
            )

        try:
            try:
                resp = send()
            except urllib3.exceptions.ProtocolError:
                # A kept-alive connection the server closed as the request went out
                # ("Remote end closed connection without response"): a read is sent
                # once more, on a new connection; a write may have landed, and is not.
                if method != "GET":
                    raise
                resp = send()
        except urllib3.exceptions.HTTPError as exc:
            raise ServerError(0, f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        return answer(method, path, resp.status, resp.data, resp.headers, decode)
