"""The reconciler's HTTP API, served by every replica on HTTP_PORT.

``GET /health`` — 200 ``{"status": "ok", "leader": …}`` while every guarded task
runs; 503 naming each crashed or exited task. ``GET /metrics`` — Prometheus text.
``POST /api/reservations/push`` — the inbound push (``reconciler.push``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reconciler import push
from reconciler.metrics import Metrics
from reconciler.sync import Syncer
from reconciler.tasks import Tasks
from shared.errors import KubeError
from shared.logs import log
from shared.settings import SecretStr

_log = logging.getLogger(__name__)
_PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class HttpState:
    """What the handlers read."""

    tasks: Tasks
    metrics: Metrics
    syncer: Syncer
    inbound_token: SecretStr | None
    is_leader: Callable[[], bool]


def build_app(state: HttpState) -> Starlette:
    """The Starlette application over ``state``."""

    async def health(request: Request) -> Response:
        _export_task_failures(state)
        body: dict[str, object] = {"status": "ok", "leader": state.is_leader()}
        if state.tasks.healthy:
            return JSONResponse(body)
        body.update(status="unhealthy", failed=dict(state.tasks.failed))
        return JSONResponse(body, status_code=503)

    async def metrics(request: Request) -> Response:
        _export_task_failures(state)
        return Response(state.metrics.render(), media_type=_PROMETHEUS_TEXT)

    async def push_api(request: Request) -> Response:
        response = await _push(state, request)
        state.metrics.pushes.labels(str(response.status_code)).inc()
        return response

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/api/reservations/push", push_api, methods=["POST"]),
        ]
    )


async def _push(state: HttpState, request: Request) -> Response:
    if state.inbound_token is None:
        return JSONResponse({"detail": push.DISABLED}, status_code=503)
    if not push.authorised(request.headers.get("authorization"), state.inbound_token):
        log(_log, logging.WARNING, "push.unauthorised", client=_client(request))
        return JSONResponse(
            {"detail": push.UNAUTHORISED},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    try:
        entries = push.parse_body(await request.body())
    except push.BadPush as exc:
        log(_log, logging.WARNING, "push.rejected", error=str(exc))
        return JSONResponse({"detail": str(exc)}, status_code=422)
    try:
        result = await push.apply(state.syncer, entries)
    except KubeError as exc:
        log(_log, logging.ERROR, "push.failed", error=str(exc))
        return JSONResponse({"detail": "the cluster could not be reached"}, status_code=503)
    return JSONResponse(result.as_json())


def _client(request: Request) -> str | None:
    return request.client.host if request.client else None


def _export_task_failures(state: HttpState) -> None:
    for name in state.tasks.failed:
        state.metrics.task_failures.labels(name).set(1)
