"""The emulator's contract surface and control API: listing, auth, errors, push."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandbox.app.server import LoopbackServer
from shared.appclient import KeyScope
from tests.app.conftest import Running

pytestmark = pytest.mark.anyio


async def get(
    app: Running, path: str, scope: str = KeyScope.READ_ONLY, **params: Any
) -> httpx.Response:
    return await app.http.get(path, params=params, headers={"X-API-Key": app.keys[scope]})


async def test_authentication_rules(app: Running) -> None:
    assert (await app.http.get("/api/gpu-classes")).status_code == 401
    bad = await app.http.get("/api/gpu-classes", headers={"X-API-Key": "gpures_nope"})
    assert bad.status_code == 401
    assert bad.json() == {"detail": "Invalid or missing API key"}
    traced = await app.http.get(
        "/api/gpu-classes",
        headers={"X-API-Key": app.keys[KeyScope.READ_ONLY], "X-Client-Trace": "fetch-0123456789"},
    )
    assert traced.status_code == 200
    web = await app.http.post(
        "/api/reservations",
        json={"start": "x"},
        headers={"X-API-Key": app.keys[KeyScope.READ_WRITE]},
    )
    assert web.status_code == 403
    cont = await app.http.post(
        "/api/reservations/1/continue",
        json={},
        headers={"X-API-Key": app.keys[KeyScope.READ_WRITE]},
    )
    assert cont.status_code == 403


async def test_listing_order_paging_and_local_fields(app: Running) -> None:
    await app.book(username="dave", start="-3h", end="-2h")
    await app.book(username="carol", start="+0s", end="+1h")
    rows = (await get(app, "/api/reservations", status="all")).json()
    assert [r["user"]["username"] for r in rows] == ["dave", "alice", "carol", "bob"]
    assert [r["id"] for r in rows[1:3]] == sorted(r["id"] for r in rows[1:3])
    page = (await get(app, "/api/reservations", limit=2, offset=1)).json()
    assert [r["user"]["username"] for r in page] == ["alice", "carol"]
    alice = rows[1]
    assert (alice["start_utc"], alice["start_dt"], alice["date"]) == (
        "2026-10-05T17:00:00Z",
        "2026-10-05T10:00:00",
        "2026-10-05",
    )


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": 1001}, {"offset": -1}, {"status": "open"}, {"date_start": "monday"}],
    ids=str,
)
async def test_bad_list_parameters_are_422_with_an_error_array(
    app: Running, params: dict[str, Any]
) -> None:
    response = await get(app, "/api/reservations", **params)
    assert response.status_code == 422
    assert isinstance(response.json()["detail"], list)


async def test_status_and_day_filters(app: Running) -> None:
    headers = {"X-API-Key": app.keys[KeyScope.READ_WRITE]}
    await app.http.post("/api/reservations/1/cancel", json={"reason": "no-show"}, headers=headers)
    active = await get(app, "/api/reservations")
    cancelled = await get(app, "/api/reservations", status="cancelled")
    assert [r["id"] for r in active.json()] == [2]
    assert [r["id"] for r in cancelled.json()] == [1]
    future = await get(app, "/api/reservations", status="all", date_start="2026-10-06")
    assert future.json() == []
    today = await get(app, "/api/reservations", status="all", date_end="2026-10-05", username="bob")
    assert [r["id"] for r in today.json()] == [2]


async def test_unknown_routes_and_bad_ids_answer_json(app: Running) -> None:
    missing = await app.http.get("/api/nothing")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"})
    not_int = await get(app, "/api/gpu-classes/abc")
    assert not_int.status_code == 422


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("bookings", {"username": "alice"}),
        (
            "bookings",
            {
                "username": "alice",
                "group": "lab",
                "gpu_class": "h100",
                "gpu_count": 1,
                "start": "soon",
                "end": "+1h",
            },
        ),
        (
            "bookings",
            {
                "username": "alice",
                "group": "lab",
                "gpu_class": "h100",
                "gpu_count": 1,
                "start": "2026-10-05T20:00:00",
                "end": "+1h",
            },
        ),
        (
            "bookings",
            {
                "username": "alice",
                "group": "lab",
                "gpu_class": "h100",
                "gpu_count": 1,
                "start": "+2h",
                "end": "+1h",
            },
        ),
        ("bookings/1/reassign", {}),
        ("bookings/x/cancel", {}),
        ("faults", {"path": "/api/x", "status": 99}),
        ("faults", {"path": "/api/x", "count": 0}),
        ("denials", {"code": "x"}),
        ("denials", {"code": "x", "retryable": True, "not_before": "later"}),
        ("keys", {"scope": "admin"}),
        ("policies", {"admission": "random"}),
        ("groups", {"name": "g", "members": ["ghost"]}),
        ("classes/1", {"total_gpus": -1}),
    ],
)
async def test_malformed_control_bodies_are_422(app: Running, path: str, body: Any) -> None:
    response = await app.control("POST", path, body)
    assert response.status_code == 422, response.text
    assert "detail" in response.json()


async def test_not_json_control_body_is_422(app: Running) -> None:
    response = await app.http.post("/_sandbox/bookings", content=b"{nope")
    assert response.status_code == 422


async def test_control_booking_refusals_use_the_envelope(app: Running) -> None:
    spec = {
        "username": "dave",
        "group": "lab",
        "gpu_class": "h100",
        "gpu_count": 8,
        "start": "+0s",
        "end": "+1h",
    }
    assert (await app.control("POST", "bookings", spec)).status_code == 201
    refused = await app.control("POST", "bookings", spec)
    assert refused.status_code == 409
    assert refused.json()["code"] == "capacity_physical"
    unknown = await app.control("POST", "bookings", {**spec, "gpu_class": "tpu", "gpu_count": 1})
    assert unknown.status_code == 404
    absolute = await app.control(
        "POST",
        "bookings",
        {**spec, "gpu_count": 1, "start": "2026-10-06T00:00:00Z", "end": "2026-10-06T01:00:00Z"},
    )
    assert absolute.json()["start_dt"] == "2026-10-05T17:00:00"


async def test_faults_are_listed_counted_and_deleted(app: Running) -> None:
    await app.fault(method="GET", path="/api/groups", status=500, count=None)
    assert len((await app.control("GET", "faults")).json()) == 1
    assert (await get(app, "/api/groups")).status_code == 500
    assert (await get(app, "/api/groups")).status_code == 500
    assert (await app.control("DELETE", "faults")).status_code == 204
    assert (await get(app, "/api/groups")).status_code == 200


async def test_victim_selection_is_reproducible_with_a_seed(app: Running) -> None:
    body = {
        "needed_by_class": {"h100": 3},
        "candidates": [
            {
                "pod_uid": f"p{i}",
                "namespace": "carol",
                "pod_name": f"p{i}",
                "gpu_class": "h100",
                "gpu_count": 1,
                "reservation_id": 1,
            }
            for i in range(8)
        ],
    }
    headers = {"X-API-Key": app.keys[KeyScope.READ_WRITE]}
    picks = []
    for _ in range(2):
        await app.control("POST", "policies", {"seed": 42})
        response = await app.http.post(
            "/api/reservations/preemption-victims", json=body, headers=headers
        )
        picks.append(response.json()["victim_pod_uids"])
    assert picks[0] == picks[1]
    assert len(picks[0]) == 3


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A stand-in reconciler push endpoint recording what it receives."""
    received: list[dict[str, Any]] = []

    async def push(request: Request) -> Response:
        received.append({"auth": request.headers.get("authorization"), **(await request.json())})
        return JSONResponse({"applied": 0, "cancelled": 0, "adopted": 0, "total_active": 0})

    server = LoopbackServer(
        Starlette(routes=[Route("/api/reservations/push", push, methods=["POST"])])
    )
    url = await server.start()
    yield url, received
    await server.stop()


async def test_owner_and_admin_changes_are_pushed(
    app: Running, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    url, received = receiver
    app.emulator.pusher._target = lambda: (url, "s3cret")
    row = await app.book(username="carol", start="+3h", end="+4h")
    await app.control("POST", f"bookings/{row['id']}/reassign", {"username": "dave"})
    await app.control("POST", "bookings/1/cancel")
    await app.clock.advance(60)
    continued = await app.control("POST", "bookings/2/continue", {"duration_seconds": 3600})
    assert continued.status_code == 400  # bob's booking has not started
    records = (await app.control("GET", "pushes")).json()
    assert [r["outcome"] for r in records] == ["delivered"] * 3
    assert all(p["auth"] == "Bearer s3cret" for p in received)
    owners = [p["reservations"][0]["user"]["username"] for p in received]
    assert owners == ["carol", "dave", "alice"]
    assert received[2]["reservations"][0]["status"] == "cancelled"


async def test_continue_supersedes_and_pushes_both(
    app: Running, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    url, received = receiver
    app.emulator.pusher._target = lambda: (url, "t")
    await app.clock.advance(600)
    response = await app.control("POST", "bookings/1/continue", {"duration_seconds": 3 * 3600})
    assert response.status_code == 201, response.text
    new = response.json()
    assert new["continued_from_id"] == 1
    await app.control("GET", "pushes")
    (push,) = received
    source, created = push["reservations"]
    assert (source["status"], source["cancel_reason"]) == ("cancelled", "superseded")
    assert created["id"] == new["id"]


async def test_pushes_without_a_reconciler_are_recorded_not_sent(app: Running) -> None:
    await app.book(username="carol", start="+3h", end="+4h")
    records = (await app.control("GET", "pushes")).json()
    assert [r["outcome"] for r in records] == ["not_configured"]
    settings = (await app.http.get("/api/settings")).json()
    assert settings == {"controller_push_enabled": False, "effective_date": "2026-10-05"}
