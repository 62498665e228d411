"""Control-API test hooks: faults, forced denials, keys, users, groups, classes,
policies, pushes and the clock (see ``sandbox.app.control`` for the reservation side)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandbox.app.control import (
    ClassPatch,
    DenialBody,
    FaultBody,
    KeyBody,
    PolicyBody,
    RevokeBody,
    UserBody,
    refusal_of,
)
from sandbox.app.emulator import Emulator, answers, path_int, read_json
from sandbox.app.errors import AppError, parse_body
from sandbox.app.seed import GroupSpec, make_group
from sandbox.app.timeutil import utc_text


def _apply_policy(emu: Emulator, body: PolicyBody) -> None:
    policies = emu.policies
    if body.admission is not None:
        policies.admission = body.admission
        policies.fixed_granted = list(body.granted)
        policies.fixed_withheld = list(body.withheld)
    if body.victims is not None:
        policies.victims = body.victims
    if body.seed is not None:
        policies.reseed(body.seed)


def hook_routes(emu: Emulator) -> list[Route]:
    """Routes configuring the emulator itself."""
    handle = answers(emu)

    @handle
    async def add_fault(request: Request) -> Response:
        body = parse_body(FaultBody, await read_json(request))
        fault = emu.faults.add(**body.model_dump())
        return JSONResponse(fault.describe(), status_code=201)

    @handle
    async def list_faults(request: Request) -> Response:
        return JSONResponse([f.describe() for f in emu.faults.faults])

    @handle
    async def clear_faults(request: Request) -> Response:
        emu.faults.clear()
        return Response(status_code=204)

    @handle
    async def force_denial(request: Request) -> Response:
        body = parse_body(DenialBody, await read_json(request))
        emu.forced.extend([refusal_of(body)] * body.count)
        return JSONResponse({"queued": len(emu.forced)}, status_code=201)

    @handle
    async def clear_denials(request: Request) -> Response:
        emu.forced.clear()
        return Response(status_code=204)

    @handle
    async def mint_key(request: Request) -> Response:
        body = parse_body(KeyBody, await read_json(request))
        key = emu.state.mint_key(body.scope)
        return JSONResponse(
            {"key": key.key, "key_prefix": key.prefix, "scope": key.scope}, status_code=201
        )

    @handle
    async def revoke_key(request: Request) -> Response:
        body = parse_body(RevokeBody, await read_json(request))
        key = emu.state.keys.get(body.key)
        if key is None:
            raise AppError(404, "Key not found")
        key.revoked = True
        return JSONResponse({"key_prefix": key.prefix, "revoked": True})

    @handle
    async def put_user(request: Request) -> Response:
        body = parse_body(UserBody, await read_json(request))
        user = emu.state.user_named(body.username) or emu.state.add_user(body.username, emu.now())
        user.is_active = body.is_active
        return JSONResponse({"id": user.id, "username": user.username, "is_active": user.is_active})

    @handle
    async def put_group(request: Request) -> Response:
        data = await read_json(request)
        spec = parse_body(GroupSpec, data)
        try:
            known = emu.state.group_named(spec.name)
            group_id = known.id if known else emu.state.next_id("groups")
            group = make_group(emu.state, spec, group_id, emu.now())
        except ValueError as exc:
            raise AppError(422, str(exc)) from None
        emu.state.groups[group.id] = group
        return JSONResponse({"id": group.id, "name": group.name})

    @handle
    async def patch_class(request: Request) -> Response:
        klass = emu.state.classes.get(path_int(request, "id"))
        if klass is None:
            raise AppError(404, "GPU class not found")
        body = parse_body(ClassPatch, await read_json(request))
        for name, value in body.model_dump(exclude_unset=True).items():
            setattr(klass, name, value)
        return JSONResponse({"id": klass.id, "total_gpus": klass.total_gpus})

    @handle
    async def set_policies(request: Request) -> Response:
        _apply_policy(emu, parse_body(PolicyBody, await read_json(request)))
        p = emu.policies
        return JSONResponse({"admission": p.admission, "victims": p.victims, "seed": p.seed})

    @handle
    async def pushes(request: Request) -> Response:
        await emu.pusher.drain()
        return JSONResponse([vars(r) for r in emu.pusher.records])

    @handle
    async def cancels(request: Request) -> Response:
        return JSONResponse(emu.cancels)

    @handle
    async def now(request: Request) -> Response:
        return JSONResponse({"now": utc_text(emu.now()), "timezone": str(emu.state.zone)})

    return [
        Route("/_sandbox/faults", add_fault, methods=["POST"]),
        Route("/_sandbox/faults", list_faults, methods=["GET"]),
        Route("/_sandbox/faults", clear_faults, methods=["DELETE"]),
        Route("/_sandbox/denials", force_denial, methods=["POST"]),
        Route("/_sandbox/denials", clear_denials, methods=["DELETE"]),
        Route("/_sandbox/keys", mint_key, methods=["POST"]),
        Route("/_sandbox/keys/revoke", revoke_key, methods=["POST"]),
        Route("/_sandbox/users", put_user, methods=["POST"]),
        Route("/_sandbox/groups", put_group, methods=["POST"]),
        Route("/_sandbox/classes/{id}", patch_class, methods=["POST"]),
        Route("/_sandbox/policies", set_policies, methods=["POST"]),
        Route("/_sandbox/pushes", pushes, methods=["GET"]),
        Route("/_sandbox/cancels", cancels, methods=["GET"]),
        Route("/_sandbox/now", now, methods=["GET"]),
    ]
