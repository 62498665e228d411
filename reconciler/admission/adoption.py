"""Which admitted pods may be re-linked, and onto which booking (R25, R26, R40): the
pure half of ``reconciler.admission.relink``.

A pod is *movable* when it is bound to a node, not leaving, and has GPUs; it is
*overstaying* when it is past its guarantee (R10) and its booking was not cancelled
mid-window (the eviction path re-links those with its own cause). ``target`` chooses
among the owner's matching open bookings with room (minus what this pass already
took) the one whose chained guarantee ends last, then the lowest id. The ``Cause`` of a
move names its Event (``relink_reason``) and its words (``relinked_message``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from enum import StrEnum
from zoneinfo import ZoneInfo

from reconciler.admission.guarantees import live_end
from reconciler.base.pods import PodView
from shared import ledger, vocab
from shared.model import GPUReservation, Kind, State
from shared.policy.matching import MatchRules, mismatch
from shared.policy.windows import guarantee_end
from shared.policy.wording import when


class Cause(StrEnum):
    """Why a pod is re-linked (decides the Event reason)."""

    OVERSTAY = vocab.GUARANTEE_STATUS_OVERSTAY
    REPLACED = "replaced"
    #: An on-demand lease's pod moved onto its owner's booking as it opened (R25).
    MERGED = "merged"


def node_resident(pod: PodView) -> bool:
    """Bound to a node and not finished (it holds GPUs there)."""
    return pod.node is not None and pod.phase in {"Running", "Pending"}


def movable(pod: PodView) -> bool:
    """A pod a re-link may move: admitted, on a node, not leaving, with GPUs, carrying
    a reservation toleration (the granted one of its booking's class; its label may
    have been edited since — the target is of the same class, ``target``)."""
    return (
        pod.reference is not None
        and not pod.deleting
        and node_resident(pod)
        and pod.gpus > 0
        and pod.declared
        and bool(pod.uid)
    )


def overstaying(
    pod: PodView, reservations: Mapping[str, GPUReservation], now: datetime, *, use_group: bool
) -> bool:
    """Past its guarantee (R10): none left, or its chain ended at or before ``now``."""
    if pod.reference is None:
        return True
    pool = [r.facts for r in reservations.values()]
    end = live_end(reservations.get(pod.reference), pool, now, use_group=use_group)
    return end is None or end <= now


def cancelled_in_window(res: GPUReservation | None, now: datetime) -> bool:
    """A reservation cancelled while its window is open: its pods are the eviction
    path's (``reconciler.queue.evict`` re-links them as replaced, else evicts them)."""
    if res is None or res.facts.state is not State.CANCELLED:
        return False
    return res.facts.start <= now < res.facts.end


def target(
    pod: PodView,
    reservations: Mapping[str, GPUReservation],
    now: datetime,
    rules: MatchRules,
    taken: Mapping[str, int],
) -> GPUReservation | None:
    """The open booking to move ``pod`` onto, or None (no side effects). The pod's
    class is its current booking's (its admission), not its editable label."""
    pool = [r.facts for r in reservations.values()]
    current = reservations.get(pod.reference) if pod.reference else None
    profile = pod.profile
    if current is not None:
        profile = replace(profile, gpu_class=current.facts.gpu_class)
    fits = [
        r
        for r in reservations.values()
        if r.name != pod.reference
        and r.facts.kind is Kind.BOOKING
        and r.facts.is_open(now)
        and mismatch(r.facts, profile, now, rules) is None
        and ledger.free(r) - taken.get(r.name, 0) >= pod.gpus
    ]

    def rank(r: GPUReservation) -> tuple[datetime, int]:
        return (guarantee_end(r.facts, pool, now, use_group=rules.use_group), -r.facts.id)

    return max(fits, key=rank, default=None)


def relinked_message(
    cause: Cause, old: str, new: GPUReservation, until: datetime, zone: ZoneInfo | None
) -> str:
    """``OverstayRelinked`` / ``ReservationRelinked``."""
    whys = {
        Cause.OVERSTAY: f"The pod had run past its guarantee under {old}",
        Cause.REPLACED: f"Reservation {old} was cancelled while the pod ran",
        Cause.MERGED: f"Your booking opened while the pod ran under its on-demand lease {old}",
    }
    why = whys[cause]
    return (
        f"{why}; it now runs under your reservation {new.name}, "
        f"guaranteed until {when(until, zone)}."
    )


def relink_reason(cause: Cause) -> str:
    """The Event reason of a re-link (R26)."""
    if cause is Cause.OVERSTAY:
        return vocab.REASON_OVERSTAY_RELINKED
    return vocab.REASON_RESERVATION_RELINKED
