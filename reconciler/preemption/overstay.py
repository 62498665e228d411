"""Overstay reports when an overstaying pod leaves (R42, contract §2.10; off by
default: ``OVERSTAY_REPORT_ENABLED``).

When a pod admitted under a reservation disappears from the leader's pod cache
(``deleted``) or finishes (``pod-terminated``) after its guarantee ended, the app is
told once: ``start`` = the live guarantee end (the chain, from the reservation cache),
else the pod's frozen ``galends/guaranteed-until``; ``end`` = now. Nothing is sent
when the start cannot be resolved or is not before now. A preempted pod is reported
by the sweep (``preempted``) before its delete; the app de-duplicates by pod uid, so
that report wins over the ``deleted`` one that follows. Failures are logged and
dropped: a report never holds anything up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Protocol

from reconciler.admission.guarantees import live_end
from reconciler.base.pods import PodView
from shared import vocab
from shared.appclient.outcomes import OverstayResult
from shared.appclient.requests import OverstayReport
from shared.clock import Clock, parse_utc
from shared.logs import log
from shared.model import GPUReservation, parse_reference

_log = logging.getLogger(__name__)
DELETED = "deleted"
TERMINATED = "pod-terminated"
PREEMPTED = "preempted"


class OverstayApp(Protocol):
    """What the reporter asks of the reservation app."""

    async def report_overstay(self, report: OverstayReport) -> OverstayResult: ...


def frozen_until(pod: PodView) -> datetime | None:
    """``galends/guaranteed-until`` as an instant; None when absent or unreadable."""
    text = pod.annotations.get(vocab.GUARANTEED_UNTIL)
    try:
        return parse_utc(text) if text else None
    except ValueError:
        return None


def report_for(
    pod: PodView,
    reservations: Mapping[str, GPUReservation],
    now: datetime,
    reason: str,
    *,
    use_group: bool,
    end: datetime | None = None,
) -> OverstayReport | None:
    """The report for ``pod`` leaving now (pure); None when there is nothing to report.

    ``end`` is the guarantee end when the caller knows it already."""
    ref = pod.reference
    rid = parse_reference(ref) if ref else None
    if ref is None or rid is None or pod.gpus <= 0 or not pod.uid:
        return None
    if end is None:
        pool = [r.facts for r in reservations.values()]
        end = live_end(reservations.get(ref), pool, now, use_group=use_group)
    start = end or frozen_until(pod)
    if start is None or now <= start:
        return None
    return OverstayReport(rid, pod.uid, pod.gpus, start, now, reason)


def leaving_reason(old: PodView | None, new: PodView | None) -> str | None:
    """``deleted`` when the pod left the cache, ``pod-terminated`` when it just
    finished; None for any other change."""
    if old is None or old.finished:
        return None
    if new is None:
        return DELETED
    return TERMINATED if new.finished else None


async def send(app: OverstayApp, report: OverstayReport, key: str) -> None:
    """File one report; a failure is logged, never raised."""
    answer = await app.report_overstay(report)
    if not answer.ok:
        log(_log, logging.WARNING, "api.overstay_report_failed", pod=key, error=repr(answer))


class OverstayReporter:
    """Reports overstays of pods leaving the leader's cache (a pod-cache listener)."""

    def __init__(
        self,
        app: OverstayApp,
        clock: Clock,
        reservations: Callable[[], Mapping[str, GPUReservation]],
        *,
        use_group: bool,
    ) -> None:
        self._app = app
        self._clock = clock
        self._reservations = reservations
        self._use_group = use_group
        self.pending: set[asyncio.Task[None]] = set()

    def pod_changed(self, key: str, old: PodView | None, new: PodView | None) -> None:
        reason = leaving_reason(old, new)
        if reason is None or old is None:
            return
        pod = new or old
        now = self._clock.now()
        report = report_for(pod, self._reservations(), now, reason, use_group=self._use_group)
        if report is None:
            return
        task = asyncio.get_running_loop().create_task(send(self._app, report, key))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)
