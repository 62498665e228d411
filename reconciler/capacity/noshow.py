"""No-show cancels (R14) on the leader: declare durably, re-verify, cancel, record.

Each pass (at start once the caches are synced, at the earliest armed deadline, when
a reservation or a pod's hold changes, and every QUEUE_PROCESSOR_INTERVAL):

1. arm / clear / fire deadlines with ``shared.policy.noshow.step`` over the cached
   GPUReservations and the live pods' booking references;
2. *declare* each fired booking by writing ``status.noShow`` (declaredAt, deadline)
   with a resourceVersion-checked status write — only then is it a no-show;
3. for every declared booking whose cancel has not landed (this term's, or one a
   previous leader declared), re-verify against a fresh LIST of the owner's pods
   (the cache may lag): a live pod under it or chained through it wins, and the
   declaration is withdrawn (``noshow.cleared``); otherwise
   ``POST /api/reservations/{id}/cancel`` with reason ``no-show``. A 2xx or 404
   writes ``cancelledAt`` (never sent again); a failure counts an attempt and is
   retried next pass; the cancelled row the app answers with is mirrored at once
   (``Syncer.record``). A mirror already showing the booking cancelled records the
   cancel without calling the app (a previous leader's cancel landed but its record
   did not).

No Event is written (there is no pod); each step logs and counts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from reconciler.base.caches import ledger_only
from reconciler.base.component import Ground, Loop
from reconciler.base.kube import KubeWriter
from reconciler.base.loops import sleep_unless, until_ready
from reconciler.base.metrics import Metrics
from reconciler.base.pods import PodView
from reconciler.base.settings import ReconcilerSettings
from shared import ledger, model, vocab
from shared.appclient import Cancelled, CancelReason, CancelResult, Reservation
from shared.clock import Clock, MonotonicClock, SystemMonotonic, format_utc
from shared.errors import KubeError, NotFound
from shared.logs import log
from shared.model import GPUReservation, ReservationFacts, State
from shared.policy import noshow
from shared.resources import GPU_RESERVATIONS, PODS

_log = logging.getLogger(__name__)
NOSHOW_TASK = "no-show"
#: Budget of one status write (re-reads on 409 included).
WRITE_DEADLINE_S = 10.0
_FINISHED = frozenset({"Succeeded", "Failed"})


class Canceller(Protocol):
    """The app call this needs (``AppClient`` satisfies it)."""

    async def cancel(self, reservation_id: int, reason: CancelReason) -> CancelResult:
        """Cancel with a machine reason; idempotent on the app side."""
        ...


def holds_reference(pod: PodView) -> str | None:
    """The booking reference of a pod that still holds it (not finished or leaving)."""
    if pod.finished or pod.deleting:
        return None
    return pod.reference


class Holding:
    """How many live pods hold each booking reference (``holds_reference``), kept by a
    listener on the pod cache. The no-show decision reads only *which* bookings are
    held, so ``touch`` (the loop's wake-up) is called when a booking gains its first
    holder or loses its last — not on every pod admitted under it (a window opening
    for ten pods of a booking wakes the loop once, not ten times)."""

    def __init__(self, touch: Callable[[], None]) -> None:
        self._touch = touch
        self._count: dict[str, int] = {}

    def changed(self, key: str, old: PodView | None, new: PodView | None) -> None:
        """The pod cache's listener."""
        before = holds_reference(old) if old is not None else None
        after = holds_reference(new) if new is not None else None
        if before == after:
            return
        if before is not None:
            left = self._count.get(before, 0) - 1
            if left > 0:
                self._count[before] = left
            else:
                self._count.pop(before, None)
                self._touch()
        if after is not None:
            self._count[after] = self._count.get(after, 0) + 1
            if self._count[after] == 1:
                self._touch()

    def clear(self) -> None:
        """Forget every count (the pod cache was emptied without telling listeners)."""
        self._count.clear()


def live_references(pods: Iterable[dict[str, Any]]) -> set[str]:
    """Booking references of live pods in a raw LIST (the fresh re-verification)."""
    refs = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") in _FINISHED:
            continue
        ref = (meta.get("annotations") or {}).get(vocab.BOOKING_REFERENCE)
        if isinstance(ref, str):
            refs.add(ref)
    return refs


class NoShows:
    """The leader's no-show loop over its caches."""

    def __init__(
        self,
        gateway: KubeWriter,
        app: Canceller,
        settings: ReconcilerSettings,
        clock: Clock,
        metrics: Metrics,
        pods: Callable[[], Mapping[str, PodView]],
        reservations: Callable[[], Mapping[str, GPUReservation]],
        ready: Callable[[], bool],
        mirror: Callable[[Reservation], Awaitable[None]] | None = None,
        *,
        mono: MonotonicClock | None = None,
    ) -> None:
        self._mono = mono or SystemMonotonic()
        self._gateway = gateway
        self._mirror = mirror
        self._app = app
        self._ns = settings.common.namespace
        self._clock = clock
        self._metrics = metrics
        self._pods = pods
        self._reservations = reservations
        self._ready = ready
        self._tick_s = float(settings.queue_interval_s)
        self.rules = noshow.Rules(
            settings.noshow_timeout, settings.noshow_grace, settings.rules.use_group
        )
        self.tracker = noshow.Tracker()
        self._wake = asyncio.Event()
        self._malformed: set[str] = set()
        #: A failed cancel (or re-verification) is tried again no sooner than the next
        #: tick, however often pod and reservation changes wake the loop.
        self._retry_at: dict[str, datetime] = {}

    def touch(self) -> None:
        """Pass again soon (a reservation or a pod's hold changed)."""
        self._wake.set()

    def loops(self) -> list[Loop]:
        """The no-show loop."""
        return [(NOSHOW_TASK, self.run)]

    def reset(self) -> None:
        """Forget the armed deadlines and retry times (a later leader term re-arms them)."""
        self.tracker = noshow.Tracker()
        self._retry_at = {}

    async def run(self) -> None:
        """Passes at start, on changes, at the earliest deadline and every tick."""
        await until_ready(self._ready)
        while True:
            self._wake.clear()
            await self.once()
            await sleep_unless(self._clock, self._wake, self._nap())

    def _nap(self) -> float:
        due = self.tracker.next_deadline()
        if due is None:
            return self._tick_s
        left = (due - self._clock.now()).total_seconds()
        return min(self._tick_s, max(0.0, left) + 0.001)

    async def once(self) -> list[str]:
        """One pass; the names whose cancel landed in it."""
        if not self._ready():
            return []
        now = self._clock.now()
        reservations = dict(self._reservations())
        records = self._records(reservations)
        facts = {n: r.facts for n, r in reservations.items()}
        candidates = {
            n: f for n, f in facts.items() if n not in records and noshow.is_booking_in_play(f, now)
        }
        refs = {r for r in (holds_reference(p) for p in self._pods().values()) if r}
        held = noshow.claimed(refs, facts, now, use_group=self.rules.use_group)
        self.tracker, fired = noshow.step(candidates, held, self.tracker, now, self.rules)
        for name, deadline in fired:
            record = await self._declare(name, candidates[name], deadline, now)
            if record is not None:
                records[name] = record
        pending = {n: r for n, r in records.items() if r.pending and n in facts}
        self._metrics.noshow_pending.set(len(pending))
        self._retry_at = {n: t for n, t in self._retry_at.items() if n in pending}
        landed = []
        for name in sorted(pending):
            if self._retry_at.get(name, now) > now:
                continue
            if await self._settle(name, facts, pending[name], now):
                landed.append(name)
        return landed

    def _later(self, name: str, now: datetime) -> bool:
        """Try ``name`` again at the next tick; False (nothing landed)."""
        self._retry_at[name] = now + timedelta(seconds=self._tick_s)
        return False

    def _records(self, reservations: Mapping[str, GPUReservation]) -> dict[str, noshow.Record]:
        records = {}
        self._malformed &= reservations.keys()  # forget reservations that are gone
        for name, res in reservations.items():
            try:
                record = noshow.record_of(res)
            except ValueError as exc:
                if name not in self._malformed:
                    log(
                        _log,
                        logging.WARNING,
                        "noshow.record_malformed",
                        reservation=name,
                        error=str(exc),
                    )
                self._malformed.add(name)
                continue
            self._malformed.discard(name)
            if record is not None:
                records[name] = record
        return records

    async def _declare(
        self, name: str, facts: ReservationFacts, deadline: datetime, now: datetime
    ) -> noshow.Record | None:
        """Write the declaration; the stored record (another writer's if it declared
        first), None when nothing could be written (gone, failed)."""
        record = noshow.Record(declared_at=now, deadline=deadline)
        # Whether the write that landed is ours: the change runs again on every 409, and
        # the stored record cannot tell (it keeps whole seconds; ``now`` need not).
        ours = False

        def change(cur: GPUReservation) -> GPUReservation:
            nonlocal ours
            ours = False
            try:
                if noshow.record_of(cur) is not None:
                    return cur  # another writer declared it first
            except ValueError:
                pass  # a malformed record is replaced by a valid one
            ours = True
            return noshow.with_record(cur, record)

        written = await self._amend(name, change, now)
        if written is None:
            return None
        stored = noshow.record_of(written)
        if ours:
            self._metrics.noshow_declared.inc()
            log(
                _log,
                logging.INFO,
                "noshow.declared",
                reservation=name,
                owner=facts.owner,
                deadline=format_utc(deadline),
            )
        return stored

    async def _settle(
        self,
        name: str,
        facts: Mapping[str, ReservationFacts],
        record: noshow.Record,
        now: datetime,
    ) -> bool:
        """Re-verify and cancel one declared booking; True once the cancel landed.

        The reservation is read afresh first: the cache may still show the record as
        pending after this or another leader's cancel landed, and the contract is
        "exactly once" (a second call would be harmless to the app, still a repeat)."""
        fresh = await self._fresh(name)
        if fresh is None:
            return False
        record, mine = fresh
        facts = {**facts, name: mine}
        if mine.state is State.CANCELLED:
            await self._record(name, replace(record, cancelled_at=now), now)
            self._metrics.noshow_outcomes.labels("already_cancelled").inc()
            log(_log, logging.INFO, "noshow.already_cancelled", reservation=name)
            return True
        if now >= mine.end:
            log(_log, logging.DEBUG, "noshow.skipped", reservation=name, why="window ended")
            return False
        try:
            listed = await self._gateway.list_all(PODS, mine.owner)
        except KubeError as exc:
            log(_log, logging.WARNING, "noshow.verify_failed", reservation=name, error=str(exc))
            return self._later(name, now)
        refs = live_references(listed.items)
        if name in noshow.claimed(refs, facts, now, use_group=self.rules.use_group):
            await self._record(name, None, now)
            self._metrics.noshow_outcomes.labels("cleared").inc()
            log(_log, logging.INFO, "noshow.cleared", reservation=name, why="a pod holds it")
            return False
        result = await self._app.cancel(mine.id, CancelReason.NO_SHOW)
        attempts = record.attempts + 1
        if isinstance(result, Cancelled):
            await self._record(name, replace(record, cancelled_at=now, attempts=attempts), now)
            self._metrics.noshow_outcomes.labels("cancelled").inc()
            gone = result.already_gone or None
            log(_log, logging.INFO, "noshow.cancelled", reservation=name, already_gone=gone)
            if result.reservation is not None and self._mirror is not None:
                await self._mirror(result.reservation)  # kubectl shows it Cancelled at once
            return True
        why = f"{type(result).__name__}: {getattr(result, 'detail', '')}"[:200]
        await self._record(name, replace(record, attempts=attempts, last_error=why), now)
        self._metrics.noshow_outcomes.labels("failed").inc()
        log(
            _log,
            logging.WARNING,
            "noshow.cancel_failed",
            reservation=name,
            attempts=attempts,
            error=why,
        )
        return self._later(name, now)

    async def _fresh(self, name: str) -> tuple[noshow.Record, ReservationFacts] | None:
        """The pending record and facts as stored now; None when there is nothing to
        send (gone, cleared, landed, unreadable)."""
        try:
            raw = await self._gateway.get(GPU_RESERVATIONS, name, self._ns)
            res = model.from_object(raw)
            record = noshow.record_of(res)
        except NotFound:
            return None
        except (KubeError, ValueError) as exc:
            log(_log, logging.WARNING, "noshow.verify_failed", reservation=name, error=str(exc))
            return None
        if record is None or not record.pending:
            return None
        return record, res.facts

    async def _record(self, name: str, record: noshow.Record | None, now: datetime) -> None:
        await self._amend(name, lambda cur: noshow.with_record(cur, record), now)

    async def _amend(
        self, name: str, change: Callable[[GPUReservation], GPUReservation], now: datetime
    ) -> GPUReservation | None:
        deadline = self._mono.monotonic() + WRITE_DEADLINE_S
        return await ledger.amend(
            self._gateway,
            self._ns,
            name,
            change,
            now=now,
            deadline=deadline,
            monotonic=self._mono.monotonic,
        )


def setup(
    ground: Ground, app: Canceller, mirror: Callable[[Reservation], Awaitable[None]]
) -> tuple[NoShows, Holding]:
    """The no-show loop of one leader term, and the count of each booking's live
    holders that wakes it; woken too when a reservation's facts or no-show record
    change (not its holds: the pods tell which bookings are held)."""
    caches = ground.caches
    noshows = NoShows(
        ground.gateway,
        app,
        ground.settings,
        ground.clock,
        ground.metrics,
        lambda: caches.pods.items,
        caches.by_name,
        caches.ready,
        mirror=mirror,
    )
    holding = Holding(noshows.touch)
    caches.pods.listeners.append(holding.changed)

    def reservation_changed(
        _key: str, old: GPUReservation | None, new: GPUReservation | None
    ) -> None:
        if not ledger_only(old, new):
            noshows.touch()

    caches.reservations.listeners.append(reservation_changed)
    return noshows, holding
