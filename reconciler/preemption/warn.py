"""Termination warnings on pods (R33): the three ``galends/termination-warning-*``
annotations kept equal to the sweep's plan, and one Warning Event per warning.

``wanted`` (pure) gives the JSON Patch that brings one pod's annotations to the plan:
set instant, risk and message when at risk and any differs; remove all three when it
no longer is. The patch's first op tests the booking reference, so a pod re-linked
meanwhile is left for the next sweep. An Event ``TerminationWarning`` (Warning) is
sent when a pod gets a warning or its instant moves — not when only the risk moves —
so ``kubectl describe pod`` shows it once per warning. ``plan`` (pure) is the sweep's
plan of warnings: the pods a booking ahead is likely to preempt, and the headroom
victims chosen ahead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from reconciler.admission.guarantees import patch_ops
from reconciler.base.events import Emit
from reconciler.base.kube import KubeWriter
from reconciler.base.pods import PodView
from reconciler.base.settings import PreemptionSettings
from shared import vocab
from shared.clock import format_utc
from shared.errors import KubeError
from shared.logs import log
from shared.pointer import annotation
from shared.policy import outlook, preemption
from shared.policy.preemption import Holder, Room, Tally
from shared.policy.wording import termination_warning
from shared.resources import PODS

_log = logging.getLogger(__name__)
KEYS = (
    vocab.TERMINATION_WARNING_AT,
    vocab.TERMINATION_WARNING_RISK,
    vocab.TERMINATION_WARNING_MESSAGE,
)


@dataclass(frozen=True)
class Warning:
    """What one pod's warning annotations should say."""

    at: datetime
    risk: float
    message: str

    def values(self) -> dict[str, str]:
        return {
            vocab.TERMINATION_WARNING_AT: format_utc(self.at),
            vocab.TERMINATION_WARNING_RISK: f"{self.risk:.2f}",
            vocab.TERMINATION_WARNING_MESSAGE: self.message,
        }


def carried(pod: PodView) -> bool:
    """Whether the pod carries any warning annotation."""
    notes = pod.annotations
    return any(k in notes for k in KEYS)


def wanted(pod: PodView, warning: Warning | None) -> list[dict[str, Any]] | None:
    """The patch bringing ``pod`` to ``warning`` (None: nothing to change)."""
    ref = pod.reference
    if ref is None:
        return None
    notes = pod.annotations
    if warning is None:
        present = [k for k in KEYS if k in notes]
        if not present:
            return None
        ops = patch_ops(ref, {})
        ops.extend({"op": "remove", "path": annotation(k)} for k in present)
        return ops
    changes = {k: v for k, v in warning.values().items() if notes.get(k) != v}
    return patch_ops(ref, changes) if changes else None


def news(pod: PodView, warning: Warning | None, told: Mapping[str, str]) -> bool:
    """A new warning, or its instant moved: the pod's owner is told again. ``told``
    (uid → instant announced by this process) covers the cache lagging behind our own
    patch, which would otherwise announce one warning twice."""
    if warning is None:
        return False
    at = format_utc(warning.at)
    return pod.annotations.get(vocab.TERMINATION_WARNING_AT) != at and told.get(pod.uid) != at


async def reconcile(
    gateway: KubeWriter,
    emit: Emit,
    pods: Mapping[str, PodView],
    plan: Mapping[str, Warning],
    skip: set[str],
    now: datetime,
    told: dict[str, str],
    on_event: Callable[[], None] | None = None,
) -> bool:
    """Apply ``plan`` (pod uid → warning) to every admitted pod; pods in ``skip``
    (being deleted) are left alone; ``told`` is kept to the live pods' announcements.
    True while any pod may still carry a warning."""
    outstanding = False
    live = {p.uid for p in pods.values()}
    for uid in [u for u in told if u not in live]:
        del told[uid]
    for pod in pods.values():
        if pod.uid in skip or pod.finished or pod.deleting:
            continue
        warning = plan.get(pod.uid)
        ops = wanted(pod, warning)
        if ops is None:
            outstanding = outstanding or warning is not None
            continue
        try:
            await gateway.patch(PODS, pod.name, ops, pod.namespace)
        except KubeError as exc:
            log(
                _log, logging.WARNING, "pod.termination_warning_failed", pod=pod.key, error=str(exc)
            )
            outstanding = True
            continue
        if warning is None:
            log(_log, logging.INFO, "pod.termination_warning_cleared", pod=pod.key)
            continue
        outstanding = True
        log(
            _log,
            logging.INFO,
            "pod.termination_warned",
            pod=pod.key,
            at=format_utc(warning.at),
            risk=f"{warning.risk:.2f}",
        )
        if news(pod, warning, told):
            told[pod.uid] = format_utc(warning.at)
            await emit(gateway, pod, vocab.REASON_TERMINATION_WARNING, warning.message, now=now)
            if on_event is not None:
                on_event()
    return outstanding


def plan(
    now: datetime,
    bookings: Sequence[Any],
    holders: Sequence[Holder],
    rooms: Mapping[str, Room],
    tally: Tally,
    headroom: Mapping[str, datetime],
    settings: PreemptionSettings,
    *,
    delegated: bool,
    zone: ZoneInfo | None,
) -> dict[str, Warning]:
    """The warnings a sweep wants on pods (R33), by uid: the pods a booking ahead
    (within ``TERMINATION_WARNING_LEAD_MINUTES``) is likely to preempt, after this
    sweep's kills, and the headroom victims chosen ahead (``headroom``: uid → when),
    whichever comes first."""
    survivors = tally.alive(holders)
    after = preemption.without(rooms, [h for h in holders if h.uid in tally.doomed])
    lead, until = settings.lead, now + settings.warning_lead
    found = outlook.ahead(now, lead, until, bookings, survivors, after, delegated=delegated)
    risks = outlook.warnings(found, lead, survivors)
    by_uid = {h.uid: h for h in survivors}
    chosen: dict[str, Warning] = {}
    for uid, risk in risks.items():
        h = by_uid[uid]
        running = h.guarantee_end if h.guarantee_end and h.guarantee_end > now else None
        text = termination_warning(h.gpu_class, risk.at, risk.boundary, zone, running)
        chosen[uid] = Warning(risk.at, risk.risk, text)
    for uid, at in headroom.items():
        h2 = by_uid.get(uid)
        if h2 is None or (uid in chosen and chosen[uid].at <= at):
            continue
        chosen[uid] = Warning(at, 1.0, termination_warning(h2.gpu_class, at, None, zone))
    return chosen
