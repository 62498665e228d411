"""The client's reads against the emulator over real HTTP: every outcome class."""

from __future__ import annotations

import logging
from datetime import date
from typing import Any

import httpx
import pytest

from shared.appclient import (
    AppClient,
    Fetched,
    Forbidden,
    Invalid,
    KeyScope,
    Rejected,
    Timeouts,
    Transient,
    TransientReason,
    Unauthorised,
    unit_of_work,
)
from tests.app.conftest import InstantClock, Running

pytestmark = pytest.mark.anyio

WINDOW = (date(2026, 10, 4), date(2026, 10, 12))


async def fill_calendar(app: Running, count: int) -> list[int]:
    """``count`` one-GPU a100 bookings an hour apart; returns every id in list order."""
    ids: list[int] = []
    for hour in range(count):
        row = await app.book(
            username="carol", gpu_class="a100", start=f"+{hour + 1}h", end=f"+{hour + 2}h"
        )
        ids.append(row["id"])
    return ids


class SideEffectTransport(httpx.AsyncBaseTransport):
    """Real HTTP, but runs ``action`` once just before the first request at ``offset``."""

    def __init__(self, offset: int, action: Any) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._offset = str(offset)
        self._action = action
        self.offsets: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        offset = request.url.params.get("offset", "")
        self.offsets.append(offset)
        if offset == self._offset and self._action is not None:
            action, self._action = self._action, None
            await action()
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def test_default_pull_returns_the_seeded_bookings(client: AppClient) -> None:
    result = await client.list_reservations(*WINDOW)
    assert isinstance(result, Fetched)
    assert [r.username for r in result.value] == ["alice", "bob"]
    alice = result.value[0]
    assert alice.start_utc.isoformat() == "2026-10-05T17:00:00+00:00"
    assert alice.start_dt is not None
    assert alice.start_dt.hour == 10
    assert alice.gpu_class.label_value == "h100"


@pytest.mark.parametrize(
    ("moved", "to"),
    [
        pytest.param(0, ("+20h", "+21h"), id="first-row-moves-to-a-later-page"),
        pytest.param(-1, ("+1m", "+2m"), id="last-row-moves-to-an-earlier-page"),
    ],
)
async def test_a_row_moving_between_pages_is_neither_lost_nor_duplicated(
    app: Running, moved: int, to: tuple[str, str]
) -> None:
    ids = await fill_calendar(app, 10)
    everything = [1, 2, *ids]  # alice and bob, then the calendar

    async def move() -> None:
        target = everything[moved]
        response = await app.control(
            "POST", f"bookings/{target}/move", {"start": to[0], "end": to[1]}
        )
        assert response.status_code == 200

    transport = SideEffectTransport(offset=2, action=move)
    async with app.client(page_size=3, transport=transport) as client:
        result = await client.list_reservations(*WINDOW)
    assert isinstance(result, Fetched)
    got = [r.id for r in result.value]
    assert sorted(got) == sorted(everything)
    assert len(got) == len(set(got))
    moved_row = next(r for r in result.value if r.id == everything[moved])
    assert moved_row.updated_at is not None
    assert transport.offsets.count("0") == 2  # the shift was seen and the pull restarted


async def test_a_5xx_mid_list_is_retried_on_the_same_page(app: Running) -> None:
    await fill_calendar(app, 5)
    await app.fault(method="GET", path="/api/reservations", status=503, skip=1, count=2)
    clock = InstantClock()
    async with app.client(page_size=3, clock=clock) as client:
        result = await client.list_reservations(*WINDOW)
    assert isinstance(result, Fetched)
    assert len(result.value) == 7
    assert clock.slept == [1.0, 2.0]


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        pytest.param({"status": 500}, TransientReason.SERVER_ERROR, id="5xx"),
        pytest.param({"drop": True}, TransientReason.NETWORK, id="dropped-connection"),
    ],
)
async def test_a_page_failing_three_times_fails_the_pull_without_partial_results(
    app: Running, fault: dict[str, Any], reason: TransientReason
) -> None:
    await fill_calendar(app, 5)
    await app.fault(method="GET", path="/api/reservations", skip=1, count=3, **fault)
    clock = InstantClock()
    async with app.client(page_size=3, clock=clock) as client:
        result = await client.list_reservations(*WINDOW)
    assert isinstance(result, Transient)
    assert result.reason is reason
    assert clock.slept == [1.0, 2.0]


async def test_a_4xx_on_a_page_is_not_retried(app: Running) -> None:
    await app.fault(method="GET", path="/api/reservations", status=422, count=5)
    clock = InstantClock()
    async with app.client(clock=clock) as client:
        result = await client.list_reservations(*WINDOW)
    assert isinstance(result, Invalid)
    assert clock.slept == []


async def test_a_revoked_key_is_unauthorised(app: Running, client: AppClient) -> None:
    response = await app.control("POST", "keys/revoke", {"key": app.keys[KeyScope.READ_WRITE]})
    assert response.status_code == 200
    assert isinstance(await client.list_reservations(*WINDOW), Unauthorised)
    assert isinstance(await client.list_gpu_classes(), Unauthorised)


async def test_a_read_only_key_may_read(app: Running) -> None:
    async with app.client(KeyScope.READ_ONLY) as client:
        assert isinstance(await client.list_reservations(*WINDOW), Fetched)
        assert isinstance(await client.list_groups(), Fetched)


async def test_gpu_classes_and_one_class(client: AppClient) -> None:
    classes = await client.list_gpu_classes()
    assert isinstance(classes, Fetched)
    h100 = classes.value[0]
    assert (h100.id, h100.name, h100.label_value, h100.capacity) == (1, "H100", "h100", 12)
    one = await client.get_gpu_class(2)
    assert isinstance(one, Fetched)
    assert one.value.total_gpus == 16
    missing = await client.get_gpu_class(77)
    assert isinstance(missing, Rejected)
    assert missing.unknown == "gpu class 77"
    assert missing.detail == "GPU class not found"


async def test_groups_with_members(client: AppClient) -> None:
    groups = await client.list_groups()
    assert isinstance(groups, Fetched)
    by_name = {g.name: g for g in groups.value}
    assert list(by_name) == ["course-101", "lab"]
    assert by_name["course-101"].member_usernames == {"carol", "dave"}
    assert by_name["lab"].is_active
    assert not by_name["lab"].on_demand_auto_join


OLD_GROUPS = [
    {"id": 1, "name": "lab", "members": [{"username": "alice"}]},
    {"id": 2, "name": "broken", "members": "not a list"},
]


async def test_a_malformed_unlisted_group_does_not_break_the_listed_ones(app: Running) -> None:
    await app.fault(method="GET", path="/api/groups", status=200, body=OLD_GROUPS, count=2)
    async with app.client() as client:
        listed = await client.list_groups(["lab"])
        everything = await client.list_groups()
    assert isinstance(listed, Fetched)
    (lab,) = listed.value
    assert lab.is_active
    assert not lab.on_demand_auto_join
    assert lab.member_usernames == {"alice"}
    assert isinstance(everything, Transient)
    assert everything.reason is TransientReason.MALFORMED


OLD_RESERVATION = {
    "id": 5,
    "user_id": None,
    "user": None,
    "group_id": None,
    "gpu_class_id": 1,
    "gpu_class": {"id": 1, "name": "H100"},
    "date": "2026-10-05",
    "start_utc": "2026-10-05T17:00:00.250+00:00",
    "end_utc": "2026-10-05T18:00:00",
    "gpu_count": 2,
    "su_cost": 4.5,
    "kind": "reclaim",
    "status": "active",
    "cancelled_by": {"id": 3, "username": "admin", "full_name": "An Admin"},
    "submitted_by": {"id": 3, "username": "admin", "full_name": "An Admin"},
    "created_at": "2026-10-01T00:00:00Z",
    "updated_at": "2026-10-01T00:00:00Z",
    "brand_new_field": {"anything": True},
}


async def test_older_shapes_are_read(app: Running, client: AppClient) -> None:
    await app.fault(method="GET", path="/api/reservations", status=200, body=[OLD_RESERVATION])
    await app.fault(
        method="GET",
        path="/api/gpu-classes",
        status=200,
        body=[{"id": 9, "name": "Old", "management_buffer": 2}],
    )
    rows = await client.list_reservations(*WINDOW)
    assert isinstance(rows, Fetched)
    (row,) = rows.value
    assert (row.kind, row.su_cost_user, row.su_cost_original, row.username) == (
        "reclaim",
        4.5,
        4.5,
        None,
    )
    assert row.end_utc.tzinfo is not None
    assert row.end_utc.hour == 18
    assert row.gpu_class.label_value is None
    classes = await client.list_gpu_classes()
    assert isinstance(classes, Fetched)
    assert classes.value[0].capacity is None


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        pytest.param(
            {"status": 502, "body": "<html><body>Bad gateway</body></html>"},
            Transient,
            id="html-5xx",
        ),
        pytest.param(
            {"status": 401, "body": "<html>login required</html>"}, Unauthorised, id="html-401"
        ),
        pytest.param({"status": 403}, Forbidden, id="403"),
        pytest.param({"status": 200, "malformed": True}, Transient, id="truncated-json-200"),
        pytest.param({"status": 200, "body": {"not": "a list"}}, Transient, id="object-not-list"),
        pytest.param(
            {"status": 422, "body": {"detail": [{"loc": ["query"], "msg": "bad"}]}},
            Invalid,
            id="validation-array",
        ),
    ],
)
async def test_error_bodies_of_every_shape(
    app: Running, client: AppClient, fault: dict[str, Any], expected: type
) -> None:
    await app.fault(method="GET", path="/api/gpu-classes", **fault)
    result = await client.list_gpu_classes()
    assert isinstance(result, expected)
    if fault.get("body") == "<html><body>Bad gateway</body></html>":
        assert isinstance(result, Transient)
        assert result.status == 502
        assert "Bad gateway" in result.detail
    if isinstance(result, Invalid):
        assert "bad" in result.detail  # the array is stringified, never dropped


async def test_long_error_bodies_are_truncated(app: Running, client: AppClient) -> None:
    await app.fault(method="GET", path="/api/gpu-classes/*", status=500, body={"detail": "x" * 900})
    result = await client.get_gpu_class(1)
    assert isinstance(result, Transient)
    assert result.detail == "x" * 200 + "…"


async def test_an_empty_error_body_is_no_reason(app: Running, client: AppClient) -> None:
    await app.fault(method="GET", path="/api/gpu-classes", status=503, body="")
    result = await client.list_gpu_classes()
    assert isinstance(result, Transient)
    assert result.detail == ""


async def test_a_slow_answer_times_out(app: Running) -> None:
    await app.fault(method="GET", path="/api/gpu-classes", delay_s=1.0)
    async with app.client(timeouts=Timeouts(default=0.2, long=0.2)) as client:
        result = await client.list_gpu_classes()
    assert isinstance(result, Transient)
    assert result.reason is TransientReason.TIMEOUT


async def test_an_unreachable_app_is_transient() -> None:
    async with AppClient("http://127.0.0.1:9", "gpures_" + "0" * 64) as client:
        result = await client.list_gpu_classes()
    assert isinstance(result, Transient)
    assert result.reason is TransientReason.NETWORK


class Recording(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.headers: list[httpx.Headers] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.headers.append(request.headers)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def test_the_trace_header_is_sent_only_inside_a_unit_of_work(app: Running) -> None:
    transport = Recording()
    async with app.client(transport=transport) as client:
        await client.list_gpu_classes()
        with unit_of_work("fetch") as trace:
            await client.list_gpu_classes()
    outside, inside = transport.headers
    assert "x-client-trace" not in outside
    assert inside["x-client-trace"] == trace
    assert trace.startswith("fetch-")
    assert len(trace) == len("fetch-") + 10


async def test_the_key_is_never_logged(app: Running, caplog: pytest.LogCaptureFixture) -> None:
    key = app.keys[KeyScope.READ_WRITE]
    await app.fault(method="*", path="/api/*", status=500, count=None)
    caplog.set_level(logging.DEBUG)
    async with app.client(clock=InstantClock()) as client:
        assert key not in repr(client)
        await client.list_reservations(*WINDOW)
        await client.get_gpu_class(1)
    await app.control("DELETE", "faults")
    async with AppClient("http://127.0.0.1:9", key) as client:
        await client.list_gpu_classes()
    text = " ".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    assert key not in text
    assert key[:15] in text
