"""Acceptance 6 of issue 7: the waiting-status throttle on a manual clock."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from reconciler.base.throttle import ANNOTATIONS, HOLD, Throttle
from shared import vocab
from shared.clock import ManualClock

WAIT = vocab.REASON_WAITING_FOR_RESERVATION
FULL = vocab.REASON_RESERVATION_FULL


def make(repeat_min: float = 30) -> tuple[ManualClock, Throttle]:
    clock = ManualClock()
    return clock, Throttle(clock, timedelta(minutes=repeat_min))


def test_unchanged_status_at_most_once_per_repeat_interval() -> None:
    clock, t = make(30)
    sends = 0
    for _ in range(61):  # one attempt a minute for an hour
        if t.due("u1", HOLD, WAIT, "res-1 opens 10:00 UTC"):
            t.sent("u1", HOLD, WAIT, "res-1 opens 10:00 UTC")
            sends += 1
        asyncio.run(clock.advance(60))
    assert sends == 3  # at 0, 30 and 60 minutes


def test_changed_status_is_sent_at_once() -> None:
    clock, t = make(30)
    t.sent("u1", HOLD, WAIT, "res-1")
    asyncio.run(clock.advance(1))
    assert not t.due("u1", HOLD, WAIT, "res-1")
    assert t.due("u1", HOLD, FULL, "res-1 held by p0")  # another reason
    assert t.due("u1", HOLD, WAIT, "res-2")  # same reason, other text


def test_topics_and_pods_are_independent() -> None:
    _, t = make(30)
    t.sent("u1", HOLD, WAIT, "x")
    assert t.due("u1", ANNOTATIONS, vocab.REASON_ANNOTATION_IGNORED, "x")
    assert t.due("u2", HOLD, WAIT, "x")


def test_a_failed_send_is_not_recorded_and_zero_repeat_sends_every_time() -> None:
    _, t = make(30)
    assert t.due("u1", HOLD, WAIT, "x")  # due, but the send failed: nothing recorded
    assert t.due("u1", HOLD, WAIT, "x")
    _, every = make(0)
    every.sent("u1", HOLD, WAIT, "x")
    assert every.due("u1", HOLD, WAIT, "x")


def test_forget_and_prune() -> None:
    clock, t = make(30)
    t.sent("u1", HOLD, WAIT, "x")
    t.sent("u2", HOLD, WAIT, "x")
    t.forget("u1")
    assert t.due("u1", HOLD, WAIT, "x")
    asyncio.run(clock.advance(2 * 3600 + 1))
    assert t.prune(live={"u3"}) == 1
    assert t.due("u2", HOLD, WAIT, "x")
