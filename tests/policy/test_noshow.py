"""No-show rules (R14): deadlines, claims through chains, the durable record."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared import model
from shared.policy import noshow
from shared.policy.noshow import Record, Rules, Tracker, claimed, is_booking_in_play, step
from tests.policy.builders import HOUR, NOW, reservation

RULES = Rules(timeout=timedelta(minutes=15), grace=timedelta(minutes=30))
MIN = timedelta(minutes=1)


def later(start_in: timedelta = HOUR, rid: int = 1) -> model.ReservationFacts:
    return reservation(rid, start=NOW + start_in, end=NOW + start_in + 2 * HOUR).facts


def test_a_booking_seen_before_it_opens_is_due_timeout_after_its_start() -> None:
    facts = later()
    tracker, fired = step({facts.name: facts}, set(), Tracker(), NOW, RULES)
    assert fired == []
    assert tracker.deadlines == {facts.name: facts.start + RULES.timeout}
    assert tracker.next_deadline() == facts.start + RULES.timeout


def test_the_deadline_is_inclusive() -> None:
    facts = later()
    due = facts.start + RULES.timeout
    tracker, _ = step({facts.name: facts}, set(), Tracker(), NOW, RULES)
    tracker, fired = step({facts.name: facts}, set(), tracker, due - timedelta(seconds=1), RULES)
    assert fired == []
    _, fired = step({facts.name: facts}, set(), tracker, due, RULES)
    assert fired == [(facts.name, due)]


def test_a_booking_first_seen_open_gets_the_grace_from_now() -> None:
    facts = reservation().facts  # opened an hour ago
    tracker, fired = step({facts.name: facts}, set(), Tracker(), NOW, RULES)
    assert fired == []
    assert tracker.deadlines[facts.name] == NOW + RULES.grace


def test_a_claimed_booking_has_no_deadline_and_once_vacated_gets_the_grace() -> None:
    facts = later(start_in=-HOUR)
    tracker, _ = step({facts.name: facts}, set(), Tracker(), NOW - 2 * HOUR, RULES)
    assert tracker.deadlines[facts.name] == facts.start + RULES.timeout
    tracker, fired = step({facts.name: facts}, {facts.name}, tracker, NOW - 50 * MIN, RULES)
    assert (fired, dict(tracker.deadlines)) == ([], {})
    # Its pod finished at NOW: the old deadline is long past, but it gets the grace.
    tracker, fired = step({facts.name: facts}, set(), tracker, NOW, RULES)
    assert fired == []
    assert tracker.deadlines[facts.name] == NOW + RULES.grace


def test_bookings_that_left_play_are_forgotten() -> None:
    facts = later()
    tracker, _ = step({facts.name: facts}, set(), Tracker(), NOW, RULES)
    tracker, _ = step({}, set(), tracker, NOW, RULES)
    assert tracker.deadlines == {}


def test_zero_timeout_declares_at_the_window_start() -> None:
    facts = later()
    rules = Rules(timedelta(0), timedelta(0))
    tracker, _ = step({facts.name: facts}, set(), Tracker(), NOW, rules)
    _, fired = step({facts.name: facts}, set(), tracker, facts.start, rules)
    assert fired == [(facts.name, facts.start)]


@pytest.mark.parametrize(
    ("overrides", "in_play"),
    [
        pytest.param({}, True, id="an active booking with time left"),
        pytest.param({"kind": model.Kind.ON_DEMAND}, False, id="an on-demand lease"),
        pytest.param({"kind": model.Kind.BEST_EFFORT}, False, id="a best-effort stub"),
        pytest.param({"state": model.State.CANCELLED}, False, id="cancelled"),
        pytest.param({"owner": ""}, False, id="no owner"),
        pytest.param({"end": NOW}, False, id="the window has ended"),
    ],
)
def test_which_reservations_are_in_play(overrides: dict[str, Any], in_play: bool) -> None:
    end = overrides.pop("end", None)
    facts = reservation(**overrides, **({"end": end} if end else {})).facts
    assert is_booking_in_play(facts, NOW) is in_play


def test_a_holder_claims_its_booking_and_the_bookings_its_guarantee_chains_through() -> None:
    first = reservation(1, start=NOW - HOUR, end=NOW + HOUR).facts
    second = reservation(2, start=NOW + HOUR, end=NOW + 2 * HOUR).facts
    third = reservation(3, start=NOW + 2 * HOUR, end=NOW + 3 * HOUR, gpus=4).facts  # not a link
    pool = {f.name: f for f in (first, second, third)}
    assert claimed({first.name}, pool, NOW, use_group=False) == {first.name, second.name}
    assert claimed({"res-99"}, pool, NOW, use_group=False) == {"res-99"}
    assert claimed(set(), pool, NOW, use_group=False) == set()


def test_the_record_round_trips_through_the_status() -> None:
    res = reservation()
    rec = Record(NOW, NOW - MIN, cancelled_at=NOW + MIN, attempts=2, last_error="503")
    written = noshow.with_record(res, rec)
    assert written.holds == res.holds
    assert noshow.record_of(written) == rec
    assert noshow.record_of(noshow.with_record(written, None)) is None
    assert rec.pending is False
    assert Record(NOW, NOW).pending is True


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("yes", id="not an object"),
        pytest.param({"deadline": "2026-01-05T10:00:00Z"}, id="no declaredAt"),
        pytest.param({"declaredAt": "soon", "deadline": "2026-01-05T10:00:00Z"}, id="bad time"),
        pytest.param(
            {
                "declaredAt": "2026-01-05T10:00:00Z",
                "deadline": "2026-01-05T10:00:00Z",
                "attempts": -1,
            },
            id="negative attempts",
        ),
        pytest.param(
            {
                "declaredAt": "2026-01-05T10:00:00Z",
                "deadline": "2026-01-05T10:00:00Z",
                "cancelledAt": 5,
            },
            id="cancelledAt not a string",
        ),
    ],
)
def test_a_malformed_record_is_an_error_naming_the_field(raw: Any) -> None:
    res = reservation()
    bad = model.GPUReservation(res.facts, res.holds, "1", {noshow.STATUS_KEY: raw})
    with pytest.raises(ValueError, match=noshow.STATUS_KEY):
        noshow.record_of(bad)


def test_declared_ids_count_pending_and_landed_records_but_not_malformed_ones() -> None:
    pending = noshow.with_record(reservation(1), Record(NOW, NOW))
    landed = noshow.with_record(reservation(2), Record(NOW, NOW, cancelled_at=NOW))
    plain = reservation(3)
    bad = model.GPUReservation(reservation(4).facts, (), "1", {noshow.STATUS_KEY: "x"})
    assert noshow.declared([pending, landed, plain, bad]) == {1, 2}
