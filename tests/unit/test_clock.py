"""Clocks: manual time fires sleepers at their exact instants; parsing is strict."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from shared.clock import ManualClock, ScaledClock, format_utc, parse_utc, utc


def test_manual_clock_wakes_sleepers_in_deadline_order() -> None:
    async def scenario() -> list[tuple[str, datetime]]:
        clock = ManualClock(utc(2026, 3, 1, 12))
        woke: list[tuple[str, datetime]] = []

        async def sleeper(name: str, seconds: float) -> None:
            await clock.sleep(seconds)
            woke.append((name, clock.now()))

        tasks = [asyncio.create_task(sleeper("b", 20)), asyncio.create_task(sleeper("a", 10))]
        await asyncio.sleep(0)
        assert clock.pending_sleepers() == 2
        await clock.advance(15)
        assert woke == [("a", utc(2026, 3, 1, 12, 0, 10))]
        await clock.advance(15)
        await asyncio.gather(*tasks)
        assert clock.now() == utc(2026, 3, 1, 12, 0, 30)
        return woke

    woke = asyncio.run(scenario())
    assert [name for name, _ in woke] == ["a", "b"]
    assert woke[1][1] == utc(2026, 3, 1, 12, 0, 20)


def test_manual_clock_rejects_naive_start() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        ManualClock(datetime(2026, 1, 1))


def test_scaled_clock_runs_faster_from_its_epoch() -> None:
    clock = ScaledClock(factor=60, epoch=utc(2026, 1, 1), started_at=1000.0)
    # one real second after start is one sandbox minute
    import time as real_time

    elapsed = real_time.time() - 1000.0
    assert clock.now() >= utc(2026, 1, 1) + timedelta(seconds=elapsed * 60 - 1)


def test_scaled_clock_rejects_non_positive_factor() -> None:
    with pytest.raises(ValueError, match="factor"):
        ScaledClock(factor=0)


def test_format_utc_is_second_precision_z() -> None:
    instant = datetime(2026, 7, 15, 14, 20, 5, 123456, tzinfo=UTC)
    assert format_utc(instant) == "2026-07-15T14:20:05Z"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-07-15T14:20:00Z", utc(2026, 7, 15, 14, 20)),
        ("2026-07-15T07:20:00-07:00", utc(2026, 7, 15, 14, 20)),
        ("2026-07-15T14:20:00.5+00:00", utc(2026, 7, 15, 14, 20) + timedelta(seconds=0.5)),
    ],
)
def test_parse_utc_accepts_zoned_instants(text: str, expected: datetime) -> None:
    assert parse_utc(text) == expected


@pytest.mark.parametrize("text", ["2026-07-15T14:20:00", "tomorrow", "", "2026-13-01T00:00:00Z"])
def test_parse_utc_rejects_naive_and_malformed(text: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_utc(text)
