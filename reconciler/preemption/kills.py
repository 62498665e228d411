"""Executing the sweep's decision: each victim re-read, told, reported and deleted.

Per victim (R30's execution, in this order): re-read the pod — it must still be the
same uid, carry the same booking reference (a re-link may have moved it onto a
booking) and be neither terminating nor finished; the ``Preempted`` Event (Normal);
the overstay report (``preempted``, when enabled; ``reconciler.preemption.overstay``); the delete
with a uid precondition (a new pod reusing the name is never hit). A victim that
fails any step is left alone; the next sweep decides again.

The batch runs under the re-linker's lock, held once, ``KILL_CONCURRENCY`` victims at
a time: no re-link moves a victim while it is being killed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from prometheus_client import Counter

from reconciler.base.events import Emit
from reconciler.base.kube import KubeWriter
from reconciler.base.pods import PodView, project_pod
from reconciler.preemption.overstay import PREEMPTED, OverstayApp, report_for, send
from shared import vocab
from shared.errors import Conflict, KubeError, NotFound
from shared.logs import log
from shared.model import GPUReservation, reference
from shared.policy.matching import MatchRules
from shared.policy.preemption import Holder
from shared.policy.wording import preempted
from shared.resources import PODS

_log = logging.getLogger(__name__)
#: Victims re-read, told and deleted at once (each is three API calls).
KILL_CONCURRENCY = 8


def mono() -> float:
    """The event loop's monotonic clock (for the decided-to-deleted latency)."""
    return asyncio.get_running_loop().time()


@dataclass(frozen=True)
class Victim:
    """A pod chosen to die, and for what."""

    holder: Holder
    boundary: datetime | None  # None: headroom
    chosen_at: float  # ``mono()`` at the decision


class Killer:
    """Kills the sweep's victims (see the module docstring)."""

    def __init__(
        self,
        gateway: KubeWriter,
        emit: Emit,
        *,
        rules: MatchRules,
        zone: ZoneInfo | None,
        lock: asyncio.Lock,
        reservations: Callable[[], Mapping[str, GPUReservation]],
        reporter: OverstayApp | None,
        grace_s: int,
        preempted: Counter | None = None,
    ) -> None:
        self._gateway = gateway
        self._emit = emit
        self._rules = rules
        self._zone = zone
        self._lock = lock
        self._reservations = reservations
        self._reporter = reporter
        self._counter = preempted
        #: EVICTION_GRACE_SECONDS: a victim's own grace, hours long, would keep the
        #: booking's GPUs that long.
        self._grace_s = grace_s

    async def kill_all(self, victims: Sequence[Victim], now: datetime) -> list[tuple[str, float]]:
        """Every victim; (uid, seconds from decision to delete) of those deleted."""
        if not victims:
            return []
        gate = asyncio.Semaphore(KILL_CONCURRENCY)
        done: list[tuple[str, float]] = []

        async def one(victim: Victim) -> None:
            async with gate:
                if await self.kill(victim, now):
                    done.append((victim.holder.uid, mono() - victim.chosen_at))

        async with self._lock:
            await asyncio.gather(*(one(v) for v in victims))
        return done

    async def kill(self, victim: Victim, now: datetime) -> bool:
        """Re-read, Event, report, delete; True when deleted. The caller holds the lock."""
        h = victim.holder
        pod = await self._still_the_victim(h)
        if pod is None:
            return False
        log(_log, logging.INFO, "pod.preempting", pod=h.key, gpus=h.gpus, gpu_class=h.gpu_class)
        text = preempted(h.gpu_class, victim.boundary, self._zone)
        await self._emit(self._gateway, pod, vocab.REASON_PREEMPTED, text, now=now)
        await self._report(h, pod, now)
        try:
            grace = pod.stop_grace(self._grace_s)
            await self._gateway.delete(PODS, h.name, h.namespace, grace_period_s=grace, uid=h.uid)
        except (NotFound, Conflict):
            return False
        except KubeError as exc:
            log(_log, logging.WARNING, "pod.delete_failed", pod=h.key, error=str(exc))
            return False
        if self._counter is not None:
            self._counter.labels("boundary" if victim.boundary else "headroom").inc()
        latency_ms = round((mono() - victim.chosen_at) * 1000, 1)
        reason = vocab.REASON_PREEMPTED
        log(_log, logging.INFO, "pod.deleted", pod=h.key, reason=reason, latency_ms=latency_ms)
        return True

    async def _still_the_victim(self, h: Holder) -> PodView | None:
        try:
            raw = await self._gateway.get(PODS, h.name, h.namespace)
        except KubeError as exc:
            log(_log, logging.INFO, "pod.already_gone", pod=h.key, error=str(exc))
            return None
        pod = project_pod(raw, self._rules)
        if (
            pod is None
            or pod.uid != h.uid
            or pod.deleting
            or pod.finished
            or pod.reference != reference(h.reservation_id)
        ):
            return None
        return pod

    async def _report(self, h: Holder, pod: PodView, now: datetime) -> None:
        """The overstay report (§2.10, ``preempted``) before the delete."""
        if self._reporter is None:
            return
        use_group = self._rules.use_group
        report = report_for(
            pod, self._reservations(), now, PREEMPTED, use_group=use_group, end=h.guarantee_end
        )
        if report is not None:
            await send(self._reporter, report, h.key)
