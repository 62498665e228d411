"""The ledger's arithmetic: verdicts, hold edits and group decisions (no side effects).

Terms (``shared.ledger``): a *hold* is one entry of ``status.holds``; *used* is the
sum of every hold's GPUs. Every function here takes and returns values; the
compare-and-swap shell (``shared.ledger.cas``) and the reconciler call them.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from shared import model
from shared.model import GPUReservation, Hold


class Reason(StrEnum):
    """Why a claim ended as it did. A ``StrEnum``: each compares equal to its value, so
    ``result.reason == "full"`` and ``reason in {"error", "deadline"}`` keep working."""

    ADMITTED = "admitted"
    #: The holds leave too little room.
    FULL = "full"
    #: The request alone exceeds the budget: waiting never helps.
    TOO_SMALL = "too_small"
    #: Cancelled, or outside ``[start, end)`` (a best-effort stub only needs to be active).
    NOT_OPEN = "not_open"
    NOT_FOUND = "not_found"
    #: The caller's deadline passed before a write landed.
    DEADLINE = "deadline"
    #: The API answered something else than a lost race, or the object is malformed.
    ERROR = "error"


#: The reasons that say nothing about the budget: the claim could not be made at all.
STOPS = frozenset({Reason.NOT_FOUND, Reason.DEADLINE, Reason.ERROR})


def used(res: GPUReservation) -> int:
    """GPUs claimed by every hold."""
    return res.used_gpus


def free(res: GPUReservation) -> int:
    """GPUs left in the budget (negative when pods admitted elsewhere overran it)."""
    return res.facts.gpu_count - used(res)


def fits(res: GPUReservation, gpus: int) -> bool:
    """Whether a new hold of ``gpus`` keeps the holds within ``gpuCount``."""
    return gpus >= 0 and used(res) + gpus <= res.facts.gpu_count


def open_for_claims(facts: model.ReservationFacts, now: datetime) -> bool:
    """Whether a new hold may be made under ``facts`` at ``now``: active, and inside
    the window unless a best-effort stub (whose window has zero length)."""
    if facts.state is model.State.CANCELLED:
        return False
    return facts.kind is model.Kind.BEST_EFFORT or facts.is_open(now)


def verdict(res: GPUReservation, gpus: int, now: datetime) -> Reason:
    """Why a claim of ``gpus`` at ``now`` would be refused, or ``Reason.ADMITTED``.

    Order: ``NOT_OPEN`` (``open_for_claims`` fails), ``TOO_SMALL`` (the request alone
    exceeds the budget), ``FULL`` (the holds leave too little).
    """
    return verdict_on(res.facts, used(res), gpus, now)


def verdict_on(facts: model.ReservationFacts, used_gpus: int, gpus: int, now: datetime) -> Reason:
    """``verdict`` for a ledger whose holds sum to ``used_gpus``."""
    if not open_for_claims(facts, now):
        return Reason.NOT_OPEN
    if gpus > facts.gpu_count:
        return Reason.TOO_SMALL
    fit = gpus >= 0 and used_gpus + gpus <= facts.gpu_count
    return Reason.ADMITTED if fit else Reason.FULL


class LedgerFull(ValueError):
    """A hold was added that does not fit the budget."""


def add_hold(res: GPUReservation, hold: Hold) -> GPUReservation:
    """``res`` with ``hold`` appended; ``LedgerFull`` when it does not fit."""
    if not fits(res, hold.gpus):
        raise LedgerFull(f"{res.name}: {hold.gpus} GPU(s) do not fit, {free(res)} free")
    return replace(res, holds=(*res.holds, hold))


def drop(res: GPUReservation, claims: Collection[str]) -> GPUReservation:
    """``res`` without the holds of ``claims`` (claim ids or their keys)."""
    keys = {model.as_claim_key(c) for c in claims}
    return replace(res, holds=tuple(h for h in res.holds if h.claim not in keys))


def bind(res: GPUReservation, claim_id: str, pod: str, pod_uid: str) -> GPUReservation:
    """``res`` with the hold of ``claim_id`` (a claim id or its key) tied to the pod
    (name and uid)."""
    key = model.as_claim_key(claim_id)
    holds = tuple(replace(h, pod=pod, pod_uid=pod_uid) if h.claim == key else h for h in res.holds)
    return replace(res, holds=holds)


def announce_all(res: GPUReservation, pods: Mapping[str, tuple[str, str]]) -> GPUReservation:
    """``res`` with each hold whose claim id is in ``pods`` (claim → pod name, uid) tied
    to that pod and marked announced (the ``RuntimeGuaranteed`` Event was sent), for
    many claims in one walk over the holds. Claims are claim ids or their keys."""
    by_key = {model.as_claim_key(c): pod for c, pod in pods.items()}
    holds = tuple(
        replace(h, pod=by_key[h.claim][0], pod_uid=by_key[h.claim][1], announced=True)
        if h.claim in by_key
        else h
        for h in res.holds
    )
    return replace(res, holds=holds)


def stale_claims(res: GPUReservation, now: datetime, ttl_s: float) -> list[str]:
    """Claim keys of unbound holds made more than ``ttl_s`` seconds before ``now``."""
    cutoff = now - timedelta(seconds=ttl_s)
    return [h.claim for h in res.holds if not h.bound and h.at < cutoff]


def expire(res: GPUReservation, now: datetime, ttl_s: float) -> GPUReservation:
    """``res`` without unbound holds older than the TTL (a create that never happened)."""
    return drop(res, set(stale_claims(res, now, ttl_s)))


@dataclass(frozen=True, slots=True)
class Ask:
    """One pod's request within a group claim: ``gpus`` at ``now`` for ``pod``."""

    gpus: int
    pod: str | None
    now: datetime
    #: The hold is written already announced (a re-link sends its own
    #: ``RuntimeGuaranteed``, so the admission announcer must not send another).
    announced: bool = field(default=False, kw_only=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What ``decide_group`` made of a group of asks."""

    #: The ledger with the new holds (the one read when none was admitted).
    ledger: GPUReservation
    #: Each ask's reason, in the asks' order.
    reasons: list[Reason]
    #: The new holds, in the asks' order.
    new: list[Hold]


def decide_group(
    res: GPUReservation,
    asks: Sequence[Ask],
    claim_ids: Sequence[str],
    token: str | None = None,
) -> Decision:
    """Admit ``asks`` in order while they fit (no side effects).

    Each ask is judged by ``verdict`` against the ledger holding the asks admitted
    before it, so the group never holds more than the budget — exactly as the same asks
    made one after another would. Ask ``i``'s hold keeps ``model.claim_key(claim_ids[i])``
    (the claim id itself goes only onto the pod), made at its ask's instant as stored
    (``model.stored_instant``: the ledger a write leaves is the one its answer would
    show). ``token``: the ledger token the write sets, given to the ledger returned when
    it holds new holds.
    """
    reasons: list[Reason] = []
    new: list[Hold] = []
    taken = used(res)  # summed once, then kept: not once per ask over every hold
    for ask, claim_id in zip(asks, claim_ids, strict=True):
        reason = verdict_on(res.facts, taken, ask.gpus, ask.now)
        reasons.append(reason)
        if reason is Reason.ADMITTED:
            at = model.stored_instant(ask.now)
            key = model.claim_key(claim_id)
            new.append(Hold(key, ask.gpus, at, pod=ask.pod, announced=ask.announced))
            taken += ask.gpus
    if new:
        changed: dict[str, Any] = {"holds": (*res.holds, *new)}
        if token is not None:
            changed["token"] = token
        res = replace(res, **changed)
    return Decision(ledger=res, reasons=reasons, new=new)


def new_claim_ids(count: int) -> list[str]:
    """``count`` fresh claim ids: random (version 4) UUIDs in their text form, as
    ``str(uuid.uuid4())`` gives them, from one read of the system's randomness."""
    raw = bytearray(os.urandom(16 * count))
    for at in range(6, 16 * count, 16):
        raw[at] = raw[at] & 0x0F | 0x40  # version 4
        raw[at + 2] = raw[at + 2] & 0x3F | 0x80  # the RFC 4122 variant
    text = raw.hex()
    return [
        f"{text[i : i + 8]}-{text[i + 8 : i + 12]}-{text[i + 12 : i + 16]}-"
        f"{text[i + 16 : i + 20]}-{text[i + 20 : i + 32]}"
        for i in range(0, 32 * count, 32)
    ]
