"""The app client's lanes: one single-connection client per request in flight."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from shared.appclient import TransientReason
from shared.appclient.http import Answer, Http, Lanes
from shared.appclient.outcomes import Transient


@pytest.mark.anyio
async def test_requests_in_flight_get_distinct_lanes_and_idle_ones_are_reused() -> None:
    made: list[httpx.AsyncClient] = []

    def make() -> httpx.AsyncClient:
        made.append(httpx.AsyncClient())
        return made[-1]

    lanes = Lanes(make, limit=3)
    async with lanes.lane() as a, lanes.lane() as b, lanes.lane() as c:
        assert len({id(a), id(b), id(c)}) == 3
    async with lanes.lane() as again:
        assert again is a  # the last freed (exits run c, b, a): the warmest
    async with lanes.lane() as d:
        assert d is a
    assert len(made) == 3  # nothing new while one is free
    await lanes.aclose()
    assert all(client.is_closed for client in made)


@pytest.mark.anyio
async def test_a_request_waits_for_a_free_lane_within_its_own_timeout() -> None:
    release = asyncio.Event()
    entered = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slow":
            entered.set()
            await release.wait()
        return httpx.Response(200, json={"path": request.url.path})

    http = Http("http://app", "gpures_x", httpx.MockTransport(handler), lanes=1)
    try:
        slow = asyncio.create_task(http.send("GET", "/slow", seconds=30.0))
        await entered.wait()
        waited = await http.send("GET", "/quick", seconds=0.2)
        assert isinstance(waited, Transient)
        assert waited.reason is TransientReason.TIMEOUT
        release.set()
        first = await slow
        assert isinstance(first, Answer)
        assert first.status == 200
        after = await http.send("GET", "/quick", seconds=30.0)  # the lane is free again
        assert isinstance(after, Answer)
        assert after.status == 200
    finally:
        release.set()
        await http.aclose()


@pytest.mark.anyio
async def test_a_cancelled_request_frees_its_lane() -> None:
    entered = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slow":
            entered.set()
            await asyncio.Event().wait()  # never answers
        return httpx.Response(200, json={})

    http = Http("http://app", "gpures_x", httpx.MockTransport(handler), lanes=1)
    try:
        slow = asyncio.create_task(http.send("GET", "/slow", seconds=30.0))
        await entered.wait()
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        after = await http.send("GET", "/quick", seconds=30.0)
        assert isinstance(after, Answer)
        assert after.status == 200
    finally:
        await http.aclose()
