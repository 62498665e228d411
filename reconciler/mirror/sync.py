"""The sync: app → GPUReservation objects, every RESERVATION_FETCH_INTERVAL.

One pass fetches every reservation of ``[today − 1, today + LOOKAHEAD]`` (status=all,
so cancellations are seen) and the GPU classes, lists the mirror, learns which of it
live pods reference (``Syncer._referenced``), and applies ``mirror.plan``. A failed
reservation fetch changes nothing (never replace state with a partial list): it is
logged, counted, and the next pass tries again. A failed class fetch keeps the previous
class map (contract §2.2). Sync and push in one process write under one lock (the app
fetch runs outside it, so a push never waits for the app); across replicas the
resourceVersion-checked writes and the ``updated_at`` rule keep them apart.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import date, timedelta
from typing import Any, Protocol

from reconciler.base.apphealth import AppHealth
from reconciler.base.component import Loop
from reconciler.base.kube import KubeWriter
from reconciler.base.metrics import Metrics
from reconciler.base.mirroring import MirrorWriter, facts_from, installed_first, plan
from shared import model, vocab
from shared.appclient import Failure, Fetched, GpuClass, Reservation, fetch_window
from shared.clock import Clock
from shared.concurrency import bounded
from shared.errors import KubeError
from shared.logs import log
from shared.resources import GPU_RESERVATIONS, PODS

_log = logging.getLogger(__name__)
SYNC_TASK = "reservation-sync"
_FINISHED = frozenset({"Succeeded", "Failed"})
#: Mirror writes of one sync in flight at once (a first sync writes every mirror).
WRITE_CONCURRENCY = 16


class ReservationSource(Protocol):
    """The reads the sync makes of the reservation app (``AppClient`` satisfies it)."""

    async def list_reservations(
        self, date_start: date, date_end: date
    ) -> Fetched[tuple[Reservation, ...]] | Failure:
        """Every reservation overlapping the days, or a failure (never a partial list)."""
        ...

    async def list_gpu_classes(self) -> Fetched[tuple[GpuClass, ...]] | Failure:
        """Every GPU class, or a failure."""
        ...


class Syncer:
    """Keeps the mirror equal to the app; shared by the sync loop and the push API."""

    def __init__(
        self,
        source: ReservationSource,
        gateway: KubeWriter,
        namespace: str,
        clock: Clock,
        metrics: Metrics,
        lookahead_days: int,
        interval_s: float = 300.0,
        retention: timedelta = timedelta(0),
        references: Callable[[], set[str] | None] = lambda: None,
    ) -> None:
        self.source = source
        self._interval_s = interval_s
        self._gateway = gateway
        self._ns = namespace
        self.clock = clock
        self._metrics = metrics
        self._lookahead = lookahead_days
        #: How long an ended mirror is kept for its usage record.
        self.retention = retention
        #: The names live pods reference, as a synced pod cache knows them (``None``:
        #: unknown, so a full sync lists every pod).
        self._references = references
        self.writer = MirrorWriter(gateway, namespace, metrics)
        #: The app's health as the poll sees it (the lease path adds its own calls).
        self.health = AppHealth(clock)
        self.classes: dict[int, GpuClass] = {}
        self.lock = asyncio.Lock()
        self._failures = 0
        #: A full reservation fetch has succeeded (waiting Events may say "no match").
        self.fetched = False
        #: The app's class list was fetched at least once (UnknownGpuClass may be said).
        self.classes_known = False
        #: Objects a deferring sync created, by name, as created: status still to write.
        self._unwritten: dict[str, dict[str, Any]] = {}

    def loops(self) -> list[Loop]:
        """The poll, every ``interval_s`` (RESERVATION_FETCH_INTERVAL)."""
        return [(SYNC_TASK, lambda: self.run(self._interval_s))]

    async def run(self, interval_s: float) -> None:
        """Sync every ``interval_s`` (the first pass already ran at startup)."""
        while True:
            await self.clock.sleep(interval_s)
            await self.sync_once()

    async def refresh_classes(self) -> None:
        """Replace the class map; on failure keep the previous one (logged)."""
        got = await self.source.list_gpu_classes()
        if isinstance(got, Fetched):
            self.classes = {c.id: c for c in got.value}
            self.classes_known = True
        else:
            log(_log, logging.WARNING, "api.gpu_classes_fetch_failed", error=_describe(got))

    async def sync_once(self, *, defer_status: bool = False) -> bool:
        """One full pass; ``False`` (and nothing changed) when the fetch failed.

        The app is asked outside the lock: a slow fetch must not hold up a push (which
        the app waits on). Only the writes are serialised with the push; a pull that
        ends after a newer push cannot undo it (specs move only forward by
        ``updated_at``).

        ``defer_status`` (the leader's startup sync): the objects this pass creates are
        left without a status (phase, ``usedGpus``, an empty ledger) until
        ``write_deferred_status``. The leader's loops and the webhook need only the
        specs (an absent status reads as an empty ledger, and a claim writes the whole
        status); on a first start at 2,000 reservations these PUTs were half the
        calls before the loops could start."""
        now = self.clock.now()
        start, end = fetch_window(now.date(), self._lookahead)
        got = await self.source.list_reservations(start, end)
        self.health.note(got)
        if not isinstance(got, Fetched):
            self._fetch_failed(_describe(got))
            return False
        await self.refresh_classes()
        async with self.lock:
            try:
                await self._apply(got.value, self._unwritten if defer_status else None)
            except KubeError as exc:
                self._fetch_failed(f"kubernetes: {exc}")
                return False
            self._fetch_ok(len(got.value))
            return True

    async def record(self, row: Reservation) -> None:
        """Mirror one row the app just answered with (e.g. a cancel's result) at once,
        instead of at the next poll; the ``updated_at`` rule keeps it from undoing a
        newer write. Never raises (a failed write is logged; the poll heals it)."""
        async with self.lock:
            facts = facts_from(row, self.classes)
            if facts is not None:
                await self.writer.upsert(facts, self.clock.now())

    async def write_deferred_status(self) -> None:
        """Write the status of every object a deferring sync created (one PUT each on
        its create answer, bounded). A conflict means a claim or a spec write has
        written it already; a failure is logged and the next sync's phase refresh
        heals it. Never raises."""
        unwritten, self._unwritten = self._unwritten, {}
        now = self.clock.now()
        writes = [self.writer.refresh_status(n, now, raw) for n, raw in unwritten.items()]
        await bounded(writes, WRITE_CONCURRENCY)

    async def mirror(self) -> dict[str, model.GPUReservation]:
        """Every readable GPUReservation object, by name."""
        items = (await self._gateway.list_all(GPU_RESERVATIONS, self._ns)).items
        return dict(_parse_existing(items)[0])

    async def _apply(
        self, rows: tuple[Reservation, ...], later: dict[str, dict[str, Any]] | None
    ) -> None:
        now = self.clock.now()
        fetched = [f for f in (self._facts(r) for r in rows) if f is not None]
        raw_objects = (await self._gateway.list_all(GPU_RESERVATIONS, self._ns)).items
        existing, phases = _parse_existing(raw_objects)
        referenced = await self._referenced()
        decided = plan(fetched, existing, phases, referenced, now, self.retention)
        # Concurrently (bounded), but every active entry's write ends before the first
        # other one starts (``installed_first``); deletes and status refreshes after.
        for _, batch in itertools.groupby(decided.upserts, key=installed_first):
            writes = [
                self.writer.upsert(f, now, absent=f.name not in existing, later=later)
                for f in batch
            ]
            await bounded(writes, WRITE_CONCURRENCY)
        await bounded([self.writer.delete(n) for n in decided.deletes], WRITE_CONCURRENCY)
        await bounded(
            [self.writer.refresh_status(n, now) for n in decided.refresh], WRITE_CONCURRENCY
        )
        self._metrics.mirrored.set(len(existing) + len(decided.upserts) - len(decided.deletes))

    def _facts(self, row: Reservation) -> model.ReservationFacts | None:
        facts = facts_from(row, self.classes)
        if facts is None:
            log(_log, logging.DEBUG, "mirror.skipped", reservation=model.reference(row.id))
        return facts

    async def _referenced(self) -> set[str]:
        """Names of GPUReservations that live (unfinished) pods carry.

        The leader's synced pod cache knows them: it keeps every pod that carries a
        ``galends/*`` annotation, labelled or not. Without one (the startup sync, a
        watch that keeps failing) every pod is listed, not only those labelled
        ``gpu-class``: a user may remove the label from a running pod, and its
        reservation must not be deleted under it (one paginated LIST)."""
        known = self._references()
        if known is not None:
            return known
        return referenced_by((await self._gateway.list_all(PODS)).items)

    def _fetch_failed(self, why: str) -> None:
        self._failures += 1
        self._metrics.fetches.labels("failed").inc()
        self._metrics.fetch_failures_in_a_row.set(self._failures)
        log(_log, logging.WARNING, "fetch.failed", error=why, consecutive=self._failures)

    def _fetch_ok(self, count: int) -> None:
        self._failures = 0
        self.fetched = True
        self._metrics.fetches.labels("ok").inc()
        self._metrics.fetch_failures_in_a_row.set(0)
        self._metrics.last_good_fetch.set(self.clock.now().timestamp())
        log(_log, logging.INFO, "fetch.complete", reservations=count)


def referenced_by(pods: Iterable[dict[str, Any]]) -> set[str]:
    """The well-formed booking references that live (unfinished) ``pods`` carry."""
    refs = set()
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in _FINISHED:
            continue
        ref = ((pod.get("metadata") or {}).get("annotations") or {}).get(vocab.BOOKING_REFERENCE)
        if isinstance(ref, str) and model.parse_reference(ref) is not None:
            refs.add(ref)
    return refs


def _parse_existing(
    items: list[dict[str, Any]],
) -> tuple[Mapping[str, model.GPUReservation], Mapping[str, str]]:
    existing: dict[str, model.GPUReservation] = {}
    phases: dict[str, str] = {}
    for obj in items:
        try:
            res = model.from_object(obj)
        except ValueError as exc:
            name = (obj.get("metadata") or {}).get("name")
            log(_log, logging.WARNING, "mirror.malformed", reservation=name, error=str(exc))
            continue
        existing[res.name] = res
        status = obj.get("status") or {}
        phases[res.name] = str(status.get("phase", ""))
        if isinstance(status, dict) and status.get("usedGpus") != res.used_gpus:
            # A display total written from a read a concurrent write had overtaken
            # (the ledger protocol): refreshed with the phase, from the holds.
            phases[res.name] = ""
    return existing, phases


def _describe(failure: Failure) -> str:
    detail = getattr(failure, "detail", "")
    return f"{type(failure).__name__}: {detail}"[:300]
