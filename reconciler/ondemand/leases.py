"""Granted on-demand leases on the leader: teardown, orphans, merge (R22, R25).

The lease path (``reconciler.ondemand.leaser``) asks for leases; this keeper retires them.
Rules, all state-based over the caches so a restart finds what it missed:

- **teardown**: an active, open ``on_demand`` lease that no live pod carries any more,
  after a pod that used it finished or left, is cancelled ``pod-terminated`` (§2.9: the
  lease's pod finished or was deleted) — also when the pod left while no reconciler ran:
  its hold, bound to the pod, is then dropped by upkeep, and that tells;
- **orphan**: one no pod is known to have carried, with no ledger hold, older than
  ``LEDGER_CLAIM_TTL_SECONDS`` and not just used by this process, is cancelled
  ``controller-revoked`` (a grant whose admission never happened — the reconciler died
  between the two, or the pod left first); a timer fires when the soonest unused lease
  passes that grace;
- **merge** (``ONDEMAND_MERGE_ENABLED``): a pod running under an active lease moves onto
  its owner's booking the moment one with room is open, through the re-linker's move
  (``ReservationRelinked``), and the lease is then cancelled ``superseded`` (retried
  until the app confirms); a timer fires at the next booking start while any pod runs
  under a lease.

Leases being used right now (``using``) are left alone. A cancel's answer is written
to the mirror at once, so the caches see the lease cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Protocol

from reconciler.admission import adoption
from reconciler.admission.relink import Relinker
from reconciler.base.caches import Caches
from reconciler.base.mirroring import MirrorWriter, facts_from
from reconciler.base.pods import PodView
from reconciler.base.settings import ReconcilerSettings
from shared import model
from shared.appclient import Cancelled, CancelReason, GpuClass
from shared.appclient.outcomes import CancelResult, Failure
from shared.clock import Clock
from shared.logs import log
from shared.model import GPUReservation, Kind, State

_log = logging.getLogger(__name__)
#: The merge looks this long after a booking's start (its window is then open).
MERGE_LAG = timedelta(milliseconds=1)


class Canceller(Protocol):
    """The one app call the keeper makes (``AppClient`` satisfies it)."""

    async def cancel(self, reservation_id: int, reason: CancelReason) -> CancelResult: ...


class Counted(Protocol):
    """A Prometheus counter child (``inc``)."""

    def inc(self, amount: float = 1) -> None: ...


def describe(failure: Failure) -> str:
    """A failure for a log line (type and the app's detail, short)."""
    return f"{type(failure).__name__}: {getattr(failure, 'detail', '')}"[:300]


def merging(pod: PodView, lease: GPUReservation, now: datetime) -> bool:
    """R25's subject: a movable pod under an active, open on-demand lease."""
    facts = lease.facts
    if facts.kind is not Kind.ON_DEMAND or facts.state is not State.ACTIVE:
        return False
    return facts.is_open(now) and adoption.movable(pod)


class LeaseKeeper:
    """Retires the leases of one replica (state kept in memory is only a hint)."""

    def __init__(
        self,
        app: Canceller,
        caches: Caches,
        writer: MirrorWriter,
        settings: ReconcilerSettings,
        clock: Clock,
        classes: Callable[[], Mapping[int, GpuClass]],
        cancels: Counted,
        relinker: Relinker | None = None,
    ) -> None:
        self._app = app
        self._caches = caches
        self._writer = writer
        self._settings = settings
        self._clock = clock
        self._classes = classes
        self._cancels = cancels
        self._relinker = relinker
        self._grace = timedelta(seconds=settings.ledger_claim_ttl_s)
        #: Leases a pod used and then finished or left (teardown says pod-terminated).
        self._ended: set[str] = set()
        #: Leases being used right now (the teardown leaves them alone).
        self._busy: set[str] = set()
        #: Leases this process admitted a pod under → when (the cache may not show the
        #: pod's reference yet: the orphan rule leaves them alone for the grace).
        self._used: dict[str, datetime] = {}
        self._cancel_retry: dict[str, datetime] = {}
        #: Leases whose pod moved onto a booking, to cancel ``superseded`` (retried).
        self._superseded: set[int] = set()

    def pod_changed(self, old: PodView | None, new: PodView | None) -> bool:
        """Note a pod under a lease finishing or leaving; True when a batch should run."""
        if old is not None and old.reference and (new is None or new.finished):
            self._ended.add(old.reference)
            return True
        return False

    def ledger_changed(self, old: GPUReservation | None, new: GPUReservation | None) -> bool:
        """Note a lease whose ledger dropped the hold bound to a pod the pod cache no
        longer holds: a pod admitted under it left, though no pod event may have said so
        (it was deleted while no reconciler ran; after the restart only upkeep's drop of
        its hold tells). A pod still cached (re-linked elsewhere, or finished: the pod
        rules see those) is not. True when a batch should run."""
        if old is None or new is None or old.facts.kind is not Kind.ON_DEMAND:
            return False
        kept = {h.pod_uid for h in new.holds}
        dropped = {h.pod_uid for h in old.holds if h.bound and h.pod_uid not in kept}
        if not dropped or dropped & {p.uid for p in self._caches.pods.items.values()}:
            return False
        self._ended.add(new.name)
        return True

    @contextmanager
    def using(self, name: str) -> Iterator[None]:
        """The lease ``name`` is being mirrored and used: no teardown meanwhile."""
        self._busy.add(name)
        try:
            yield
        finally:
            self._busy.discard(name)

    def used(self, name: str) -> None:
        """A pod was admitted under ``name`` by this process just now."""
        self._used[name] = self._clock.now()

    def next_timer(self, now: datetime) -> datetime | None:
        """The keeper's next instant: a booking start (merge) or an orphan's grace end."""
        found = [t for t in (self._next_booking_start(now), self._next_orphan(now)) if t]
        return min(found, default=None)

    # --- merge (R25) -------------------------------------------------------------------

    def _next_booking_start(self, now: datetime) -> datetime | None:
        if self._relinker is None or not self._settings.ondemand.merge:
            return None
        by_name = self._caches.by_name()
        if not any(
            (res := by_name.get(p.reference or "")) is not None and res.facts.kind is Kind.ON_DEMAND
            for p in self._caches.pods.items.values()
        ):
            return None
        starts = [
            r.facts.start + MERGE_LAG
            for r in by_name.values()
            if r.facts.kind is Kind.BOOKING and r.facts.start > now
        ]
        return min(starts, default=None)

    async def merge(self, now: datetime, pods: list[PodView], pool: list[GPUReservation]) -> None:
        """Move lease pods onto open bookings of their owners; cancel those leases."""
        relinker = self._relinker
        if relinker is None or not self._settings.ondemand.merge:
            return
        by_name = {r.name: r for r in pool}
        taken: dict[str, int] = {}
        for pod in pods:
            lease = by_name.get(pod.reference or "")
            if lease is None or not merging(pod, lease, now):
                continue
            goal = adoption.target(pod, by_name, now, relinker.rules, taken)
            if goal is None:
                continue
            async with relinker.lock:
                if await relinker.move(pod, goal, adoption.Cause.MERGED, now, by_name):
                    taken[goal.name] = taken.get(goal.name, 0) + pod.gpus
                    self._superseded.add(lease.facts.id)
        for rid in list(self._superseded):
            if await self.cancel(rid, CancelReason.SUPERSEDED):
                self._superseded.discard(rid)

    # --- teardown and orphans (R22) --------------------------------------------------

    async def teardown(
        self, now: datetime, pods: list[PodView], pool: list[GPUReservation]
    ) -> None:
        """Cancel the leases no live pod carries (module docstring)."""
        live = {p.reference for p in pods if p.reference and not p.finished}
        finished = {p.reference for p in pods if p.reference and p.finished}
        self._forget(now, pool)
        jobs = []
        for res in pool:
            facts = res.facts
            if facts.kind is not Kind.ON_DEMAND or facts.state is not State.ACTIVE:
                continue
            if facts.end <= now or res.name in live or res.name in self._busy:
                continue
            if facts.id in self._superseded or self._cancel_retry.get(res.name, now) > now:
                continue
            if res.name in self._ended or res.name in finished:
                jobs.append(self.cancel(facts.id, CancelReason.POD_TERMINATED))
            elif self._orphan(res, now):
                jobs.append(self.cancel(facts.id, CancelReason.CONTROLLER_REVOKED))
        await asyncio.gather(*jobs)

    def _orphan(self, res: GPUReservation, now: datetime) -> bool:
        return not res.holds and res.name not in self._used and now - res.facts.start >= self._grace

    def _forget(self, now: datetime, pool: list[GPUReservation]) -> None:
        """Drop memory of leases cancelled or gone meanwhile, and old ``used`` marks."""
        for name, at in list(self._used.items()):
            if now - at >= self._grace:
                del self._used[name]
        active = {
            r.name for r in pool if r.facts.kind is Kind.ON_DEMAND and r.facts.state is State.ACTIVE
        }
        self._ended &= active
        for name in self._cancel_retry.keys() - active:
            del self._cancel_retry[name]

    def _next_orphan(self, now: datetime) -> datetime | None:
        referenced = {p.reference for p in self._caches.pods.items.values() if p.reference}
        ends = [
            r.facts.start + self._grace
            for r in self._caches.reservations.items.values()
            if r.facts.kind is Kind.ON_DEMAND
            and r.facts.state is State.ACTIVE
            and not r.holds
            and r.name not in referenced
            and r.facts.start + self._grace > now
        ]
        return min(ends, default=None)

    async def cancel(self, rid: int, reason: CancelReason) -> bool:
        """Cancel a lease and mirror the answer; a failure is retried at the tick."""
        name = model.reference(rid)
        self._cancels.inc()
        got = await self._app.cancel(rid, reason)
        now = self._clock.now()
        if not isinstance(got, Cancelled):
            self._cancel_retry[name] = now + timedelta(seconds=self._settings.queue_interval_s)
            log(
                _log,
                logging.WARNING,
                "ondemand.cancel_failed",
                reservation=name,
                reason=str(reason),
                error=describe(got),
            )
            return False
        self._cancel_retry.pop(name, None)
        self._ended.discard(name)
        log(_log, logging.INFO, "ondemand.cancelled", reservation=name, reason=str(reason))
        row = got.reservation
        facts = facts_from(row, self._classes()) if row is not None else None
        if facts is not None:
            await self._writer.upsert(facts, now)
        return True
