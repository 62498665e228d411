"""Fixtures: the app emulator served over real HTTP on an ephemeral loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import pytest

from sandbox.app.emulator import Emulator
from sandbox.app.seed import build_state, parse_section
from sandbox.app.server import LoopbackServer, build_asgi
from sandbox.scenario import load_scenario
from shared.appclient import AppClient, KeyScope
from shared.clock import ManualClock, utc

#: A Monday, 10:00 in the default scenario's zone (America/Los_Angeles, UTC−7).
START = utc(2026, 10, 5, 17, 0)


class InstantClock:
    """A clock whose sleeps return at once and are recorded (for retry pauses)."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def now(self) -> datetime:
        return START

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


@dataclass
class Running:
    """A served emulator and what tests need to reach it."""

    url: str
    emulator: Emulator
    clock: ManualClock
    keys: dict[str, str]
    http: httpx.AsyncClient

    async def control(self, method: str, path: str, body: Any = None) -> httpx.Response:
        """Call the ``/_sandbox/`` control API."""
        return await self.http.request(method, f"/_sandbox/{path}", json=body)

    async def book(self, **fields: Any) -> dict[str, Any]:
        """Create a booking through the control API; it must succeed."""
        spec = {"group": "lab", "gpu_class": "h100", "gpu_count": 1, **fields}
        response = await self.control("POST", "bookings", spec)
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    async def fault(self, **spec: Any) -> None:
        response = await self.control("POST", "faults", spec)
        assert response.status_code == 201, response.text

    def client(self, scope: str = KeyScope.READ_WRITE, **options: Any) -> AppClient:
        return AppClient(self.url, self.keys[scope], **options)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def default_section(**changes: Any) -> dict[str, Any]:
    section: dict[str, Any] = dict(load_scenario()["app"])
    section.update(changes)
    return section


@pytest.fixture
def app_section() -> dict[str, Any]:
    """The scenario ``app`` section the emulator is seeded from (override per module)."""
    return default_section()


@pytest.fixture
async def app(app_section: dict[str, Any]) -> AsyncIterator[Running]:
    clock = ManualClock(START)
    state = build_state(parse_section(app_section), clock.now())
    keys = {str(scope): state.mint_key(scope).key for scope in KeyScope}
    emulator = Emulator(state, clock, seed=7)
    emulator.pusher.start()
    server = LoopbackServer(build_asgi(emulator))
    url = await server.start()
    async with httpx.AsyncClient(base_url=url) as http:
        yield Running(url, emulator, clock, keys, http)
    await server.stop()
    await emulator.pusher.stop()


@pytest.fixture
async def client(app: Running) -> AsyncIterator[AppClient]:
    async with app.client() as c:
        yield c
