"""The contract's endpoints (reservation-api.md §2), behind service-key authentication.

``X-API-Key`` missing, malformed, unknown or revoked ⇒ 401; a ``read_only`` key on a
``POST`` ⇒ 403 (§1.3, §5 items 11–12). ``X-Client-Trace`` is accepted and ignored.
Changes made through these endpoints are not pushed: the caller (the controller)
already has the answer.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandbox.app import listing, operations, policies
from sandbox.app.bodies import (
    AdmissionBody,
    CancelBody,
    LeaseBody,
    OverstayBody,
    StubBody,
    VictimsBody,
)
from sandbox.app.emulator import Emulator, answers, path_int, read_json
from sandbox.app.errors import AppError, parse_body
from sandbox.app.serialize import class_json, group_json, overstay_json
from sandbox.app.state import ServiceKey
from sandbox.app.timeutil import local_date, utc_text
from shared.appclient.models import KeyScope


def authenticate(emulator: Emulator, request: Request, write: bool) -> ServiceKey:
    """The caller's key, or the 401/403 the app answers."""
    key = emulator.state.keys.get(request.headers.get("x-api-key", ""))
    if key is None or key.revoked:
        raise AppError(401, "Invalid or missing API key")
    if write and key.scope != KeyScope.READ_WRITE:
        raise AppError(403, "This API key is read-only")
    return key


def _create_body(data: Any) -> LeaseBody | StubBody:
    """Tell the lease shape from the stub shape; a body that is neither is a web booking,
    which needs a user session (403 for a key)."""
    if not isinstance(data, dict):
        raise AppError(422, [{"loc": ["body"], "msg": "expected an object", "type": "dict_type"}])
    if data.get("best_effort") is True:
        if data.get("on_demand") is True or "duration_seconds" in data:
            detail = "A best-effort request carries neither on_demand nor duration_seconds."
            raise AppError(422, detail)
        return parse_body(StubBody, data)
    if data.get("on_demand") is True:
        return parse_body(LeaseBody, data)
    raise AppError(403, "Web bookings need a user session; service keys may create leases only.")


def api_routes(emu: Emulator) -> list[Route]:
    """Every ``/api`` route of the emulated app."""
    handle = answers(emu)

    @handle
    async def list_reservations(request: Request) -> Response:
        authenticate(emu, request, write=False)
        query = listing.parse_query(request.query_params)
        rows = listing.select(emu.state, query, emu.now())
        return JSONResponse([emu.body(r) for r in rows])

    @handle
    async def create(request: Request) -> Response:
        authenticate(emu, request, write=True)
        body = _create_body(await read_json(request))
        created = operations.create_for_service(emu.state, body, emu.now(), emu.forced)
        return JSONResponse(emu.body(created.reservation), status_code=201 if created.new else 200)

    @handle
    async def cancel(request: Request) -> Response:
        authenticate(emu, request, write=True)
        reservation_id = path_int(request, "id")
        body = parse_body(CancelBody, await read_json(request))
        emu.cancels.append(
            {"id": reservation_id, "reason": str(body.reason), "at": utc_text(emu.now())}
        )
        row = operations.cancel_for_service(emu.state, reservation_id, body.reason, emu.now())
        return JSONResponse(emu.body(row))

    @handle
    async def overstay(request: Request) -> Response:
        authenticate(emu, request, write=True)
        reservation_id = path_int(request, "id")
        body = parse_body(OverstayBody, await read_json(request))
        record = operations.record_overstay(emu.state, reservation_id, body, emu.now())
        return JSONResponse(overstay_json(emu.state, record))

    @handle
    async def continue_(request: Request) -> Response:
        authenticate(emu, request, write=True)
        raise AppError(403, "Only the owner, a group manager or an admin may continue.")

    @handle
    async def admission(request: Request) -> Response:
        authenticate(emu, request, write=True)
        body = parse_body(AdmissionBody, await read_json(request))
        return JSONResponse(policies.select_admissions(emu.state, emu.policies, body, emu.now()))

    @handle
    async def victims(request: Request) -> Response:
        authenticate(emu, request, write=True)
        body = parse_body(VictimsBody, await read_json(request))
        return JSONResponse(policies.select_victims(emu.state, emu.policies, body))

    @handle
    async def gpu_classes(request: Request) -> Response:
        authenticate(emu, request, write=False)
        now = emu.now()
        ordered = sorted(emu.state.classes.values(), key=lambda c: c.id)
        return JSONResponse([class_json(emu.state, c, now) for c in ordered])

    @handle
    async def gpu_class(request: Request) -> Response:
        authenticate(emu, request, write=False)
        klass = emu.state.classes.get(path_int(request, "id"))
        if klass is None:
            raise AppError(404, "GPU class not found")
        return JSONResponse(class_json(emu.state, klass, emu.now()))

    @handle
    async def groups(request: Request) -> Response:
        authenticate(emu, request, write=False)
        now = emu.now()
        ordered = sorted(emu.state.groups.values(), key=lambda g: g.name)
        return JSONResponse([group_json(emu.state, g, now) for g in ordered])

    @handle
    async def users(request: Request) -> Response:
        authenticate(emu, request, write=False)
        ordered = sorted(emu.state.users.values(), key=lambda u: u.username)
        return JSONResponse(
            [{"id": u.id, "username": u.username, "is_active": u.is_active} for u in ordered]
        )

    @handle
    async def settings(request: Request) -> Response:
        now = emu.now()
        return JSONResponse(
            {
                "controller_push_enabled": emu.pusher.configured,
                "effective_date": local_date(now, emu.state.zone).isoformat(),
            }
        )

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return [
        Route("/api/reservations", list_reservations, methods=["GET"]),
        Route("/api/reservations", create, methods=["POST"]),
        Route("/api/reservations/ondemand-admission", admission, methods=["POST"]),
        Route("/api/reservations/preemption-victims", victims, methods=["POST"]),
        Route("/api/reservations/{id}/cancel", cancel, methods=["POST"]),
        Route("/api/reservations/{id}/overstay", overstay, methods=["POST"]),
        Route("/api/reservations/{id}/continue", continue_, methods=["POST"]),
        Route("/api/gpu-classes", gpu_classes, methods=["GET"]),
        Route("/api/gpu-classes/{id}", gpu_class, methods=["GET"]),
        Route("/api/groups", groups, methods=["GET"]),
        Route("/api/users", users, methods=["GET"]),
        Route("/api/settings", settings, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
