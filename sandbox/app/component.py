"""``AppComponent``: the emulated reservation app as a sandbox component.

Seeds the app from ``ctx.scenario["app"]`` at the sandbox clock's now, mints a
``read_write`` and a ``read_only`` key into ``ctx.app_keys``, serves on loopback,
publishes ``ctx.endpoints["app"]`` and pushes changes to the reconciler (looked up in
``ctx.endpoints`` at push time, since the reconciler starts later) with
``ctx.inbound_token``.
"""

from __future__ import annotations

from sandbox.app.emulator import Emulator
from sandbox.app.seed import build_state, parse_section
from sandbox.app.server import LoopbackServer, build_asgi
from sandbox.runner import SandboxContext
from shared.appclient.models import KeyScope

#: ``ctx.handles`` key under which the running ``Emulator`` is published.
HANDLE = "app"


class AppComponent:
    """Starts and stops the reservation-app emulator."""

    name = "app"

    def __init__(self) -> None:
        self.emulator: Emulator | None = None
        self._server: LoopbackServer | None = None

    async def start(self, ctx: SandboxContext) -> None:
        section = parse_section(ctx.scenario.get("app"))
        state = build_state(section, ctx.clock.now().replace(microsecond=0))
        keys = {scope: state.mint_key(scope).key for scope in KeyScope}

        def push_target() -> tuple[str, str] | None:
            url = ctx.endpoints.get("reconciler")
            return None if url is None else (url, ctx.inbound_token)

        emulator = Emulator(
            state,
            ctx.clock,
            seed=section.seed,
            push_target=push_target,
        )
        emulator.pusher.start()
        self.emulator = emulator
        self._server = LoopbackServer(build_asgi(emulator))
        ctx.endpoints[self.name] = await self._server.start()
        ctx.app_keys.update({str(scope): key for scope, key in keys.items()})
        ctx.handles[HANDLE] = emulator

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()
            self._server = None
        if self.emulator is not None:
            await self.emulator.pusher.stop()
            self.emulator = None
