"""The reconciler's HTTP API, served by every replica on HTTP_PORT.

``GET /health`` — 200 ``{"status": "ok", "leader": …}`` while every guarded task
runs and every running watch can LIST; 503 naming each crashed or exited task, and
(``unsynced``) each watched resource whose LIST/WATCH has kept failing for
``reconciler.base.caches.STALL_S`` seconds (a cache that never syncs, e.g. an RBAC
refusal of its LIST). ``GET /metrics`` — Prometheus text.
``POST /api/reservations/push`` — the inbound push (``reconciler.mirror.push``).
``GET /api/forecast/preemption-risk[?namespace=]`` — the preemption-risk forecast
(``reconciler.preemption.forecast``); same bearer token as the push; 503 while the token is
unset or this replica's pod/node picture is unknown.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reconciler.base.metrics import Metrics
from reconciler.base.tasks import Tasks
from reconciler.mirror import push
from reconciler.mirror.sync import Syncer
from reconciler.preemption.forecast import Forecaster
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
    forecast: Forecaster | None = None
    #: Resources whose watch has kept failing too long (``Caches.stalled``).
    stalled: Callable[[], list[str]] = list


def build_app(state: HttpState) -> Starlette:
    """The Starlette application over ``state``."""

    async def health(request: Request) -> Response:
        _export_task_failures(state)
        body: dict[str, object] = {"status": "ok", "leader": state.is_leader()}
        stalled = state.stalled()
        if state.tasks.healthy and not stalled:
            return JSONResponse(body)
        body.update(status="unhealthy", failed=dict(state.tasks.failed))
        if stalled:
            body["unsynced"] = stalled
        return JSONResponse(body, status_code=503)

    async def metrics(request: Request) -> Response:
        _export_task_failures(state)
        return Response(state.metrics.render(), media_type=_PROMETHEUS_TEXT)

    async def push_api(request: Request) -> Response:
        response = await _push(state, request)
        state.metrics.pushes.labels(str(response.status_code)).inc()
        return response

    async def forecast_api(request: Request) -> Response:
        return _forecast(state, request)

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/api/reservations/push", push_api, methods=["POST"]),
            Route("/api/forecast/preemption-risk", forecast_api, methods=["GET"]),
        ]
    )


def _refused(state: HttpState, request: Request, event: str) -> Response | None:
    """The inbound APIs' shared gate: 503 without a token, 401 without the right one."""
    if state.inbound_token is None:
        return JSONResponse({"detail": push.DISABLED}, status_code=503)
    if not push.authorised(request.headers.get("authorization"), state.inbound_token):
        log(_log, logging.WARNING, event, client=_client(request))
        return JSONResponse(
            {"detail": push.UNAUTHORISED},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    return None


def _forecast(state: HttpState, request: Request) -> Response:
    refused = _refused(state, request, "forecast.unauthorised")
    if refused is not None:
        return refused
    namespace = request.query_params.get("namespace") or None
    body = state.forecast(namespace) if state.forecast is not None else None
    if body is None:
        return JSONResponse(
            {"detail": "Forecast unavailable: the pod or node state is not known yet"},
            status_code=503,
        )
    return JSONResponse(body)


async def _push(state: HttpState, request: Request) -> Response:
    refused = _refused(state, request, "push.unauthorised")
    if refused is not None:
        return refused
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
