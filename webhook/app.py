"""The two Starlette applications: ``POST /mutate`` (TLS) and health/metrics (plain).

``/mutate`` reads at most ``max_body_bytes`` (a larger body is refused with 400 before
it is read whole) and hands the bytes to ``Admission.review``. The health app answers
``/healthz`` (the process is alive), ``/readyz`` (a certificate is loaded and the
GPUReservation cache has synced — until then the apiserver's ``failurePolicy:
Ignore`` lets pods through unadmitted) and ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from webhook.handler import Admission
from webhook.review import allowed_json

MEDIA_JSON = "application/json"

CONTENT_TYPE_METRICS = "text/plain; version=0.0.4; charset=utf-8"


def json_response(doc: dict[str, Any], status_code: int = 200) -> Response:
    """``doc`` as a JSON response."""
    return JSONResponse(doc, status_code=status_code)


class TooLarge(Exception):
    """The request body is over the limit."""


def _declared_length(request: Request) -> bytes:
    for name, value in request.scope["headers"]:
        if name == b"content-length":
            return bytes(value)
    return b""


async def _read_limited(request: Request, limit: int) -> bytes:
    """The body, refused (``TooLarge``) as soon as it is known to exceed ``limit``:
    from a declared length before reading, else while reading. Read from the ASGI
    channel itself (``Request.stream``'s generator and header map cost ~5 µs a
    request); a client gone mid-body raises ``ClientDisconnect`` as ``stream`` does."""
    declared = _declared_length(request)
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge
    chunks, size = [], 0
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def mutate_app(admission: Admission, max_body_bytes: int) -> Starlette:
    """The TLS-served app: ``POST /mutate``."""

    async def mutate(request: Request) -> Response:
        try:
            body = await _read_limited(request, max_body_bytes)
        except TooLarge:
            admission.metrics.requests.labels("malformed").inc()
            return json_response({"error": "request body too large"}, status_code=400)
        status, doc = await admission.review(body)
        encoded = allowed_json(doc) if status == 200 else None
        if encoded is not None:  # the same bytes and headers as json_response's
            return Response(encoded, media_type=MEDIA_JSON)
        return json_response(doc, status_code=status)

    return Starlette(routes=[Route("/mutate", mutate, methods=["POST"])])


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
