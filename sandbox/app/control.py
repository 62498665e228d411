"""The sandbox-only control API under ``/_sandbox/`` (not part of the app's contract).

What humans and admins do in the real app's web UI, plus test hooks: bookings as
their owner would make them (offsets like ``+90s`` from the sandbox clock's now),
owner cancels, admin reassignments and window moves, ``/continue``, faults, forced
denials, keys, users, group and class edits, policies, pushes. No authentication:
the emulator listens on loopback only. Every owner/admin change is pushed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandbox.app import operations
from sandbox.app.bodies import Body, ContinueBody
from sandbox.app.capacity import first_overflow, holders, peak
from sandbox.app.emulator import Emulator, answers, path_int, read_json
from sandbox.app.errors import AppError, parse_body
from sandbox.app.gates import Refusal
from sandbox.app.timeutil import local_date, parse_when, utc_text
from shared.appclient.models import KeyScope
from shared.appclient.reading import parse_instant


class BookingBody(Body):
    username: str
    group: str
    gpu_class: str
    gpu_count: int
    start: str
    end: str
    notes: str | None = None


class WindowBody(Body):
    start: str
    end: str


class UsernameBody(Body):
    username: str = Field(min_length=1)


class FaultBody(Body):
    method: str = "*"
    path: str = Field(min_length=1)
    status: int | None = Field(default=None, ge=100, le=599)
    delay_s: float = Field(default=0.0, ge=0, le=120)
    answer_after_s: float = Field(default=0.0, ge=0, le=120)
    drop: bool = False
    malformed: bool = False
    count: int | None = Field(default=1, ge=1)
    skip: int = Field(default=0, ge=0)
    body: Any = None
    headers: dict[str, str] = Field(default_factory=dict)
    query: str | None = None


class DenialBody(Body):
    code: str = Field(min_length=1)
    retryable: bool
    detail: str = "Refused by a sandbox test hook."
    not_before: str | None = None
    count: int = Field(default=1, ge=1)


class KeyBody(Body):
    scope: KeyScope


class RevokeBody(Body):
    key: str


class UserBody(Body):
    username: str = Field(min_length=1)
    is_active: bool = True


class ClassPatch(Body):
    total_gpus: int | None = Field(default=None, ge=0)
    max_gpus_per_reservation: int | None = Field(default=None, ge=1)
    is_active: bool | None = None
    attach_all_groups: bool | None = None


class PolicyBody(Body):
    admission: Literal["grant_all", "judge", "fixed"] | None = None
    granted: list[str] = Field(default_factory=list)
    #: Sent verbatim, malformed entries included (to test client tolerance).
    withheld: list[Any] = Field(default_factory=list)
    victims: Literal["tiered", "uniform"] | None = None
    seed: int | None = None


def _window(emu: Emulator, start: str, end: str) -> tuple[Any, Any]:
    now = emu.now()
    try:
        return parse_when(start, now), parse_when(end, now)
    except ValueError as exc:
        raise AppError(422, str(exc)) from None


def refusal_of(body: DenialBody) -> Refusal:
    not_before = None
    if body.not_before is not None:
        not_before = parse_instant(body.not_before)
        if not_before is None:
            raise AppError(422, "not_before must be an ISO-8601 instant")
    return Refusal(body.code, body.retryable, body.detail, not_before)


def control_routes(emu: Emulator) -> list[Route]:
    """Routes acting as owners and admins on reservations."""
    handle = answers(emu)

    @handle
    async def book(request: Request) -> Response:
        body = parse_body(BookingBody, await read_json(request))
        window = _window(emu, body.start, body.end)
        names = (body.username, body.group, body.gpu_class)
        row = operations.create_booking(
            emu.state, names, body.gpu_count, window, emu.now(), body.notes
        )
        emu.changed(row)
        return JSONResponse(emu.body(row), status_code=201)

    @handle
    async def cancel(request: Request) -> Response:
        row = operations.cancel_by_owner(emu.state, path_int(request, "id"), emu.now())
        emu.changed(row)
        return JSONResponse(emu.body(row))

    @handle
    async def reassign(request: Request) -> Response:
        body = parse_body(UsernameBody, await read_json(request))
        row = operations.reassign(emu.state, path_int(request, "id"), body.username, emu.now())
        emu.changed(row)
        return JSONResponse(emu.body(row))

    @handle
    async def move(request: Request) -> Response:
        body = parse_body(WindowBody, await read_json(request))
        window = _window(emu, body.start, body.end)
        row = operations.move(emu.state, path_int(request, "id"), window, emu.now())
        emu.changed(row)
        return JSONResponse(emu.body(row))

    @handle
    async def continue_(request: Request) -> Response:
        body = parse_body(ContinueBody, await read_json(request))
        new, source = operations.continue_reservation(
            emu.state, path_int(request, "id"), body, emu.now()
        )
        emu.changed(source, new)
        return JSONResponse(emu.body(new), status_code=201)

    @handle
    async def capacity(request: Request) -> Response:
        klass = emu.state.class_labelled(request.query_params.get("gpu_class", ""))
        if klass is None:
            raise AppError(404, "GPU class not found")
        start, end = _window(
            emu, request.query_params.get("start", "+0s"), request.query_params.get("end", "+1s")
        )
        rows = holders(emu.state.reservations.values(), klass.id, start, end)
        squeeze = first_overflow(rows, klass, start, end, 1, emu.state.zone)
        return JSONResponse(
            {
                "gpu_class": klass.label_value,
                "offered_today": klass.capacity_on(local_date(emu.now(), emu.state.zone)),
                "booked_peak": peak(rows, start, end),
                "full_at": utc_text(squeeze.at) if squeeze else None,
            }
        )

    return [
        Route("/_sandbox/bookings", book, methods=["POST"]),
        Route("/_sandbox/bookings/{id}/cancel", cancel, methods=["POST"]),
        Route("/_sandbox/bookings/{id}/reassign", reassign, methods=["POST"]),
        Route("/_sandbox/bookings/{id}/move", move, methods=["POST"]),
        Route("/_sandbox/bookings/{id}/continue", continue_, methods=["POST"]),
        Route("/_sandbox/capacity", capacity, methods=["GET"]),
    ]
