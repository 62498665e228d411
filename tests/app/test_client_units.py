"""Pure client pieces: paging, backoff, envelope reading, request helpers."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.appclient import (
    AppClient,
    Denial,
    DenialClass,
    Fetched,
    PageRetryPolicy,
    Transient,
    TransientReason,
    after_denial,
    cooldown,
    exponential,
    fetch_window,
    lease_key,
)
from shared.appclient.outcomes import Failure
from shared.appclient.paging import pull_all
from shared.appclient.reading import classify_failure, detail_of, excerpt

NOW = datetime(2026, 10, 5, 17, 0, tzinfo=UTC)


@pytest.mark.anyio
async def test_a_list_that_keeps_shifting_is_unstable() -> None:
    calls = 0

    async def fetch(offset: int, limit: int) -> list[int] | Failure:
        nonlocal calls
        calls += 1
        return list(range(offset + calls, offset + calls + limit))  # shifts every call

    result = await pull_all(fetch, key=lambda r: r, page_size=3, max_passes=3)
    assert isinstance(result, Transient)
    assert result.reason is TransientReason.UNSTABLE


@pytest.mark.anyio
async def test_a_stable_list_is_read_once_per_page() -> None:
    rows = list(range(10))
    offsets: list[int] = []

    async def fetch(offset: int, limit: int) -> list[int] | Failure:
        offsets.append(offset)
        return rows[offset : offset + limit]

    assert await pull_all(fetch, key=lambda r: r, page_size=4) == rows
    assert offsets == [0, 3, 6, 9]


@pytest.mark.anyio
async def test_page_size_one_cannot_overlap() -> None:
    async def fetch(offset: int, limit: int) -> list[int] | Failure:
        return []

    with pytest.raises(ValueError, match="at least 2"):
        await pull_all(fetch, key=lambda r: r, page_size=1)


def test_page_retry_policy() -> None:
    policy = PageRetryPolicy()
    assert policy.attempts == 3
    assert [policy.pause_after(n) for n in (1, 2, 3)] == [1.0, 2.0, None]


@given(st.integers(min_value=0, max_value=200), st.floats(min_value=0, max_value=0.999))
def test_exponential_backoff_is_capped_and_positive(attempt: int, draw: float) -> None:
    delay = exponential(attempt, 120.0, 1800.0, lambda: draw)
    assert 60.0 <= delay <= 1800.0
    assert exponential(attempt + 1, 120.0, 1800.0, lambda: 0.999) >= delay / 2


def test_cooldown_is_inside_two_to_five_minutes() -> None:
    rng = random.Random(3)
    assert all(120 <= cooldown(rng.random) <= 300 for _ in range(100))


@pytest.mark.parametrize(
    ("denial", "kind", "at"),
    [
        pytest.param(Denial(), DenialClass.CONTENDED, None, id="contended"),
        pytest.param(
            Denial(True, "su_budget_member", NOW + timedelta(minutes=20)),
            DenialClass.SCHEDULED,
            NOW + timedelta(minutes=20),
            id="scheduled-soon",
        ),
        pytest.param(
            Denial(True, "group_not_yet_valid", NOW + timedelta(days=3)),
            DenialClass.SCHEDULED,
            NOW + timedelta(minutes=30),
            id="scheduled-capped",
        ),
        pytest.param(Denial(False, "not_a_member"), DenialClass.STRUCTURAL, None, id="structural"),
    ],
)
def test_after_denial(denial: Denial, kind: DenialClass, at: datetime | None) -> None:
    plan = after_denial(denial, NOW, attempt=0, rand=lambda: 0.5)
    assert plan.kind is kind
    if at is not None:
        assert plan.at == at
    else:
        assert NOW + timedelta(minutes=1) <= plan.at <= NOW + timedelta(minutes=30)


def test_scheduled_in_the_past_uses_the_cooldown() -> None:
    plan = after_denial(Denial(True, None, NOW - timedelta(hours=1)), NOW, 0, lambda: 0.0)
    assert plan.at == NOW + timedelta(minutes=2)


def test_excerpts_and_details() -> None:
    assert excerpt("  hi  ") == "hi"
    assert excerpt("y" * 201) == "y" * 200 + "…"
    assert detail_of('{"detail": null}') == ""
    assert detail_of('{"detail": {"a": 1}}') == '{"a": 1}'
    assert detail_of("plain text") == "plain text"


@pytest.mark.parametrize(
    ("status", "kind"),
    [(429, Transient), (408, Transient), (599, Transient)],
)
def test_rate_limits_and_timeouts_are_transient(status: int, kind: type) -> None:
    assert isinstance(classify_failure(status, ""), kind)


def test_lease_keys_and_fetch_window() -> None:
    assert [lease_key("u", n) for n in (1, 2, 3)] == ["u", "u.2", "u.3"]
    with pytest.raises(ValueError, match=">= 1"):
        lease_key("u", 0)
    assert fetch_window(date(2026, 10, 5), 7) == (date(2026, 10, 4), date(2026, 10, 12))


@pytest.mark.anyio
async def test_mock_transport_plumbing_never_raises() -> None:
    def explode(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("boom", request=request)

    async with AppClient("http://app", "gpures_x", transport=httpx.MockTransport(explode)) as c:
        result = await c.get_gpu_class(1)
    assert isinstance(result, Transient)
    assert result.reason is TransientReason.NETWORK

    def ok(request: httpx.Request) -> httpx.Response:
        assert request.headers["x-api-key"] == "gpures_x"
        return httpx.Response(200, json={"id": 1, "name": "H100", "label_value": "h100"})

    async with AppClient("http://app/", "gpures_x", transport=httpx.MockTransport(ok)) as c:
        fetched = await c.get_gpu_class(1)
    assert isinstance(fetched, Fetched)
