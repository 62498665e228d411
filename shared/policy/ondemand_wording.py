"""What a pod waiting for an on-demand lease is told (R39, R40): pure.

Same rules as ``shared.policy.wording``: no counts that change while the pod waits,
never another user's pod or the capacity figures (an operator has those in the
``ondemand.gated`` log line), quoted user text scrubbed and cut, a "contact support"
ending naming ``SUPPORT_CONTACT``, at most 1024 characters. The app's refusal detail
is quoted verbatim (clipped).
"""

from __future__ import annotations

from collections.abc import Sequence

from shared import vocab
from shared.policy.affinity import NodeConstraint
from shared.policy.matching import (
    GROUP_FROM_ANNOTATION,
    GROUP_FROM_DEFAULT,
    GROUP_FROM_LABEL,
)
from shared.policy.ondemand import Held
from shared.policy.statuses import Status
from shared.policy.wording import clip, quoted, with_support

_PAUSED_WHY = {
    Held.DRAINED: "none of its nodes can take pods right now (drained, cordoned or not ready)",
    Held.STUCK_HOLDER: "a pod already admitted to this class cannot be scheduled, so new "
    "leases are held back until that is resolved",
    Held.OVERCOMMIT: "the reservation system counts more GPUs for this class than the "
    "cluster has right now",
}


def denied(detail: str, structural: bool) -> Status:
    """OnDemandLeaseDenied: the app's reason, and whether waiting can help."""
    said = detail.strip() or "no reason given"
    if structural:
        text = (
            f"The reservation system refused an on-demand lease for this pod: {said}. "
            "Waiting will not help; the request is repeated only rarely. Change the pod "
            "(fewer GPUs, another usage group) or book a reservation."
        )
    else:
        text = (
            f"The reservation system refused an on-demand lease for this pod for now: "
            f"{said}. It is asked again in a few minutes."
        )
    return Status(vocab.REASON_ONDEMAND_LEASE_DENIED, clip(text))


def group_source(source: str | None, label: str | None) -> str:
    """Where the usage group came from, in words."""
    if source == GROUP_FROM_LABEL and label:
        return f"the pod's {quoted(label)!r} label"
    if source == GROUP_FROM_ANNOTATION:
        return f"the pod's {vocab.USAGE_GROUP} annotation"
    if source == GROUP_FROM_DEFAULT:
        return "the cluster's default usage group"
    return "nowhere"


def rejected(
    detail: str,
    user: str,
    group: str,
    source: str,
    gpu_class: str,
    elsewhere: Sequence[str],
    contact: str | None,
) -> Status:
    """OnDemandLeaseRejected: what was sent, where the group came from, other groups."""
    said = detail.strip() or "not found"
    text = (
        f"The reservation system does not recognise what this pod's on-demand lease "
        f"named: {said}. Sent: user {quoted(user)!r}, usage group {quoted(group)!r} "
        f"(from {source}), GPU class {quoted(gpu_class)!r}."
    )
    if elsewhere:
        named = ", ".join(quoted(g) for g in elsewhere)
        text += f" You hold bookings under the usage group(s) {named}."
    return Status(vocab.REASON_ONDEMAND_LEASE_REJECTED, clip(with_support(text, contact)))


def paused(held: Held, gpu_class: str, limited: bool, contact: str | None) -> Status:
    """OnDemandAdmissionPaused for a class-level hold (guards 1b, 3, 4)."""
    why = _PAUSED_WHY.get(held, "the class is held")
    state = "limited" if limited and held is Held.OVERCOMMIT else "paused"
    text = (
        f"On-demand admission for GPU class {quoted(gpu_class)!r} is {state}: {why}. "
        "Nothing about this pod needs to change; it is admitted once this clears."
    )
    if state == "limited":
        text += " A smaller or shorter job may start sooner."
    return Status(vocab.REASON_ONDEMAND_ADMISSION_PAUSED, clip(with_support(text, contact)))


def no_matching_node(
    constraint: NodeConstraint, gpu_class: str, elsewhere: Sequence[str], contact: str | None
) -> Status:
    """NoMatchingNode: the constraint, and any other class whose nodes it matches."""
    text = (
        f"This pod's node constraint ({quoted(constraint.describe())}) allows none of the "
        f"nodes of GPU class {quoted(gpu_class)!r}, so no on-demand lease is requested."
    )
    if elsewhere:
        text += " It matches nodes of: " + ", ".join(quoted(c) for c in elsewhere) + "."
    return Status(vocab.REASON_NO_MATCHING_NODE, clip(with_support(text, contact)))


def waiting_for_node(gpus: int, gpu_class: str) -> Status:
    """WaitingForNode (Normal): the allowed nodes are all short right now."""
    text = (
        f"The nodes this pod's node constraint allows are all short of its {gpus} GPU(s) "
        "right now; it waits until one has room. Widening the constraint would let it "
        f"use the rest of GPU class {quoted(gpu_class)!r}."
    )
    return Status(vocab.REASON_WAITING_FOR_NODE, clip(text))
