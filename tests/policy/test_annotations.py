"""The admission annotation set, written by one function."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import model, vocab
from shared.clock import format_utc
from shared.policy.annotations import (
    ADMISSION_KEYS,
    admission_annotations,
    guarantee_status,
    reservation_facts,
    utc_text,
)
from tests.policy.builders import HOUR, NOW, reservation


def test_first_admission_writes_every_key_in_wire_format() -> None:
    res = reservation(42, gpus=2)
    notes = admission_annotations(
        res.facts, claim="c-1", guaranteed_until=NOW + 3 * HOUR, now=NOW, admitted_at=NOW
    )
    assert notes == {
        vocab.BOOKING_REFERENCE: "res-42",
        vocab.ADMISSION_CLAIM: "c-1",
        vocab.POD_RUNTIME_LIMIT_SECONDS: "10800",
        vocab.GUARANTEED_UNTIL: "2026-01-05T13:00:00Z",
        vocab.GUARANTEE_STATUS: vocab.GUARANTEE_STATUS_GUARANTEED,
        vocab.RESERVATION_KIND: "booking",
        vocab.RESERVATION_START: "2026-01-05T09:00:00Z",
        vocab.RESERVATION_END: "2026-01-05T12:00:00Z",
        vocab.RESERVATION_GPU_COUNT: "2",
        vocab.GPU_CLASS_NAME: "H100",
        vocab.ADMITTED_AT: "2026-01-05T10:00:00Z",
    }
    assert set(notes) == ADMISSION_KEYS
    assert ADMISSION_KEYS <= vocab.CONTROLLER_OWNED_ANNOTATIONS


def test_a_relink_keeps_admitted_at_and_the_claim_when_not_given() -> None:
    notes = admission_annotations(
        reservation().facts, claim=None, guaranteed_until=NOW + HOUR, now=NOW, admitted_at=None
    )
    assert vocab.ADMITTED_AT not in notes
    assert vocab.ADMISSION_CLAIM not in notes


def test_best_effort_records_zero_seconds() -> None:
    res = reservation(kind=model.Kind.BEST_EFFORT, start=NOW, end=NOW)
    notes = admission_annotations(
        res.facts, claim="c", guaranteed_until=NOW, now=NOW, admitted_at=NOW
    )
    assert notes[vocab.POD_RUNTIME_LIMIT_SECONDS] == "0"
    assert notes[vocab.GUARANTEE_STATUS] == vocab.GUARANTEE_STATUS_OVERSTAY


def test_status_flips_at_the_instant() -> None:
    assert guarantee_status(NOW, NOW - timedelta(seconds=1)) == vocab.GUARANTEE_STATUS_GUARANTEED
    assert guarantee_status(NOW, NOW) == vocab.GUARANTEE_STATUS_OVERSTAY


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    micros=st.integers(0, 10**6 - 1),
    seconds=st.integers(-(10**6), 10**6),
    offset_min=st.sampled_from([0, 60, -330, 345]),
)
def test_remembered_instant_texts_are_the_instants_own(
    micros: int, seconds: int, offset_min: int
) -> None:
    """The same second in another zone or with other microseconds has the same text;
    any other second its own."""
    zone = timezone(timedelta(minutes=offset_min))
    instant = (NOW + timedelta(seconds=seconds, microseconds=micros)).astimezone(zone)
    assert utc_text(instant) == format_utc(instant)
    assert utc_text(instant + timedelta(seconds=1)) == format_utc(instant + timedelta(seconds=1))


@settings(deadline=None)
@given(instant=st.datetimes(min_value=datetime(1900, 1, 2), max_value=datetime(2200, 1, 1)))
def test_remembered_instant_texts_hold_before_the_epoch_and_without_a_zone(
    instant: datetime,
) -> None:
    """Keyed by whole seconds since the epoch (flooring before 1970 too), or — naive —
    by the instant's own second, read as ``format_utc`` reads it."""
    aware = instant.replace(tzinfo=UTC)
    assert utc_text(aware) == format_utc(aware)
    assert utc_text(instant) == format_utc(instant)


def test_reservation_facts_are_rendered_per_facts_and_handed_out_as_copies() -> None:
    res = reservation(7, gpus=2)
    first = reservation_facts(res.facts)
    first[vocab.RESERVATION_GPU_COUNT] = "edited by a caller"
    assert reservation_facts(res.facts)[vocab.RESERVATION_GPU_COUNT] == "2"
    moved = dataclasses.replace(res.facts, end=res.facts.end + HOUR, gpu_count=3)
    assert reservation_facts(moved)[vocab.RESERVATION_END] == format_utc(moved.end)
    assert reservation_facts(moved)[vocab.RESERVATION_GPU_COUNT] == "3"
