"""The emulator's admission model and rules, checked over raw HTTP (acceptance 2)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from shared.appclient import DenialCode, KeyScope
from tests.app.conftest import Running, default_section

pytestmark = pytest.mark.anyio


def lease_body(key: str, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "on_demand": True,
        "username": "carol",
        "group_name": "lab",
        "gpu_class_id": 1,
        "gpu_count": 1,
        "duration_seconds": 3600,
        "idempotency_key": key,
    }
    body.update(changes)
    return body


async def post_lease(app: Running, key: str, **changes: Any) -> httpx.Response:
    return await app.http.post(
        "/api/reservations",
        json=lease_body(key, **changes),
        headers={"X-API-Key": app.keys[KeyScope.READ_WRITE]},
    )


async def booked_peak(app: Running, start: str = "+0s", end: str = "+2h") -> int:
    params = {"gpu_class": "h100", "start": start, "end": end}
    response = await app.http.get("/_sandbox/capacity", params=params)
    peak: int = response.json()["booked_peak"]
    return peak


async def test_a_lease_that_fits_is_granted_and_charges_capacity(app: Running) -> None:
    assert await booked_peak(app, "+0s", "+5m") == 2  # alice's booking
    response = await post_lease(app, "fits", gpu_count=4)
    assert response.status_code == 201
    assert response.json()["su_cost_original"] == 8.0  # 4 GPUs × 1 h × 2 SU
    assert await booked_peak(app, "+0s", "+5m") == 6


async def test_a_lease_over_capacity_at_any_instant_of_its_span_is_refused(app: Running) -> None:
    # 2 (alice, now → +2h) + 1 (bob, +10m → +70m) + 9 (+30m → +60m) = 12 = capacity.
    await app.book(username="dave", gpu_count=8, start="+30m", end="+60m")
    await app.book(username="carol", gpu_count=1, start="+30m", end="+60m")
    assert await booked_peak(app, "+0s", "+5m") == 2  # free now …
    response = await post_lease(app, "squeezed")  # … but not at +30m
    assert response.status_code == 409
    body = response.json()
    assert (body["code"], body["retryable"]) == (DenialCode.CAPACITY_PHYSICAL, True)
    assert "not_before" not in body
    assert "retry-after" not in response.headers
    short = await post_lease(app, "short", duration_seconds=1200)  # ends before +30m
    assert short.status_code == 201


async def test_over_the_class_cap_is_refused_for_good(app: Running) -> None:
    response = await post_lease(app, "big", gpu_count=9)
    assert response.status_code == 409
    body = response.json()
    assert (body["code"], body["retryable"]) == (DenialCode.GPU_COUNT_OVER_CLASS_CAP, False)


async def test_more_than_the_class_has_is_a_permanent_capacity_refusal(app: Running) -> None:
    await app.control("POST", "classes/1", {"max_gpus_per_reservation": None})
    response = await post_lease(app, "huge", gpu_count=13)
    body = response.json()
    assert (body["code"], body["retryable"]) == (DenialCode.CAPACITY_PHYSICAL, False)


async def test_a_service_key_cannot_cancel_a_booking_before_it_starts(app: Running) -> None:
    headers = {"X-API-Key": app.keys[KeyScope.READ_WRITE]}
    before = await app.http.post(
        "/api/reservations/2/cancel", json={"reason": "no-show"}, headers=headers
    )
    assert before.status_code == 403
    await app.clock.advance(11 * 60)
    after = await app.http.post(
        "/api/reservations/2/cancel", json={"reason": "no-show"}, headers=headers
    )
    assert after.status_code == 200
    assert after.json()["cancel_reason"] == "no-show"
    assert after.json()["cancelled_at"] == "2026-10-05T17:11:00Z"
    assert after.json()["cancelled_at_local"] == "2026-10-05T10:11:00"


async def test_membership_and_attachment_gates(app: Running) -> None:
    stranger = (await post_lease(app, "s", username="alice", group_name="course-101")).json()
    assert (stranger["code"], stranger["retryable"]) == (DenialCode.NOT_A_MEMBER, False)
    unattached = (await post_lease(app, "u", group_name="course-101", gpu_class_id=2)).json()
    assert unattached["code"] == DenialCode.GPU_CLASS_NOT_ATTACHED


async def put_group(app: Running, **spec: Any) -> None:
    body = {
        "name": "lab",
        "members": ["alice", "bob", "carol", "dave"],
        "classes": ["h100", "a100"],
    }
    body.update(spec)
    response = await app.control("POST", "groups", body)
    assert response.status_code == 200, response.text


async def test_group_validity_dates(app: Running) -> None:
    await put_group(app, valid_from="2026-10-07")
    early = await post_lease(app, "early")
    body = early.json()
    assert (body["code"], body["retryable"]) == (DenialCode.GROUP_NOT_YET_VALID, True)
    assert body["not_before"] == "2026-10-07T07:00:00Z"  # local midnight, UTC−7
    assert early.headers["retry-after"] == str(38 * 3600)
    await put_group(app, valid_until="2026-10-04")
    late = (await post_lease(app, "late")).json()
    assert (late["code"], late["retryable"]) == (DenialCode.GROUP_VALIDITY_ENDED, False)


async def test_group_duration_ceiling(app: Running) -> None:
    await put_group(app, max_reservation_hours=1)
    body = (await post_lease(app, "long", duration_seconds=3601)).json()
    assert (body["code"], body["retryable"]) == (DenialCode.DURATION_OVER_GROUP_CEILING, False)


async def test_member_budget_refusals_and_their_window(app: Running) -> None:
    await put_group(app, su_budget=5)
    assert (await post_lease(app, "b1", duration_seconds=3600)).status_code == 201  # 2 SU
    second = await post_lease(app, "b2", gpu_count=2)  # 4 SU > 3 left
    body = second.json()
    assert (body["code"], body["retryable"]) == (DenialCode.SU_BUDGET_MEMBER, True)
    assert body["not_before"] == "2026-10-12T07:00:00Z"  # next Monday 00:00 local
    assert second.headers["retry-after"] == str(7 * 86400 - 17 * 3600 + 7 * 3600)
    alone = (await post_lease(app, "b3", gpu_count=3)).json()  # 6 SU > whole budget
    assert (alone["code"], alone["retryable"]) == (DenialCode.SU_BUDGET_MEMBER, False)


async def test_pool_budget_and_group_ceiling(app: Running) -> None:
    await put_group(app, pool_su_budget=1)
    pool = (await post_lease(app, "p1")).json()
    assert pool["code"] == DenialCode.SU_BUDGET_POOL
    await put_group(app, gpu_ceiling=3)
    ceiling = (await post_lease(app, "c1", gpu_count=2)).json()
    assert (ceiling["code"], ceiling["retryable"]) == (DenialCode.CAPACITY_GROUP, True)


async def test_auto_join_enrols_and_provisions(app: Running) -> None:
    response = await app.control(
        "POST",
        "groups",
        {"name": "public", "classes": ["a100"], "on_demand_auto_join": True},
    )
    assert response.status_code == 200
    created = await post_lease(app, "aj", username="newbie", group_name="public", gpu_class_id=2)
    assert created.status_code == 201
    bad = await post_lease(app, "aj2", username="X!", group_name="public", gpu_class_id=2)
    assert bad.status_code == 404
    assert (
        await app.control("POST", "users", {"username": "carol", "is_active": False})
    ).status_code == 200
    inactive = await post_lease(app, "aj3", group_name="public", gpu_class_id=2)
    assert inactive.status_code == 404


async def test_cancel_retains_the_used_charge_of_a_lease(app: Running) -> None:
    created = await post_lease(app, "charge", duration_seconds=6 * 3600)
    assert created.json()["su_cost_original"] == 12.0
    await app.clock.advance(1800)
    cancelled = await app.http.post(
        f"/api/reservations/{created.json()['id']}/cancel",
        json={"reason": "pod-terminated"},
        headers={"X-API-Key": app.keys[KeyScope.READ_WRITE]},
    )
    body = cancelled.json()
    # used 0.5 h = 1 SU; penalty window [+2h grace, +6h) = 4 h; exemption min(4.5/2, 8)
    # = 2.25 h; penalty = 8 SU × (4 − 2.25) / 4 = 3.5 SU.
    assert body["su_cost_user"] == 4.5
    assert body["su_cost_original"] == 12.0


async def test_idempotency_is_global_and_survives_cancellation(app: Running) -> None:
    first = await post_lease(app, "same")
    replay = await post_lease(app, "same", username="dave", gpu_count=5)
    stub = await app.http.post(
        "/api/reservations",
        json={
            **lease_body("same"),
            "on_demand": False,
            "best_effort": True,
            "duration_seconds": None,
        },
        headers={"X-API-Key": app.keys[KeyScope.READ_WRITE]},
    )
    assert (first.status_code, replay.status_code) == (201, 200)
    assert replay.json() == first.json()
    assert stub.status_code == 422  # a stub body carrying duration_seconds


@pytest.fixture
def app_section() -> dict[str, Any]:
    return default_section(best_effort_probe_minutes=10)


async def test_best_effort_stubs_never_hold_capacity(app: Running) -> None:
    headers = {"X-API-Key": app.keys[KeyScope.READ_WRITE]}
    body = {k: v for k, v in lease_body("x").items() if k not in ("on_demand", "duration_seconds")}
    for n in range(5):
        stub = {**body, "best_effort": True, "gpu_count": 8, "idempotency_key": f"be{n}"}
        response = await app.http.post("/api/reservations", json=stub, headers=headers)
        assert response.status_code == 201
    assert await booked_peak(app) == 3
