"""The admission annotation set, written by one function."""

from __future__ import annotations

from datetime import timedelta

from shared import model, vocab
from shared.policy.annotations import ADMISSION_KEYS, admission_annotations, guarantee_status
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
