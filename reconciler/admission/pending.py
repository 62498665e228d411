"""The reserved queue's pure parts: who waits, when the next window opens, the patch.

The queue holds no state of its own: a pass re-routes the pods that are not yet
admitted (``shared.policy.routing.route`` over the reservation cache) — every one on a
full pass, those whose route may have changed otherwise (``reconciler.queue.admit``) — so a
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

from reconciler.base.pods import PodView, waits
from shared.model import GPUReservation, State
from shared.pointer import annotation
from shared.policy.annotations import admission_annotations
from shared.policy.tolerations import granted_toleration


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
