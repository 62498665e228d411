"""The example Event messages of docs/user/pod-annotations.md are what the code writes.

Each example is rebuilt with the product's own wording function from the facts the
page uses (reservation res-42, H100, 2 GPUs, 2026-12-03 14:00–16:00 UTC, …), so a
changed wording shows up here. Reasons whose example needs a whole sweep or a node
picture are listed in ``NOT_REBUILT`` with why; every other reason must be rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest

from reconciler.admission import adoption
from reconciler.backstop import lingering
from reconciler.base.pods import project_pod
from reconciler.ondemand import status as ondemand_status
from reconciler.queue import evict
from shared import vocab
from shared.clock import format_utc, utc
from shared.model import GPUReservation, Kind
from shared.policy import ondemand_wording, statuses, wording
from shared.policy.inventory import NodeFacts
from shared.policy.matching import GROUP_FROM_ANNOTATION, MatchRules, Miss
from shared.policy.ondemand import Held
from shared.policy.routing import Path as RoutePath
from shared.policy.routing import Route
from tests.policy.builders import gpu_pod, reservation
from tests.unit.test_pod_annotations_docs import DOC, rows

UTC_ZONE = ZoneInfo("UTC")
START, END = utc(2026, 12, 3, 14), utc(2026, 12, 3, 16)


def booking(rid: int = 42, **kw: object) -> GPUReservation:
    return reservation(rid, start=START, end=END, **kw)  # type: ignore[arg-type]


def cancelled_booking() -> GPUReservation:
    res = booking()
    return replace(res, facts=replace(res.facts, cancel_reason="user request"))


def eviction(reason: str) -> str:
    view = project_pod(gpu_pod().build(), MatchRules())
    assert view is not None
    return evict.message(evict.Eviction(view, reason, cancelled_booking()), UTC_ZONE)


def grace_shortened() -> str:
    raw = gpu_pod().build()
    raw["spec"]["nodeName"] = "h100-r1"
    raw["metadata"]["deletionTimestamp"] = format_utc(START + timedelta(seconds=86_372))
    pod = project_pod(raw, MatchRules())
    assert pod is not None
    node = NodeFacts("h100-r1", ("h100",), 8, None, True, True, False)
    return lingering.message(pod, {node.name: node}, START, 60)


def no_reservation() -> str:
    pod = project_pod(gpu_pod(namespace="carol").build(), MatchRules())
    assert pod is not None
    found = Route(RoutePath.NONE, misses=(Miss.OTHER_OWNER,))
    rules = MatchRules()
    status = statuses.unmatched(
        pod.profile, found, (), START, rules, known_classes=None, contact=None, zone=UTC_ZONE
    )
    return status.message


REBUILT: dict[str, Callable[[], str]] = {
    vocab.REASON_RUNTIME_GUARANTEED: lambda: wording.runtime_guaranteed(booking(), END, UTC_ZONE),
    vocab.REASON_BEST_EFFORT_ADMITTED: lambda: wording.best_effort_admitted(
        booking(43, kind=Kind.BEST_EFFORT)
    ),
    vocab.REASON_OVERSTAY_RELINKED: lambda: adoption.relinked_message(
        adoption.Cause.OVERSTAY, "res-42", booking(44), utc(2026, 12, 3, 18), UTC_ZONE
    ),
    vocab.REASON_RESERVATION_RELINKED: lambda: adoption.relinked_message(
        adoption.Cause.REPLACED, "res-42", booking(44), utc(2026, 12, 3, 18), UTC_ZONE
    ),
    vocab.REASON_WAITING_FOR_RESERVATION: lambda: wording.waiting_for_reservation(
        booking(), UTC_ZONE
    ),
    vocab.REASON_RESERVATION_FULL: lambda: wording.reservation_full(booking(), ["nb-1", "train-3"]),
    vocab.REASON_RESERVATION_TOO_SMALL: lambda: wording.reservation_too_small(booking(), 4),
    vocab.REASON_WAITING_FOR_NODE: lambda: ondemand_wording.waiting_for_node(4, "h100").message,
    vocab.REASON_ONDEMAND_LEASE_DENIED: lambda: (
        ondemand_wording.denied(
            "Only 1 GPU(s) available for this group at 2026-12-03 14:00 (group ceiling: 4)", False
        ).message
    ),
    vocab.REASON_ONDEMAND_LEASE_REJECTED: lambda: (
        ondemand_wording.rejected(
            "unknown usage group",
            "alice",
            "vision",
            ondemand_wording.group_source(GROUP_FROM_ANNOTATION, None),
            "h100",
            ["lab"],
            None,
        ).message
    ),
    vocab.REASON_ONDEMAND_LEASE_DELAYED: lambda: ondemand_status.delayed().message,
    vocab.REASON_ONDEMAND_ADMISSION_PAUSED: lambda: (
        ondemand_wording.paused(Held.DRAINED, "h100", False, None).message
    ),
    vocab.REASON_NO_RESERVATION: no_reservation,
    vocab.REASON_UNKNOWN_GPU_CLASS: lambda: wording.unknown_gpu_class(
        "h10", ["h100", "a100"], None
    ),
    vocab.REASON_ANNOTATION_IGNORED: lambda: wording.annotation_ignored(
        vocab.MINIMUM_RUNTIME_SECONDS,
        "two hours",
        "it is not a positive whole number of seconds, so the pod cannot be admitted on demand",
        None,
    ),
    vocab.REASON_RESERVATION_CANCELLED: lambda: eviction(vocab.REASON_RESERVATION_CANCELLED),
    vocab.REASON_RESERVATION_REASSIGNED: lambda: eviction(vocab.REASON_RESERVATION_REASSIGNED),
    vocab.REASON_TERMINATION_GRACE_SHORTENED: grace_shortened,
}

#: Reasons whose example is not rebuilt here, and why.
NOT_REBUILT = {
    vocab.REASON_NO_MATCHING_NODE: "needs a parsed node constraint",
    vocab.REASON_PREEMPTED: "needs a sweep's boundary and class (docs/developer/preemption.md)",
    vocab.REASON_TERMINATION_WARNING: "needs a sweep's boundary and class",
    vocab.REASON_UNADMITTED_TOLERATION: "the example is shortened (…) on purpose",
}


def example(reason: str) -> str:
    cells = rows(DOC.read_text(encoding="utf-8"))[reason]
    text = cells[2]
    assert text.startswith("`")
    assert text.endswith("`")
    return text[1:-1]


def test_every_reason_is_rebuilt_or_says_why_not() -> None:
    reasons = {v for k, v in vars(vocab).items() if k.startswith("REASON_")}
    assert set(REBUILT) | set(NOT_REBUILT) == reasons
    assert not set(REBUILT) & set(NOT_REBUILT)


@pytest.mark.parametrize("reason", sorted(REBUILT))
def test_the_example_is_the_real_wording(reason: str) -> None:
    assert example(reason) == REBUILT[reason]()
