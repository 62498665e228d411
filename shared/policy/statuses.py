"""What a pod that is not admitted is told (R12's status order, R4.4, R39): pure.

A *status* is an Event reason and its message. A queued pod's status comes from its
route's wait reason — ``ReservationTooSmall`` (it can never be admitted there),
``WaitingForReservation`` (the window has not opened), ``ReservationFull`` (the
owner's own pods hold it; up to three are named). A pod no reservation matches is told
``UnknownGpuClass`` when the app's class list is known and its label is not in it,
else ``NoReservation`` with every reason and the owner's near-miss bookings. An
annotation that was ignored where that changed what happens is told separately
(``AnnotationIgnored``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from shared import vocab
from shared.model import GPUReservation
from shared.policy import wording
from shared.policy.matching import MatchRules, Miss, PodProfile, mismatch
from shared.policy.routing import Route, Wait

#: Misses that make a booking of the owner a *near miss* worth naming.
NEAR = frozenset({Miss.OTHER_CLASS, Miss.OTHER_GROUP})


@dataclass(frozen=True)
class Status:
    """One thing to tell a pod: the Event reason and its whole message."""

    reason: str
    message: str


def waiting(
    found: Route, gpus: int, holders: Sequence[str], zone: ZoneInfo | None
) -> Status | None:
    """The status of a queued pod (``found.path`` is QUEUE); None when nothing applies."""
    res = found.reservation
    if res is None or found.wait is None:
        return None
    if found.wait is Wait.TOO_SMALL:
        return Status(vocab.REASON_RESERVATION_TOO_SMALL, wording.reservation_too_small(res, gpus))
    if found.wait is Wait.OPENS_LATER:
        return Status(
            vocab.REASON_WAITING_FOR_RESERVATION, wording.waiting_for_reservation(res, zone)
        )
    return Status(vocab.REASON_RESERVATION_FULL, wording.reservation_full(res, holders))


def near_misses(
    pod: PodProfile,
    reservations: Iterable[GPUReservation],
    now: datetime,
    rules: MatchRules,
    zone: ZoneInfo | None,
) -> list[str]:
    """The owner's live bookings the pod narrowly misses (another class or group)."""
    found = []
    for res in sorted(reservations, key=lambda r: (r.facts.start, r.facts.id)):
        if res.facts.owner != pod.owner:
            continue
        miss = mismatch(res.facts, pod, now, rules)
        if miss in NEAR:
            found.append(wording.near_miss(res, miss, zone))
    return found


def why_not_on_demand(pod: PodProfile, rules: MatchRules) -> list[str]:
    """Every reason R5 refuses the pod an on-demand lease, in R5's order (the cluster's
    setting, the usage group, the runtime); empty when it does not."""
    found = []
    if not rules.leases_enabled:
        found.append("on-demand admission is off in this cluster")
    if pod.usage_group is None:
        found.append("the pod names no usage group")
    if pod.minimum_runtime_s is None and not pod.best_effort:
        found.append(f"the pod sets no usable {vocab.MINIMUM_RUNTIME_SECONDS}")
    return found


def unmatched(
    pod: PodProfile,
    found: Route,
    reservations: Iterable[GPUReservation],
    now: datetime,
    rules: MatchRules,
    *,
    known_classes: Collection[str] | None,
    contact: str | None,
    zone: ZoneInfo | None,
) -> Status:
    """The status of a pod on no path: UnknownGpuClass or NoReservation."""
    label = pod.gpu_class
    if label is not None and known_classes is not None and label not in known_classes:
        return Status(
            vocab.REASON_UNKNOWN_GPU_CLASS,
            wording.unknown_gpu_class(label, sorted(known_classes), contact),
        )
    near = near_misses(pod, reservations, now, rules, zone)
    message = wording.no_reservation(
        found.misses or (Miss.OTHER_OWNER,), near, contact, why_not_on_demand(pod, rules)
    )
    return Status(vocab.REASON_NO_RESERVATION, message)


def ignored_annotations(
    notes: Mapping[str, str], rules: MatchRules, contact: str | None
) -> Status | None:
    """AnnotationIgnored, when a ``galends/*`` annotation was ignored with an effect."""
    guarantee = notes.get(vocab.RUNTIME_GUARANTEE)
    wants_none = (guarantee or "").strip().lower() == vocab.RUNTIME_GUARANTEE_NONE
    if guarantee is not None and wants_none and not rules.best_effort_enabled:
        effect = (
            "best-effort admission is off in this cluster, so the pod is charged a "
            "guaranteed runtime"
        )
        message = wording.annotation_ignored(vocab.RUNTIME_GUARANTEE, guarantee, effect, contact)
        return Status(vocab.REASON_ANNOTATION_IGNORED, message)
    runtime = notes.get(vocab.MINIMUM_RUNTIME_SECONDS)
    if runtime is not None and not (runtime.strip().isdigit() and int(runtime.strip()) > 0):
        bad = "it is not a positive whole number of seconds, so"
        default = rules.default_minimum_runtime_s
        effect = (
            f"{bad} the cluster default of {default} seconds is used"
            if default
            else f"{bad} the pod cannot be admitted on demand"
        )
        message = wording.annotation_ignored(
            vocab.MINIMUM_RUNTIME_SECONDS, runtime, effect, contact
        )
        return Status(vocab.REASON_ANNOTATION_IGNORED, message)
    return None
