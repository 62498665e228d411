"""Serving the emulated app: its ASGI app, and uvicorn on a free loopback port.

``LoopbackServer`` runs uvicorn inside the caller's asyncio loop (the sandbox runner's,
or a test's) and leaves signal handling to the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp

from sandbox.app.api import api_routes
from sandbox.app.control import control_routes
from sandbox.app.emulator import Emulator
from sandbox.app.hooks import hook_routes
from sandbox.faults import FaultMiddleware


async def _json_http_error(request: Request, exc: Exception) -> Response:
    """Unknown routes and methods answer JSON too (§1.4)."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "Internal Server Error"
    return JSONResponse({"detail": detail}, status_code=status)


def build_asgi(emulator: Emulator) -> ASGIApp:
    """The emulator's routes behind its fault injection."""
    routes = [*api_routes(emulator), *control_routes(emulator), *hook_routes(emulator)]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _json_http_error})
    return FaultMiddleware(app, emulator.faults)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the process owner handles signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class LoopbackServer:
    """Serves one ASGI app on ``127.0.0.1:<free port>`` in the running loop."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.url = ""

    async def start(self) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(self._app, lifespan="off", log_level="warning", access_log=False)
        self._server = _Server(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the app emulator's server stopped while starting")
            await asyncio.sleep(0.01)
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        await self._task
        self._server = None
