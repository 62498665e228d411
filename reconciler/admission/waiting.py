"""Telling a waiting GPU pod why it waits: the reserved queue's status Events.

- QUEUE: WaitingForReservation, ReservationFull, ReservationTooSmall, when
  ``RESERVATION_WAIT_EVENT_ENABLED``;
- NONE: UnknownGpuClass / NoReservation when ``POD_PROBLEM_EVENT_ENABLED`` and a full
  fetch happened; AnnotationIgnored on its own topic (NONE and JIT).

Every status goes through the R39 throttle (``reconciler.base.throttle``), seeded for each
pod from its own Events before the first send of a process (*recall*), so a restart
does not restate a status inside the repeat interval. The on-demand path tells its
statuses through the same throttle (one story per pod).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reconciler.admission import pending
from reconciler.base import events
from reconciler.base.kube import KubeWriter
from reconciler.base.pods import PodView
from reconciler.base.settings import ReconcilerSettings
from reconciler.base.throttle import ANNOTATIONS, HOLD, Throttle
from shared import vocab
from shared.clock import Clock, parse_utc
from shared.errors import KubeError
from shared.logs import log
from shared.model import GPUReservation
from shared.policy import statuses
from shared.policy.routing import Path, Route
from shared.policy.statuses import Status
from shared.resources import EVENTS

_log = logging.getLogger(__name__)
#: Events written at once (the gateway has a bounded worker pool anyway).
EVENT_CONCURRENCY = 16

Emit = Callable[..., Awaitable[bool]]
#: The throttled statuses (their Events are read back after a restart).
STATUS_REASONS = frozenset(
    {
        vocab.REASON_ONDEMAND_LEASE_DENIED,
        vocab.REASON_ONDEMAND_LEASE_REJECTED,
        vocab.REASON_ONDEMAND_ADMISSION_PAUSED,
        vocab.REASON_NO_MATCHING_NODE,
        vocab.REASON_WAITING_FOR_NODE,
        vocab.REASON_WAITING_FOR_RESERVATION,
        vocab.REASON_RESERVATION_FULL,
        vocab.REASON_RESERVATION_TOO_SMALL,
        vocab.REASON_NO_RESERVATION,
        vocab.REASON_UNKNOWN_GPU_CLASS,
        vocab.REASON_ANNOTATION_IGNORED,
    }
)


@dataclass(frozen=True)
class Knowledge:
    """What the sync knows, for the pod-problem Events (R4.4)."""

    fetched: Callable[[], bool]
    classes: Callable[[], Collection[str] | None]


def recalled(event: dict[str, Any], uid: str) -> tuple[str, str, str, datetime] | None:
    """(topic, reason, message, when) of one of our status Events on pod ``uid``."""
    if (event.get("involvedObject") or {}).get("uid") != uid:
        return None
    source = (event.get("source") or {}).get("component") or event.get("reportingComponent")
    reason = str(event.get("reason", ""))
    if source != vocab.PRODUCT_NAME or reason not in STATUS_REASONS:
        return None
    try:
        at = parse_utc(str(event.get("lastTimestamp") or event.get("firstTimestamp")))
    except ValueError:
        return None
    topic = ANNOTATIONS if reason == vocab.REASON_ANNOTATION_IGNORED else HOLD
    return topic, reason, str(event.get("message", "")), at


class Teller:
    """Sends the waiting and problem statuses of one leader term, throttled."""

    def __init__(
        self,
        gateway: KubeWriter,
        settings: ReconcilerSettings,
        clock: Clock,
        counted: Callable[[str], None],
        knowledge: Knowledge,
        emit: Emit = events.emit,
    ) -> None:
        self._gateway = gateway
        self._settings = settings
        self._knowledge = knowledge
        self._emit = emit
        self._counted = counted
        self._zone = settings.common.display_timezone
        self.throttle = Throttle(clock, settings.queue.repeat)
        #: Pods whose Events this process has read back (the throttle is seeded).
        self._recalled: set[str] = set()
        self._events = asyncio.Semaphore(EVENT_CONCURRENCY)

    def forget(self, uid: str, finished: bool) -> None:
        """``uid`` no longer waits (admitted, finished or gone)."""
        self.throttle.forget(uid)
        if finished:
            self._recalled.discard(uid)

    def prune(self, waiting: Iterable[str], live: set[str]) -> None:
        """Keep throttle entries of waiting pods only, recalls of live pods only (pods
        that left unseen, e.g. while another replica led)."""
        self.throttle.prune(set(waiting))
        self._recalled &= live

    async def tell(
        self,
        pod: PodView,
        found: Route,
        pool: list[GPUReservation],
        charged: Callable[[str], Iterable[PodView]],
        now: datetime,
    ) -> None:
        """Tell the pod its waiting or problem status (throttled, switches honoured).
        ``charged(name)``: the live pods counted in reservation ``name`` (the holders a
        full reservation names)."""
        q = self._settings.queue
        if found.path is Path.QUEUE and q.wait_events:
            owner = pod.namespace
            res = found.reservation
            names = pending.holders(res, charged(res.name), owner) if res is not None else []
            status = statuses.waiting(found, pod.gpus, names, self._zone)
            await self.say(pod, HOLD, status, now)
        if found.path is Path.NONE and q.problem_events and self._knowledge.fetched():
            known = self._knowledge.classes()
            status = statuses.unmatched(
                pod.profile,
                found,
                pool,
                now,
                self._settings.rules,
                known_classes=known,
                contact=q.support_contact,
                zone=self._zone,
            )
            await self.say(pod, HOLD, status, now)
        if found.path in {Path.NONE, Path.JIT} and q.problem_events:
            ignored = statuses.ignored_annotations(
                pod.annotations, self._settings.rules, q.support_contact
            )
            await self.say(pod, ANNOTATIONS, ignored, now)

    async def say(self, pod: PodView, topic: str, status: Status | None, now: datetime) -> None:
        """Send ``status`` on ``topic`` unless the throttle says it was said."""
        if status is None or not self.throttle.due(pod.uid, topic, status.reason, status.message):
            return
        if pod.uid not in self._recalled:
            await self._recall(pod)
            if not self.throttle.due(pod.uid, topic, status.reason, status.message):
                return
        if await self.send(pod, status.reason, status.message, now):
            self.throttle.sent(pod.uid, topic, status.reason, status.message)

    async def _recall(self, pod: PodView) -> None:
        """Seed the throttle from the pod's own Events (a restart does not restate)."""
        selector = f"involvedObject.uid={pod.uid}"
        try:
            listed = await self._gateway.list_all(EVENTS, pod.namespace, field_selector=selector)
        except KubeError as exc:
            log(_log, logging.WARNING, "queue.recall_failed", pod=pod.key, error=str(exc))
            return
        self._recalled.add(pod.uid)
        for told in listed.items:
            said = recalled(told, pod.uid)
            if said is not None:
                self.throttle.recall(pod.uid, *said)

    async def send(self, pod: PodView, reason: str, message: str, now: datetime) -> bool:
        """One Event on ``pod`` (bounded in number at once); True when it was written."""
        async with self._events:
            return await self._emit(
                self._gateway, pod, reason, message, now=now, on_sent=self._counted
            )
