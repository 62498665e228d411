"""The one gateway to the Kubernetes API.

The official client is synchronous; every call here runs on a worker thread with an
explicit timeout and returns plain dicts (the client's generated models never leak
out). Errors come back as our classes from ``shared.errors`` — nothing else escapes.
The gateway speaks the REST API generically (any group/version/resource), using the
client only for configuration (kubeconfig or in-cluster), authentication and TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Self
from urllib.parse import urlencode

import kubernetes.client
import kubernetes.config
import urllib3

from shared import jsontext
from shared.errors import Gone, KubeError, ServerError, TooManyRequests, from_status
from shared.logs import log
from shared.resources import Resource

if TYPE_CHECKING:
    from shared.settings import CommonSettings

_log = logging.getLogger(__name__)

#: The official client's configuration (other modules name it through this alias).
Configuration = kubernetes.client.Configuration

PatchType = Literal["json", "merge", "strategic"]

_PATCH_CONTENT_TYPES: dict[str, str] = {
    "json": "application/json-patch+json",
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}

#: How the official loader splits a list of kubeconfig files (``$KUBECONFIG``'s form).
KUBECONFIG_SEPARATOR: str = kubernetes.config.kube_config.ENV_KUBECONFIG_PATH_SEPARATOR

#: Seconds a single non-watch call may take before it counts as failed.
DEFAULT_TIMEOUT_S = 10.0
#: Page size of LISTs.
LIST_PAGE_SIZE = 500
#: Watch events buffered between the reading thread and the consumer.
WATCH_BUFFER = 4096


@dataclass(frozen=True)
class WatchEvent:
    """One watch event: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    object: dict[str, Any]


@dataclass
class ListResult:
    """All items of a LIST and the resourceVersion to resume a watch from."""

    items: list[dict[str, Any]]
    resource_version: str


@dataclass
class Response:
    """A decoded answer, with the apiserver's ``Warning`` header texts."""

    body: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Endpoint:
    """The configuration's connection facts, for a client other than the official one."""

    #: The API root URL as configured (``https://host:port[/prefix]``).
    root: str
    #: The CA bundle file to verify the server against (None: the system's).
    ca_file: str | None
    #: The client certificate and key files, when the kubeconfig has them.
    cert_file: str | None
    key_file: str | None
    #: False when the kubeconfig says ``insecure-skip-tls-verify``.
    verify: bool
    #: False when the configuration turns the hostname check off.
    check_hostname: bool
    #: The name to present (SNI) and verify instead of the URL's host, if any.
    server_name: str | None
    #: True when calls must go through an HTTP proxy.
    proxied: bool


def load_configuration(
    kubeconfig: str | Sequence[str] | None = None, context: str | None = None
) -> kubernetes.client.Configuration:
    """Client configuration from kubeconfig files, else in-cluster credentials.

    ``kubeconfig`` is one file or several (``$KUBECONFIG``'s list), merged by the
    official loader: the first file that names a cluster, context or user wins.
    ``context`` picks the context (None: the merged ``current-context``). Files are
    never written back (a refreshed token stays in memory)."""
    cfg = kubernetes.client.Configuration()
    if kubeconfig:
        files = [kubeconfig] if isinstance(kubeconfig, str) else list(kubeconfig)
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=KUBECONFIG_SEPARATOR.join(files),
            context=context,
            client_configuration=cfg,
            persist_config=False,
        )
    else:
        kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=cfg
        )
    return cfg


def strict_verification(context: ssl.SSLContext, strict: bool) -> ssl.SSLContext:
    """Turn OpenSSL's strict X.509 checks on or off in ``context`` (K8S_TLS_STRICT_VERIFY).

    Strict is what Python 3.13 does by default and what we ask on every Python: among
    other checks, each certificate the chain runs through must carry an Authority Key
    Identifier. Off only relaxes those checks — the chain is still verified against the
    CA, dates still apply and the host name is still matched."""
    if strict:
        context.verify_flags |= ssl.VERIFY_X509_STRICT
    else:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


def encoded(body: Any, headers: dict[str, str]) -> bytes | None:
    """A call's body as JSON bytes (None without one), setting ``headers``' content type
    unless the caller chose one (a patch's). Compact (``shared.jsontext``: a claim's JSON
    Patch ≈ 11 → 0.7 µs against ``json.dumps``); instants and dataclasses refused as
    ``json.dumps`` refuses them; a number that is not finite sent as ``null``
    (``json.dumps`` wrote ``NaN``, which no API server accepts)."""
    if body is None:
        return None
    headers.setdefault("Content-Type", "application/json")
    return jsontext.compact(body)


#: Times one call the apiserver throttled (429 with a ``Retry-After``) is sent again.
THROTTLE_RETRIES = 3
#: The longest wait honoured from one ``Retry-After``, in seconds (a larger one is cut
#: to it, so a throttled call gives up within a bounded time and its caller decides).
THROTTLE_WAIT_CAP_S = 5.0


def retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` header's delay in seconds; None when absent or not a whole
    non-negative number of seconds (the apiserver sends only that form; an HTTP date or
    anything malformed is not honoured)."""
    text = (value or "").strip()
    return float(text) if text.isascii() and text.isdigit() else None


def throttle_wait(error: KubeError, retries: int) -> float | None:
    """Seconds to wait before sending a call again after ``error``, when ``retries``
    retries were made already; None to give up and raise it (no side effects).

    Only a 429 carrying a readable ``Retry-After`` is retried (the apiserver throttled
    the request before doing anything, so any verb may be sent again; client-go does
    the same), at most ``THROTTLE_RETRIES`` times, each wait capped at
    ``THROTTLE_WAIT_CAP_S``."""
    if not isinstance(error, TooManyRequests) or error.retry_after_s is None:
        return None
    if retries >= THROTTLE_RETRIES:
        return None
    return min(error.retry_after_s, THROTTLE_WAIT_CAP_S)


def failure(status: int, body: bytes, headers: Any) -> KubeError:
    """Our error for an HTTP answer, a 429 with its ``Retry-After``."""
    error = from_status(status, body)
    if isinstance(error, TooManyRequests):
        error.retry_after_s = retry_after_s(headers.get("Retry-After"))
    return error


def answer(
    method: str, path: str, status: int, data: bytes, headers: Any, decode: bool = True
) -> Response:
    """The decoded answer to a call, or our error for it (either client's answer:
    ``headers`` has ``get`` and ``getlist``). ``decode=False``: a success's body is not
    decoded (an empty body comes back) — for a caller that needs only that the call
    succeeded; an error is decoded as always."""
    if status >= 300:
        raise failure(status, data, headers)
    if not decode:
        return Response({}, _warnings(headers.getlist("Warning")))
    try:
        decoded = json.loads(data) if data else {}
    except ValueError as exc:
        raise ServerError(status, f"{method} {path}: answer is not JSON") from exc
    if not isinstance(decoded, dict):
        raise ServerError(status, f"{method} {path}: answer is not a JSON object")
    return Response(decoded, _warnings(headers.getlist("Warning")))


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
        """Stream watch events from ``resource_version`` until the server closes.

        Bookmarks are requested and yielded (type BOOKMARK) so a caller can resume from
        them. A 410 (as an HTTP status or an ERROR event) raises ``Gone``: relist.
        ``known`` (a line recognised before it is decoded, ``shared.watch.Watched.peek``)
        is honoured by ``LoopGateway`` only: here every line is decoded on the thread.
        """
        query = watch_query(resource_version, label_selector, timeout_s)
        loop = asyncio.get_running_loop()
        # Unbounded on the loop side so a delivery never blocks or fails there; the
        # thread waits on ``room`` instead, which bounds what is buffered.
        queue: asyncio.Queue[WatchEvent | KubeError | None] = asyncio.Queue()
        room = threading.Semaphore(WATCH_BUFFER)
        stop = threading.Event()
        resp_box: list[urllib3.BaseHTTPResponse] = []

        def deliver(item: WatchEvent | KubeError | None) -> bool:
            """Hand ``item`` to the consumer; False once it has gone away."""
            while not room.acquire(timeout=0.5):
                if stop.is_set():
                    return False
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the consumer's loop is closed
                return False
            return True

        def pump() -> None:
            try:
                for event in self._stream(res.path(namespace), query, timeout_s, resp_box, stop):
                    if not deliver(event):
                        return
            except KubeError as exc:
                deliver(exc)
            except Exception as exc:  # any other failure must reach the consumer, not vanish
                deliver(ServerError(0, f"watch {res.plural} failed: {type(exc).__name__}: {exc}"))
            finally:
                deliver(None)

        thread = threading.Thread(target=pump, name="kube-watch", daemon=True)
        thread.start()
        try:
            while True:
                item = await queue.get()
                room.release()
                if item is None:
                    return
                if isinstance(item, KubeError):
                    raise item
                yield item
        finally:
            stop.set()
            for resp in resp_box:
                # The stream may already have released the connection to the pool.
                with contextlib.suppress(RuntimeError):
                    resp.shutdown() if hasattr(resp, "shutdown") else resp.release_conn()

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
        try:
            resp = self._api.rest_client.pool_manager.request(
                method, url, body=data, headers=hdrs, timeout=self._timeout_s, retries=False
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ServerError(0, f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        return answer(method, path, resp.status, resp.data, resp.headers, decode)

    def _stream(
        self,
        path: str,
        query: dict[str, Any],
        timeout_s: int,
        resp_box: list[urllib3.BaseHTTPResponse],
        stop: threading.Event,
    ) -> Iterator[WatchEvent]:
        url, hdrs = self._url_and_headers("GET", path, query, None)
        try:
            resp = self._api.rest_client.pool_manager.request(
                "GET",
                url,
                headers=hdrs,
                preload_content=False,
                timeout=urllib3.Timeout(connect=self._timeout_s, read=timeout_s + 30),
                retries=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ServerError(0, f"watch {path}: {type(exc).__name__}: {exc}") from exc
        resp_box.append(resp)
        if resp.status >= 300:
            raise failure(resp.status, resp.read(), resp.headers)
        buffer = b""
        try:
            for chunk in resp.stream(64 * 1024, decode_content=True):
                if stop.is_set():
                    return
                lines, buffer = watch_lines(buffer, chunk)
                yield from map(watch_event, lines)
        except urllib3.exceptions.HTTPError as exc:
            if not stop.is_set():
                raise ServerError(0, f"watch {path} broke: {type(exc).__name__}") from exc
        finally:
            resp.release_conn()


def watch_query(
    resource_version: str, label_selector: str | None, timeout_s: int
) -> dict[str, Any]:
    """The query of a watch from ``resource_version`` (bookmarks asked for)."""
    query: dict[str, Any] = {
        "watch": "true",
        "resourceVersion": resource_version,
        "allowWatchBookmarks": "true",
        "timeoutSeconds": timeout_s,
    }
    if label_selector:
        query["labelSelector"] = label_selector
    return query


def watch_lines(buffer: bytes, chunk: bytes) -> tuple[list[bytes], bytes]:
    """The complete, non-blank lines of ``buffer + chunk`` and the incomplete rest."""
    *lines, rest = (buffer + chunk).split(b"\n")
    return [line for line in lines if line.strip()], rest


def watch_event(line: bytes) -> WatchEvent:
    """One watch line decoded; an ERROR event raises its error (410: ``Gone``)."""
    try:
        raw = json.loads(line)
    except ValueError as exc:
        raise ServerError(0, "watch stream carried a line that is not JSON") from exc
    kind = str(raw.get("type", ""))
    obj = raw.get("object") or {}
    if kind == "ERROR":
        err = from_status(int(obj.get("code", 500) or 500), obj)
        raise err
    return WatchEvent(kind, obj)


def _warnings(values: list[str]) -> list[str]:
    """The texts of ``Warning: 299 - "<text>"`` headers (RFC 9111 §5.5 quoted strings:
    ``\\"`` and ``\\\\`` unescaped); a header that is not in that form is kept whole."""
    return [_warning_text(value) for value in values]


def _warning_text(value: str) -> str:
    parts = value.split(" ", 2)
    if len(parts) < 3 or not parts[2].startswith('"'):
        return value.strip()
    text: list[str] = []
    chars = iter(parts[2][1:])
    for char in chars:
        if char == "\\":
            text.append(next(chars, ""))
        elif char == '"':
            break
        else:
            text.append(char)
    return "".join(text)
