"""The HTTP face of the emulator: one ASGI app over the cluster (Starlette requests and
responses, without Starlette's router and middleware: every path goes to one endpoint).

Every request is authenticated (bearer token → user; 401 otherwise, except health
and version), resolved to a resource, authorized by RBAC (403 Status), then handled.
Errors are ``Status`` bodies; admission and pruning warnings become ``Warning: 299``
headers; bodies over 3 MiB are a 413. GET and LIST answer as a Table when kubectl asks.

Every request pays this layer, so it stays thin: headers are read from the scope as
Starlette's ``Headers.get`` reads them (the first of a name, latin-1) without building a
``Headers`` per request, the body is read from ``receive`` directly, and a JSON answer
is a ``Response`` whose raw headers are built at once — the same two messages, headers
and order as Starlette's ``Response`` sends (tests/kube/test_request_path.py compares
them byte for byte).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

import yaml
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from sandbox.kube import (
    discovery,
    encoding,
    impersonate,
    paths,
    podlog,
    protobuf,
    reads,
    selfreviews,
    subresources,
    table,
    warnheaders,
)
from sandbox.kube.cluster import Call, Cluster, present
from sandbox.kube.deletes import delete
from sandbox.kube.errors import ApiError, bad_request, error, method_not_allowed, too_large
from sandbox.kube.patching import media_type, patch, patched_view
from sandbox.kube.rbac import Request as AuthzRequest
from sandbox.kube.timing import RequestTimes
from sandbox.kube.watch import EncodedLines, WatchPlan, encode_line, parse_bool
from sandbox.kube.writes import create, update

Obj = dict[str, Any]

#: Largest request body accepted (apiserver ``MaxRequestBodyBytes``).
MAX_BODY = 3 * 1024 * 1024
_PUBLIC = frozenset({"/healthz", "/readyz", "/livez", "/version"})
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
_ROUTED = frozenset([*_METHODS, "HEAD"])


def warning_header(text: str) -> str:
    """``299 - "<text>"`` with ``\\`` and ``"`` escaped (apimachinery ``NewWarningHeader``)."""
    return warnheaders.header_value(text)


def _json(body: Any, code: int = 200, warnings: list[str] | None = None) -> Response:
    return _encoded(encoding.encode(body), code, warnings)


class JsonAnswer(Response):
    """``Response(body, code, media_type="application/json")`` with each warning
    appended as a ``Warning`` header, its raw headers built directly (Starlette's
    ``__call__`` sends it): content-length (not for 1xx, 204 and 304, as Starlette),
    content-type, then the warnings (UTF-8, deduplicated and truncated as the
    apiserver does: ``warnheaders``)."""

    media_type = "application/json"

    def __init__(self, body: bytes, code: int = 200, warnings: list[str] | None = None) -> None:
        self.status_code = code
        self.body = body
        self.background = None
        raw: list[tuple[bytes, bytes]] = []
        if not (code < 200 or code in (204, 304)):
            raw.append((b"content-length", str(len(body)).encode("latin-1")))
        raw.append((b"content-type", b"application/json"))
        for value in warnheaders.headers(warnings) if warnings else ():
            raw.append((b"warning", value))
        self.raw_headers = raw


def _encoded(body: bytes, code: int = 200, warnings: list[str] | None = None) -> Response:
    return JsonAnswer(body, code, warnings)


def header(request: Request, name: bytes) -> str | None:
    """``request.headers.get(name)`` (``name`` lower-case) without building ``Headers``:
    the first header of that name, decoded as latin-1."""
    for key, value in request.scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _not_found() -> ApiError:
    return error(404, "NotFound", "the server could not find the requested resource", {})


async def read_body(request: Request) -> bytes:
    """The request body, refusing more than 3 MiB with 413 (``ClientDisconnect`` when
    the client goes away first, as ``Request.stream`` raises)."""
    length = header(request, b"content-length")
    if length and length.isdigit() and int(length) > MAX_BODY:
        raise too_large()
    chunks, total = [], 0
    receive = request.receive
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        if message["type"] != "http.request":
            continue
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > MAX_BODY:
            raise too_large()
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def decode_body(raw: bytes, content_type: str | None) -> Any:
    """JSON (or YAML) request body; empty → ``None``."""
    if not raw.strip():
        return None
    if media_type(content_type) == protobuf.PROTOBUF:
        return protobuf.decode(raw)
    try:
        if "yaml" in media_type(content_type):
            loaded = encoding.refuse_non_finite(yaml.safe_load(raw.decode()))
            return encoding.replace_lone_surrogates(loaded)
        return encoding.decode(raw)
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"couldn't get version/kind; json parse error: {exc}") from exc


class Api:
    """Request dispatch over one cluster."""

    def __init__(self, cluster: Cluster, address: Callable[[], str]) -> None:
        self.cluster = cluster
        self.address = address
        self.bookmark_interval = 5.0
        self._objects = encoding.ObjectBytes()
        self._lines = EncodedLines(self._objects)
        #: Answer times by method, when a benchmark asked for them.
        self.times: RequestTimes | None = None

    def app(self) -> ASGIApp:
        """The ASGI application."""
        return self.asgi

    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every HTTP request to ``endpoint``, as Starlette's one catch-all route did: a
        method outside ``_METHODS`` (HEAD goes with GET) is a plain-text 405, and an
        unexpected error a plain-text 500 (then raised for the server to log)."""
        if scope["type"] != "http":
            return
        if self.times is not None:
            send = self.times.timed(scope, send)
        if scope["method"] not in _ROUTED:
            allowed = {"Allow": ", ".join(sorted(_ROUTED))}
            await PlainTextResponse("Method Not Allowed", 405, allowed)(scope, receive, send)
            return
        try:
            response = await self.endpoint(Request(scope, receive))
        except Exception:
            await PlainTextResponse("Internal Server Error", 500)(scope, receive, send)
            raise
        await response(scope, receive, send)

    async def endpoint(self, request: Request) -> Response:
        warnings: list[str] = []
        try:
            return await self._dispatch(request, warnings)
        except ApiError as exc:
            return _json(exc.status, exc.code, warnings)

    async def _dispatch(self, request: Request, warnings: list[str]) -> Response:
        path = request.scope["path"].rstrip("/") or "/"
        if path in ("/healthz", "/readyz", "/livez"):
            return PlainTextResponse("ok")
        if path == "/version":
            return _json(discovery.VERSION)
        user = self.cluster.authn.authenticate(header(request, b"authorization"))
        user = impersonate.acting_as(request.scope["headers"], user, self.cluster.authz)
        if request.method == "GET" and (doc := self._discovery(path)) is not None:
            return _json(doc)
        if (review := selfreviews.route(path)) is not None:
            if request.method != "POST":
                raise method_not_allowed()
            body = decode_body(await read_body(request), header(request, b"content-type"))
            return _json(selfreviews.answer(review, body, user, self.cluster.authz), 201)
        target = paths.parse(self.cluster.registry, path)
        if target is None:
            raise _not_found()
        query = dict(request.query_params) if request.scope.get("query_string") else {}
        watch = parse_bool(query.get("watch"), "watch")
        verb = paths.verb(request.method, target, watch)
        authz = AuthzRequest(
            user,
            verb,
            target.rtype.group,
            target.rtype.plural,
            target.subresource,
            target.namespace,
            target.name,
        )
        self.cluster.authz.check(authz)
        call = Call(
            target.rtype,
            self.cluster.strategy(target.rtype),
            user,
            target.namespace,
            target.name,
            target.subresource,
            query,
            warnings,
        )
        return await self._handle(request, call, verb)

    def _discovery(self, path: str) -> Obj | None:
        registry = self.cluster.registry
        parts = [p for p in path.split("/") if p]
        if path == "/api":
            return discovery.api_versions(self.address())
        if path == "/apis":
            return discovery.api_group_list(registry)
        if path == "/openapi/v3":
            return discovery.openapi_index(registry)
        if parts[:2] == ["openapi", "v3"]:
            split = paths.split_group_version(parts[2:])
            doc = (
                discovery.openapi_document(registry, split[0], split[1])
                if split and not split[2]
                else None
            )
            if doc is None:
                raise _not_found()
            return doc
        if len(parts) == 2 and parts[0] == "api":
            return discovery.resource_list(registry, "", parts[1]) or _missing()
        if len(parts) == 2 and parts[0] == "apis":
            return discovery.api_group(registry, parts[1]) or _missing()
        if len(parts) == 3 and parts[0] == "apis":
            return discovery.resource_list(registry, parts[1], parts[2]) or _missing()
        return None

    async def _handle(self, request: Request, call: Call, verb: str) -> Response:
        accept = header(request, b"accept")
        if verb == "get" and call.subresource == "scale":
            return _json(subresources.get_scale(self.cluster, call))
        if verb == "get" and call.subresource == "log" and podlog.follows(call):
            podlog.read(self.cluster, call)  # errors before the stream starts
            return StreamingResponse(podlog.stream(self.cluster, call), media_type="text/plain")
        if verb == "get" and call.subresource == "log":
            return PlainTextResponse(podlog.read(self.cluster, call))
        if verb == "get":
            if call.subresource not in ("", "status", "ephemeralcontainers"):
                raise method_not_allowed()
            if table.wants_table(accept):
                return self._render(request, call, [reads.get(self.cluster, call)], single=True)
            return self._shown(call, reads.get(self.cluster, call))
        if verb == "list":
            rv, items, cont = reads.collection(self.cluster, call)
            if table.wants_table(accept):
                shown = [present(call, o) for o in items]
                body = table.table(
                    call.rtype, shown, self.cluster.now(), call.query.get("includeObject", "")
                )
                body["metadata"] = {
                    "resourceVersion": str(rv),
                    **({"continue": cont} if cont else {}),
                }
                return _json(body)
            return _json(reads.list_body(call, rv, items, cont))
        if verb == "watch":
            return self._watch(call, table.wants_table(accept))
        raw = await read_body(request)
        content_type = header(request, b"content-type")
        if call.subresource == "scale" and verb in ("patch", "update"):
            current = subresources.scale_view(self.cluster, call)
            if verb == "patch":
                scale = patched_view(call, current, raw, content_type)
            else:
                scale = decode_body(raw, content_type)
            answer = await subresources.write_scale(self.cluster, call, scale)
            return _json(answer, 200, call.warnings)
        if verb == "patch":
            code, obj = await patch(self.cluster, call, raw, content_type)
            return self._shown(call, obj, code)
        body = decode_body(raw, content_type)
        return await self._write(call, verb, body)

    async def _write(self, call: Call, verb: str, body: Any) -> Response:
        cluster = self.cluster
        if verb == "create" and call.subresource == "binding":
            return _json(await subresources.bind(cluster, call, body), 201, call.warnings)
        if verb == "create" and call.subresource == "eviction":
            return _json(await subresources.evict(cluster, call, body), 201, call.warnings)
        if verb == "create" and not call.name:
            return self._shown(call, await create(cluster, call, body), 201)
        if verb == "update" and call.name:
            code, obj = await update(cluster, call, body)
            return self._shown(call, obj, code)
        if verb == "delete":
            return _json(await delete(cluster, call, body), 200, call.warnings)
        if verb == "deletecollection":
            return _json(await self._delete_collection(call, body), 200, call.warnings)
        raise method_not_allowed()

    async def _delete_collection(self, call: Call, body: Any) -> Obj:
        _, items, _ = reads.collection(
            self.cluster,
            Call(
                call.rtype,
                call.strategy,
                call.user,
                call.namespace,
                "",
                "",
                {k: v for k, v in call.query.items() if k != "limit"},
                call.warnings,
            ),
        )
        deleted = []
        for item in items:
            meta = item["metadata"]
            one = Call(
                call.rtype,
                call.strategy,
                call.user,
                meta.get("namespace", ""),
                meta["name"],
                "",
                call.query,
                call.warnings,
            )
            await delete(self.cluster, one, body)
            deleted.append(present(call, item))
        return reads.list_body(call, self.cluster.store.resource_version, [], "") | {
            "items": deleted
        }

    def _shown(self, call: Call, obj: Obj, code: int = 200) -> Response:
        """The answer showing one object of the call's resource: when ``obj`` is the
        stored state itself (a GET or write of a resource showing it as stored), its
        encoding is shared with the watch events of that state and later GETs."""
        group, plural = call.rtype.store_key
        name = (obj.get("metadata") or {}).get("name") or ""
        if self.cluster.store.peek(group, plural, call.namespace, name) is obj:
            return _encoded(self._objects.of(obj), code, call.warnings)
        return _json(obj, code, call.warnings)

    def _render(self, request: Request, call: Call, objs: list[Obj], single: bool) -> Response:
        if table.wants_table(header(request, b"accept")):
            return _json(
                table.table(
                    call.rtype, objs, self.cluster.now(), call.query.get("includeObject", "")
                )
            )
        return _json(objs[0] if single else objs)

    def _watch(self, call: Call, as_table: bool) -> Response:
        plan = WatchPlan(self.cluster, call, self.bookmark_interval)
        include = call.query.get("includeObject", "")

        view = (call.rtype.api_version, call.rtype.kind)

        async def lines() -> AsyncIterator[bytes]:
            first = True
            async for kind, obj, change in plan.events():
                if kind not in ("ADDED", "MODIFIED", "DELETED"):
                    yield encode_line(kind, obj)
                elif as_table:
                    shown = table.table(
                        call.rtype, [present(call, obj)], self.cluster.now(), include, headers=first
                    )
                    first = False
                    yield encode_line(kind, shown)
                elif change is not None:
                    yield self._lines.line(change, kind, view, partial(present, call, obj))
                else:
                    yield encode_line(kind, present(call, obj))

        return StreamingResponse(lines(), media_type="application/json")


def _missing() -> Obj:
    raise _not_found()
