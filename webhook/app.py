"""The two Starlette applications: ``POST /mutate`` (TLS) and health/metrics (plain).

``/mutate`` reads at most ``max_body_bytes`` (a larger body is refused with 400 before
it is read whole) and hands the bytes to ``Admission.review``. It is a plain ASGI
endpoint (``Mutate``) that the app calls before its middleware and router
(``MutateApp``): a POST to ``/mutate`` — every request the API server sends — meets
none of Starlette's per-request layers (the error and exception middlewares, the
router's matching, ``request_response``'s ``Request`` and exception wrapper), which
cost about a fifth of a no-change answer's CPU. Every other request goes through
Starlette as before (405 for another method on ``/mutate``, 404 elsewhere). The health
app answers ``/healthz`` (the process is alive), ``/readyz`` (a certificate is loaded
and the GPUReservation and node caches have synced — until then the apiserver's ``failurePolicy:
Ignore`` lets pods through unadmitted) and ``/metrics``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from shared.logs import log
from webhook.handler import Admission
from webhook.review import answer_json

MEDIA_JSON = "application/json"
MUTATE_PATH = "/mutate"

CONTENT_TYPE_METRICS = "text/plain; version=0.0.4; charset=utf-8"

_log = logging.getLogger(__name__)

#: The content types of ``Mutate``'s answers, as Starlette's response classes send them.
_JSON_TYPE = MEDIA_JSON.encode()
_TEXT_TYPE = b"text/plain; charset=utf-8"
_TOO_LARGE = answer_json({"error": "request body too large"})
_FAILED = b"Internal Server Error"


def json_response(doc: dict[str, Any], status_code: int = 200) -> Response:
    """``doc`` as a JSON response."""
    return JSONResponse(doc, status_code=status_code)


#: ``reviews_refused_total``'s reason for a body over the limit.
TOO_LARGE = "too_large"


class TooLarge(Exception):
    """The request body is over the limit: ``size`` is its declared length, else the
    bytes read when it passed the limit."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class Gone(Exception):
    """The client went away before its body was read whole (nothing to answer)."""


def _declared_length(scope: Scope) -> bytes:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return bytes(value)
    return b""


async def _read_limited(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The body, refused (``TooLarge``) as soon as it is known to exceed ``limit``:
    from a declared length before reading, else while reading. Read from the ASGI
    channel itself; a client gone mid-body raises ``Gone``."""
    declared = _declared_length(scope)
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge(int(declared))
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Gone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge(size)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class Mutate:
    """``POST /mutate`` as a plain ASGI app (Starlette runs an endpoint that is not a
    function as one): the body read within the limit, the review, its answer sent as
    ``json_response`` would send it (the same bytes and headers).

    The answer is made whole before anything is sent, so every failure has one
    answer: a body over the limit 400, a malformed review 400 (``Admission.review``),
    an exception from anywhere in the review 500 ``Internal Server Error`` (as
    Starlette's error middleware answers it) logged as ``webhook.request_failed`` with
    its traceback — the review itself answers its own internal errors fail-open, so
    this is the last resort — and a client gone before its body arrived nothing."""

    def __init__(self, admission: Admission, max_body_bytes: int) -> None:
        self.admission = admission
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            status, body, media = await self._answer(scope, receive)
        except Gone:
            return
        headers = [(b"content-length", str(len(body)).encode()), (b"content-type", media)]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _answer(self, scope: Scope, receive: Receive) -> tuple[int, bytes, bytes]:
        admission = self.admission
        try:
            body = await _read_limited(scope, receive, self.max_body_bytes)
        except TooLarge as exc:
            admission.refused(TOO_LARGE, exc.size, "request body too large")
            return 400, _TOO_LARGE, _JSON_TYPE
        try:
            status, doc = await admission.review(body)
            encoded = answer_json(doc)
        except Exception:
            log(_log, logging.ERROR, "webhook.request_failed", exc_info=True)
            return 500, _FAILED, _TEXT_TYPE
        return status, encoded, _JSON_TYPE


class MutateApp(Starlette):
    """The TLS-served app: ``POST /mutate`` straight to ``Mutate``; anything else
    through Starlette's middleware and router (where ``/mutate`` is a POST route)."""

    def __init__(self, mutate: Mutate) -> None:
        super().__init__(routes=[Route(MUTATE_PATH, mutate, methods=["POST"])])
        self.mutate = mutate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == MUTATE_PATH and scope["method"] == "POST":
            await self.mutate(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def mutate_app(admission: Admission, max_body_bytes: int) -> MutateApp:
    """The TLS-served app: ``POST /mutate``."""
    return MutateApp(Mutate(admission, max_body_bytes))


def health_app(admission: Admission, tls_loaded: Callable[[], bool]) -> Starlette:
    """The plain-HTTP app: ``/healthz``, ``/readyz``, ``/metrics``."""

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> Response:
        problems = []
        if not tls_loaded():
            problems.append("no certificate loaded")
        if not admission.cache.synced:
            problems.append("reservation cache not synced")
        if admission.nodes is not None and not admission.nodes.synced:
            problems.append("node cache not synced")
        if problems:
            return PlainTextResponse("; ".join(problems), status_code=503)
        return PlainTextResponse("ready")

    async def metrics(request: Request) -> Response:
        admission.metrics.cache_age.set(admission.cache.age_s())
        return Response(admission.metrics.render(), media_type=CONTENT_TYPE_METRICS)

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
        ]
    )
