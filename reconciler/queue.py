"""The reserved queue's pure parts: who waits, when the next window opens, the patch.

The queue holds no state of its own: a pass re-routes the pods that are not yet
admitted (``shared.policy.routing.route`` over the reservation cache) — every one on a
full pass, those whose route may have changed otherwise (``reconciler.admit``) — so a
pod always waits on a reservation that can take it (R12: an open one with room wins; an
entry whose window ended simply routes elsewhere or nowhere). What is kept in memory is
only what the metrics need (since when a pod waited for a window to open, why each
waits).

``admission_patch`` is the one JSON Patch that admits a pod: ``test`` preconditions
on the pod's uid and resourceVersion (any concurrent change — another admission, a
user edit — makes it fail as a whole, and the claim is then dropped), the granted
toleration, every admission annotation, and removal of the scheduling gate.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from reconciler.metrics import NAMESPACE
from reconciler.pods import PodView
from shared.model import GPUReservation, State
from shared.pointer import annotation
from shared.policy.annotations import admission_annotations
from shared.policy.tolerations import granted_toleration

#: Lag buckets (seconds) from a window opening to a waiting pod being tolerated.
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


def waits(pod: PodView) -> bool:
    """Whether the queue must route ``pod``: a GPU pod (``PodView.gpu_pod``) not
    admitted, alive, not tolerated by hand, and not bound to a node yet — a pod the
    scheduler already placed runs in
    the ordinary pool (its spec can no longer move it onto a reserved node), so admitting
    it would charge the booking for GPUs it does not take from it."""
    return bool(
        pod.gpu_pod
        and not pod.admitted
        and not pod.finished
        and not pod.deleting
        and not pod.tolerated
        and pod.uid
        and pod.node is None
    )


def waiting(pods: Iterable[PodView]) -> list[PodView]:
    """The pods of ``pods`` the queue must route (``waits``)."""
    return [p for p in pods if waits(p)]


def oldest_first(pods: Iterable[PodView]) -> list[PodView]:
    """``pods`` in the order the queue serves them: creation time, then namespace/name
    (the pods of one second in a stable, readable order; a relisted cache iterates in
    LIST order, by name, which is no order of arrival)."""
    return sorted(pods, key=lambda p: (p.created, p.key))


def next_start(reservations: Iterable[GPUReservation], now: datetime) -> datetime | None:
    """The soonest window start after ``now`` (the timer's next instant)."""
    starts = [
        r.facts.start for r in reservations if r.facts.state is State.ACTIVE and r.facts.start > now
    ]
    return min(starts, default=None)


def holders(res: GPUReservation, pods: Iterable[PodView], owner: str) -> list[str]:
    """The owner's own live pods admitted under ``res`` (never other users' pods)."""
    return sorted(
        p.name for p in pods if p.reference == res.name and p.namespace == owner and not p.finished
    )


def admission_patch(
    pod: PodView,
    res: GPUReservation,
    claim: str,
    until: datetime,
    now: datetime,
    gate: str | None,
) -> list[dict[str, Any]]:
    """The JSON Patch admitting ``pod`` (the watch cache's view) under ``res`` with
    ``claim``.

    Built from the view, not a fresh read: the ``test`` on the view's resourceVersion
    makes the apiserver refuse the whole patch when the pod changed since (R11: a pod
    that finished, was admitted or tolerated meanwhile is never patched), so the view's
    paths (annotations map, tolerations list, gate positions) are the pod's."""
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": pod.uid},
        {"op": "test", "path": "/metadata/resourceVersion", "value": pod.resource_version},
    ]
    toleration = granted_toleration(res.facts.gpu_class)
    if pod.toleration_list:
        ops.append({"op": "add", "path": "/spec/tolerations/-", "value": toleration})
    else:
        ops.append({"op": "add", "path": "/spec/tolerations", "value": [toleration]})
    notes = admission_annotations(
        res.facts, claim=claim, guaranteed_until=until, now=now, admitted_at=now
    )
    if pod.annotation_map:
        for key, value in sorted(notes.items()):
            ops.append({"op": "add", "path": annotation(key), "value": value})
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": notes})
    if gate:
        # Highest index first, so earlier removals do not shift later ones.
        found = [i for i, name in enumerate(pod.gates) if name == gate]
        ops.extend({"op": "remove", "path": f"/spec/schedulingGates/{i}"} for i in reversed(found))
    return ops


class QueueMetrics:
    """The reserved path's metrics, on the reconciler's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.depth = Gauge(
            "reserved_queue_depth",
            "Pods waiting on a reservation, by why (opens_later, full, too_small).",
            ["wait"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self.lag = Histogram(
            "window_open_to_admitted_seconds",
            "From a window opening to a pod that waited for it being tolerated.",
            namespace=NAMESPACE,
            registry=registry,
            buckets=LAG_BUCKETS,
        )
        self.admissions = Counter(
            "admissions",
            "Admissions by path (reserved: the reconciler's queue; on_demand: under a lease "
            "just granted; webhook: announced here, admitted at create).",
            ["path"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self.events = Counter(
            "events",
            "Events written on pods, by reason.",
            ["reason"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self.evictions = Counter(
            "evictions",
            "Pods deleted because their booking was cancelled or reassigned, by Event reason.",
            ["reason"],
            namespace=NAMESPACE,
            registry=registry,
        )
