"""Honouring a 429's ``Retry-After``: the pure rules (the gateway against the emulator's
injected 429 is in tests/kube/test_gateway.py) and the watched cache's relist wait."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.errors import ServerError, TooManyRequests
from shared.gateway import (
    THROTTLE_RETRIES,
    THROTTLE_WAIT_CAP_S,
    ListResult,
    retry_after_s,
    throttle_wait,
)
from shared.resources import PODS
from shared.watch import Watched, relist_wait


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("2", 2.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        ("86400", 86400.0),
        (None, None),
        ("", None),
        ("-1", None),
        ("1.5", None),
        ("1e3", None),
        ("²", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None),
    ],
    ids=str,
)
def test_retry_after_is_whole_non_negative_seconds_or_nothing(
    header: str | None, seconds: float | None
) -> None:
    assert retry_after_s(header) == seconds


def throttled(after: float | None) -> TooManyRequests:
    error = TooManyRequests(429, "slow down")
    error.retry_after_s = after
    return error


def test_throttle_wait_is_bounded_and_only_for_a_readable_429() -> None:
    assert throttle_wait(throttled(2.0), 0) == 2.0
    assert throttle_wait(throttled(3600.0), 0) == THROTTLE_WAIT_CAP_S
    assert throttle_wait(throttled(2.0), THROTTLE_RETRIES - 1) == 2.0
    assert throttle_wait(throttled(2.0), THROTTLE_RETRIES) is None
    assert throttle_wait(throttled(None), 0) is None
    assert throttle_wait(ServerError(503, "busy"), 0) is None


def test_relist_wait_takes_the_longer_of_retry_and_retry_after_capped() -> None:
    assert relist_wait(ServerError(500, "x"), 1.0) == 1.0
    assert relist_wait(throttled(None), 1.0) == 1.0
    assert relist_wait(throttled(0.0), 1.0) == 1.0
    assert relist_wait(throttled(3.0), 1.0) == 3.0
    assert relist_wait(throttled(3600.0), 1.0) == THROTTLE_WAIT_CAP_S


class Naps:
    """A clock whose sleep records the wait and returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def now(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC)

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)


class Throttled:
    """A gateway whose first LIST is throttled (``Retry-After: 3``), then empty."""

    def __init__(self) -> None:
        self.lists = 0

    async def list_all(self, *args: Any, **kwargs: Any) -> ListResult:
        self.lists += 1
        if self.lists == 1:
            raise throttled(3.0)
        return ListResult([], "1")

    async def watch(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.Event().wait()
        yield  # pragma: no cover - never reached


def test_a_watched_cache_waits_out_a_throttled_lists_retry_after() -> None:
    async def scenario() -> None:
        naps = Naps()
        cache: Watched[Any] = Watched(Throttled(), PODS, lambda o: o, clock=naps, retry_s=1.0)
        task = asyncio.create_task(cache.run())
        await asyncio.wait_for(cache.synced.wait(), timeout=30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert naps.waits == [3.0]

    asyncio.run(scenario())
