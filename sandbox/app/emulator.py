"""The emulated reservation app: state, policies, faults, push and its ASGI app.

``Emulator`` owns everything a running app has and is what handlers close over. It
reads "now" from the sandbox clock (second precision) and publishes changes made
outside the service-key paths to the controller through ``Pusher``.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandbox.app.errors import AppError, error_response
from sandbox.app.gates import Refusal
from sandbox.app.policies import Policies
from sandbox.app.push import Pusher, PushTarget
from sandbox.app.serialize import reservation_json
from sandbox.app.state import AppState, Reservation
from sandbox.app.timeutil import whole_second
from sandbox.faults import FaultBook
from shared.clock import Clock
from shared.logs import log

logger = logging.getLogger("sandbox.app")

Handler = Callable[[Request], Awaitable[Response]]


class Emulator:
    """One emulated app instance."""

    def __init__(
        self,
        state: AppState,
        clock: Clock,
        *,
        seed: int = 0,
        push_target: PushTarget | None = None,
    ) -> None:
        self.state = state
        self.clock = clock
        self.policies = Policies(seed=seed)
        self.faults = FaultBook()
        self.forced: list[Refusal] = []
        self.pusher = Pusher(push_target or (lambda: None))
        #: Every service-key cancel call that reached the app (after faults), in order:
        #: ``{"id", "reason", "at"}`` — ``GET /_sandbox/cancels`` (tests count them).
        self.cancels: list[dict[str, Any]] = []

    def now(self) -> datetime:
        return whole_second(self.clock.now())

    def body(self, row: Reservation) -> dict[str, Any]:
        return reservation_json(self.state, row)

    def changed(self, *rows: Reservation) -> None:
        """Push these rows' current state to the controller (best-effort)."""
        self.pusher.notify([self.body(r) for r in rows])


async def read_json(request: Request) -> Any:
    """The request's JSON body; a body that is not JSON is a 422."""
    raw = await request.body()
    try:
        return json.loads(raw or b"null")
    except ValueError:
        raise AppError(
            422, [{"loc": ["body"], "msg": "invalid JSON", "type": "json_invalid"}]
        ) from None


def answers(emulator: Emulator) -> Callable[[Handler], Handler]:
    """Decorator: render ``AppError`` as the app does, and any crash as a JSON 500."""

    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except AppError as error:
                return error_response(error, emulator.now())
            except Exception:
                log(logger, logging.ERROR, "app.handler_crashed", path=request.url.path)
                logger.exception("handler crashed")
                return JSONResponse({"detail": "Internal Server Error"}, status_code=500)

        return run

    return wrap


def path_int(request: Request, name: str) -> int:
    """An integer path parameter; anything else is a 422 (as FastAPI answers)."""
    raw = request.path_params[name]
    try:
        return int(raw)
    except ValueError:
        detail = [{"loc": ["path", name], "msg": "not an integer", "type": "int_parsing"}]
        raise AppError(422, detail) from None
