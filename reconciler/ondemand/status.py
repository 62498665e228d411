"""What the lease path tells: the held pod's status, a 404's status, an outage's delay,
the gate log (R38).

``hold_status`` and ``rejected`` are pure (the wording is
``shared.policy.ondemand_wording``); the switches are the seed's
(``ONDEMAND_PAUSE_EVENT_ENABLED``, ``POD_PROBLEM_EVENT_ENABLED``). ``GateLog`` writes
the operator's ``ondemand.gated`` line: one WARNING per (class, guard) holding pods, at
most once a minute, with how long it has held (since this process saw it), how many
pods wait, and the detail pods are never told (the stuck holders, the deficit).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

from reconciler.base.pods import PodView
from reconciler.base.settings import ReconcilerSettings
from shared import vocab
from shared.appclient.outcomes import Rejected
from shared.logs import log
from shared.model import GPUReservation, Kind, State
from shared.policy import ondemand, ondemand_wording
from shared.policy.ondemand import Held, Preflight
from shared.policy.statuses import Status
from shared.policy.wording import unknown_gpu_class

_log = logging.getLogger(__name__)
#: A gate is logged at most this often per (class, guard) (R38).
GATE_LOG_S = 60.0
#: At most this many stuck holders are named in one line.
MAX_STUCK = 10


def hold_status(
    pod: PodView,
    pre: Preflight,
    settings: ReconcilerSettings,
    known: Collection[str],
    classes_known: bool,
) -> Status | None:
    """What a pod held by a guard is told (None: nothing, e.g. guard 1a or 5)."""
    od, q = settings.ondemand, settings.queue
    cls = pod.profile.gpu_class or ""
    held = pre.held
    if held is not None and held in ondemand.PAUSES and od.pause_events:
        limited = held is Held.OVERCOMMIT and od.overcommit_fit
        return ondemand_wording.paused(held, cls, limited, q.support_contact)
    if held is Held.NO_MATCHING_NODE and q.problem_events:
        return ondemand_wording.no_matching_node(
            pod.constraint, cls, pre.elsewhere, q.support_contact
        )
    if held is Held.WAITING_FOR_NODE and q.problem_events:
        return ondemand_wording.waiting_for_node(pod.gpus, cls)
    if held is Held.UNKNOWN_CLASS and q.problem_events and classes_known:
        text = unknown_gpu_class(cls, sorted(known), q.support_contact)
        return Status(vocab.REASON_UNKNOWN_GPU_CLASS, text)
    return None


def delayed() -> Status:
    """OnDemandLeaseDelayed: the lease request failed for an app outage (told once per
    outage; the same words every time, so the throttle folds any repeat)."""
    return Status(
        vocab.REASON_ONDEMAND_LEASE_DELAYED,
        "The reservation app is unreachable; the on-demand lease for this pod will be "
        "requested again as soon as it answers.",
    )


def rejected(
    pod: PodView,
    failure: Rejected,
    settings: ReconcilerSettings,
    pool: Iterable[GPUReservation],
    now: datetime,
) -> Status:
    """OnDemandLeaseRejected: what was sent, where the group came from, and the other
    usage groups the owner holds live bookings under (their own, never another user's)."""
    prof = pod.profile
    others = sorted(
        {
            r.facts.group
            for r in pool
            if r.facts.owner == pod.namespace
            and r.facts.kind is Kind.BOOKING
            and r.facts.state is State.ACTIVE
            and r.facts.end > now
            and r.facts.group
            and r.facts.group != prof.usage_group
        }
    )
    return ondemand_wording.rejected(
        failure.detail or failure.unknown,
        pod.namespace,
        prof.usage_group or "",
        ondemand_wording.group_source(prof.usage_group_source, settings.rules.required_group_label),
        prof.gpu_class or "",
        [g for g in others if g],
        settings.queue.support_contact,
    )


class GateLog:
    """The ``ondemand.gated`` lines of one replica (module docstring)."""

    def __init__(self) -> None:
        self._logged: dict[tuple[str, str], datetime] = {}
        #: (class, guard) → when this process first saw the gate hold a pod.
        self._since: dict[tuple[str, str], datetime] = {}

    def report(
        self,
        gated: Mapping[tuple[str, str], int],
        now: datetime,
        fresh: bool,
        stuck: Mapping[str, list[str]],
        deficits: Mapping[str, int],
    ) -> None:
        """Log the gates holding pods in this batch (``gated``: waiting count per
        (class, guard)). A gate not seen in a batch that vetted candidates (``fresh``)
        has cleared: its clock restarts."""
        if fresh:
            for gate in self._since.keys() - gated.keys():
                del self._since[gate]
        for (cls, guard), waiting in sorted(gated.items()):
            since = self._since.setdefault((cls, guard), now)
            last = self._logged.get((cls, guard))
            if last is not None and (now - last).total_seconds() < GATE_LOG_S:
                continue
            self._logged[(cls, guard)] = now
            detail: dict[str, Any] = {}
            if guard == Held.STUCK_HOLDER:
                detail["stuck"] = stuck.get(cls, [])[:MAX_STUCK]
            if guard == Held.OVERCOMMIT:
                detail["deficit"] = deficits.get(cls, 0)
            log(
                _log,
                logging.WARNING,
                "ondemand.gated",
                gpu_class=cls,
                guard=guard,
                waiting=waiting,
                for_s=round((now - since).total_seconds()),
                **detail,
            )
