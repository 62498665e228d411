"""The admission annotations: one writer for the webhook and the reconciler.

An admitted pod carries, byte-for-byte as the seed's table says (DESIGN §3.3):
``booking-reference`` (``res-<id>``), ``admission-claim`` (the ledger hold's claim id),
the guarantee facts (``pod-runtime-limit-seconds``, ``guaranteed-until``,
``guarantee-status``), the reservation facts (``reservation-kind``, ``-start``,
``-end``, ``-gpu-count``, ``gpu-class-name``) and ``admitted-at``. Instants are
machine-facing UTC ``YYYY-MM-DDTHH:MM:SSZ``. ``admitted-at`` is written on a pod's
first admission only — a re-link passes ``admitted_at=None`` and keeps the old value.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache

from shared import vocab
from shared.clock import format_utc
from shared.model import Kind, ReservationFacts
from shared.policy.windows import runtime_limit_seconds

#: Annotations the writer may set; anything else under ``galends/`` is left alone.
ADMISSION_KEYS = frozenset(
    {
        vocab.BOOKING_REFERENCE,
        vocab.ADMISSION_CLAIM,
        vocab.POD_RUNTIME_LIMIT_SECONDS,
        vocab.GUARANTEED_UNTIL,
        vocab.GUARANTEE_STATUS,
        vocab.RESERVATION_KIND,
        vocab.RESERVATION_START,
        vocab.RESERVATION_END,
        vocab.RESERVATION_GPU_COUNT,
        vocab.GPU_CLASS_NAME,
        vocab.ADMITTED_AT,
    }
)


def guarantee_status(until: datetime, now: datetime) -> str:
    """``guaranteed`` while ``now < until``, else ``overstay`` (R35)."""
    return vocab.GUARANTEE_STATUS_GUARANTEED if now < until else vocab.GUARANTEE_STATUS_OVERSTAY


#: Distinct instants and reservations whose texts are kept (a few per reservation).
MEMO_SIZE = 1024


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)


@lru_cache(maxsize=MEMO_SIZE)
def _second_utc(instant: datetime) -> str:
    return format_utc(instant)


@lru_cache(maxsize=MEMO_SIZE)
def _epoch_second_utc(second: int) -> str:
    return format_utc(_EPOCH + second * _SECOND)


def utc_text(instant: datetime) -> str:
    """``format_utc(instant)``, remembered per whole second: the same few instants
    (a reservation's start and end, its guarantee end, this second) are stamped on
    every pod admitted. An instant with a zone is keyed by its whole seconds since the
    epoch (exact integer arithmetic, a third of the cost of truncating the instant and
    hashing the copy); a naive one as ``format_utc`` reads it, by its own second."""
    if instant.tzinfo is None:
        return _second_utc(instant.replace(microsecond=0))
    return _epoch_second_utc((instant - _EPOCH) // _SECOND)


@lru_cache(maxsize=MEMO_SIZE)
def _fact_items(facts: ReservationFacts) -> tuple[tuple[str, str], ...]:
    return (
        (vocab.RESERVATION_KIND, facts.kind.value),
        (vocab.RESERVATION_START, utc_text(facts.start)),
        (vocab.RESERVATION_END, utc_text(facts.end)),
        (vocab.RESERVATION_GPU_COUNT, str(facts.gpu_count)),
        (vocab.GPU_CLASS_NAME, facts.gpu_class_name),
    )


def reservation_facts(facts: ReservationFacts) -> dict[str, str]:
    """The reservation-fact annotations (re-stamped on every re-link); rendered once
    per distinct ``facts`` (frozen, compared by value) and copied."""
    return dict(_fact_items(facts))


def guarantee_facts(until: datetime, now: datetime, *, best_effort: bool) -> dict[str, str]:
    """The guarantee annotations recorded at admission or re-link (R10)."""
    return {
        vocab.POD_RUNTIME_LIMIT_SECONDS: str(
            runtime_limit_seconds(until, now, best_effort=best_effort)
        ),
        vocab.GUARANTEED_UNTIL: utc_text(until),
        vocab.GUARANTEE_STATUS: guarantee_status(until, now),
    }


def admission_annotations(
    facts: ReservationFacts,
    *,
    claim: str | None,
    guaranteed_until: datetime,
    now: datetime,
    admitted_at: datetime | None,
) -> dict[str, str]:
    """Every annotation an admission (or a re-link) writes; no side effects.

    ``claim`` is the ledger claim id (None: keep whatever the pod has, e.g. a hold the
    reconciler rebuilt without one). ``admitted_at`` is None on a re-link so the first
    admission's instant stays. A best-effort reservation records 0 seconds.
    """
    best_effort = facts.kind is Kind.BEST_EFFORT
    notes = {vocab.BOOKING_REFERENCE: facts.name}
    if claim is not None:
        notes[vocab.ADMISSION_CLAIM] = claim
    notes.update(guarantee_facts(guaranteed_until, now, best_effort=best_effort))
    notes.update(_fact_items(facts))
    if admitted_at is not None:
        notes[vocab.ADMITTED_AT] = utc_text(admitted_at)
    return notes
