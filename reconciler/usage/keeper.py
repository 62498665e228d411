"""The leader's usage accounting: booked versus used GPU-seconds per reservation.

``UsageKeeper`` listens to the pod cache (every pod that carries a booking reference,
finished ones included, by reservation and uid; a pod that leaves a reservation — it is
deleted, or re-linked elsewhere — is remembered as stopped at that instant until its run
is folded) and to the reservation cache. Its pass (on pod changes, and every
``USAGE_INTERVAL_SECONDS``) folds each touched reservation's pods into its record
(``shared.policy.usage.advance``) and writes ``status.usage`` with a merge patch when
the record changed (a run opened, closed or was forgotten), when an open reservation's
record was last written ``USAGE_CHECKPOINT_SECONDS`` ago, or once its window has
stopped. Every pass adds what each reservation's figures grew by since the last pass
to the counters.

The record in memory is this term's truth; at the first pass of a term for a
reservation it starts from the stored record (``status.usage``) and the pods as listed,
which give the same figures as an uninterrupted run (the property the policy module's
tests check). The counters go on from the stored record's figures at its ``asOf``:
what the previous leader counted after its last write is counted again (at most a
checkpoint's worth), nothing is lost; a reservation never written starts at the
figures of its first pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from reconciler.base.kube import KubeWriter
from reconciler.base.loops import sleep_unless, until_ready
from reconciler.base.metrics import UsageMetrics
from reconciler.base.pods import PodView
from reconciler.base.settings import UsageSettings
from shared.clock import Clock, parse_utc
from shared.errors import KubeError, NotFound
from shared.logs import log
from shared.model import GPUReservation
from shared.policy import usage, usagerecord
from shared.policy.usage import Figures, Record, Run, Window
from shared.resources import GPU_RESERVATIONS

_log = logging.getLogger(__name__)
USAGE_TASK = "usage"
#: ``gpu_reservation``: the metric prefix (``reconciler.metrics.NAMESPACE``).
#: The label value of a reservation without a group.
NO_GROUP = "-"


def labels_of(res: GPUReservation) -> tuple[str, str, str, str]:
    """The counters' label values of ``res``."""
    facts = res.facts
    return (facts.gpu_class, facts.kind.value, facts.owner, facts.group or NO_GROUP)


def run_of(pod: PodView, stopped: datetime | None = None) -> Run:
    """``pod`` as a run of its reservation; ``stopped``: when it was seen leaving it
    (used when its status tells no finish)."""
    start, end = pod.ran
    finish = _instant(end) or (stopped if start else None)
    return Run(pod.uid, pod.gpus, _instant(start), finish, pod.admitted_at)


def _instant(text: str) -> datetime | None:
    try:
        return parse_utc(text) if text else None
    except ValueError:
        return None


@dataclass
class _Book:
    """What this term knows of one reservation."""

    record: Record
    #: The record as last stored (read at the term's start, or written since).
    stored: Record
    counted: Figures | None = None
    #: The ``status.phase`` as last written (or assumed right at the term's start).
    phase: str | None = None
    #: ``usage.form_of(record, window)``, for the record and window it was made of.
    form: tuple[Record, Window, usage.Form] | None = None

    def figures(self, window: Window, now: datetime) -> Figures:
        """The record's figures at ``now`` (its line kept between passes)."""
        kept = self.form
        if kept is None or kept[0] is not self.record or kept[1] != window:
            kept = self.form = (self.record, window, usage.form_of(self.record, window))
        return usage.figures(self.record, window, now, kept[2])


class UsageKeeper:
    """Folds pod runs into each reservation's usage record, writes it, counts it."""

    def __init__(
        self,
        gateway: KubeWriter,
        namespace: str,
        clock: Clock,
        reservations: Callable[[], Mapping[str, GPUReservation]],
        ready: Callable[[], bool],
        metrics: UsageMetrics,
        settings: UsageSettings,
        gather_s: float = 0.0,
    ) -> None:
        #: Seconds a pass woken by a change waits for more to share it.
        self._gather_s = gather_s
        self._gateway = gateway
        self._ns = namespace
        self._clock = clock
        self._reservations = reservations
        self._ready = ready
        self.metrics = metrics
        self.settings = settings
        self._pods: dict[str, dict[str, PodView]] = {}
        self._gone: dict[str, dict[str, Run]] = {}
        self._books: dict[str, _Book] = {}
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()

    # --- listeners ----------------------------------------------------------------

    def pod_changed(self, key: str, old: PodView | None, new: PodView | None) -> None:
        """The pod cache's listener."""
        was = old.reference if old is not None and old.uid else None
        now_ref = new.reference if new is not None and new.uid else None
        if old is not None and was is not None:
            left = new is None or now_ref != was or new.uid != old.uid
            if left:
                self._pods.get(was, {}).pop(old.uid, None)
                if old.ran[0]:
                    at = usage.whole(self._clock.now())
                    self._gone.setdefault(was, {})[old.uid] = run_of(old, at)
                self._touch(was)
        if new is not None and now_ref is not None:
            pods = self._pods.setdefault(now_ref, {})
            before = pods.get(new.uid)
            pods[new.uid] = new
            if before is None or (before.ran, before.gpus, before.admitted_at) != (
                new.ran,
                new.gpus,
                new.admitted_at,
            ):
                self._touch(now_ref)

    def reservation_changed(
        self, key: str, old: GPUReservation | None, new: GPUReservation | None
    ) -> None:
        """The reservation cache's listener: a new or changed reservation is looked at;
        a deleted one is forgotten (its retention ended)."""
        if new is None and old is not None:
            self._books.pop(old.name, None)
            self._dirty.discard(old.name)
        elif new is not None and (
            old is None
            or old.facts != new.facts
            or old.status_extra.get("noShow") != new.status_extra.get("noShow")
        ):
            self._touch(new.name)

    def _touch(self, name: str) -> None:
        self._dirty.add(name)
        self._wake.set()

    def reset(self) -> None:
        """Forget everything (the leader term ended; the caches were emptied)."""
        self._pods.clear()
        self._gone.clear()
        self._books.clear()
        self._dirty.clear()

    # --- the loop -------------------------------------------------------------------

    def loops(self) -> list[tuple[str, Callable[[], Any]]]:
        return [(USAGE_TASK, self.run)]

    async def run(self) -> None:
        """A full pass every interval; between them, a pass over what changed."""
        await until_ready(self._ready)
        interval = self.settings.interval_s
        last_full: datetime | None = None
        while True:
            self._wake.clear()
            now = self._clock.now()
            full = last_full is None or (now - last_full).total_seconds() >= interval
            if full:
                last_full = now
            await self.once(full=full)
            left = interval - (self._clock.now() - (last_full or now)).total_seconds()
            timed = await sleep_unless(self._clock, self._wake, left)
            if not timed and self._gather_s > 0:
                await asyncio.sleep(self._gather_s)  # more changes share this pass

    async def once(self, *, full: bool = True) -> int:
        """One pass over every reservation (``full``) or the touched ones; the number
        of records written."""
        if not self._ready():
            return 0
        began = time.thread_time()
        try:
            return await self._once(full)
        finally:
            self.metrics.cpu.inc(time.thread_time() - began)

    async def _once(self, full: bool) -> int:
        now = usage.whole(self._clock.now())
        reservations = self._reservations()
        names: Iterable[str] = reservations if full else list(self._dirty)
        touched, self._dirty = self._dirty, set()
        writes = []
        for name in names:
            res = reservations.get(name)
            if res is None:
                continue
            write = self._step(res, now, name in touched)
            if write is not None:
                writes.append(write)
        done = 0
        for name, res, record in writes:
            done += await self._write(name, res, record)
        return done

    def _step(
        self, res: GPUReservation, now: datetime, touched: bool
    ) -> tuple[str, GPUReservation, Record] | None:
        """Advance one reservation's record in memory and count what it grew by; the
        write it needs, if any."""
        name = res.name
        window = usage.window_of(res)
        book = self._books.get(name)
        if book is None:
            try:
                stored = usagerecord.record_from_status(res.status_extra)
            except ValueError as exc:
                log(_log, logging.WARNING, "usage.malformed", reservation=name, error=str(exc))
                stored = Record()
            book = self._books[name] = _Book(stored, stored)
            if stored.as_of is not None:
                # The counters go on from the figures the previous term wrote: what it
                # counted past its last write is counted again (at most a checkpoint).
                book.counted = usage.figures(stored, window, stored.as_of)
            touched = True
        phase = res.facts.phase(now).value
        if book.phase is None:
            book.phase = phase
        settled = not touched and not book.record.open and book.phase == phase
        if settled and _final(book.record, window):
            return None  # ended, written, no pod: nothing moves
        advanced = touched or self._checkpoint_due(book, window, now)
        if advanced:
            runs = [run_of(p) for p in self._pods.get(name, {}).values()]
            gone = self._gone.get(name, {})
            present = {r.uid for r in runs}
            runs += [r for uid, r in gone.items() if uid not in present]
            record = usage.advance(book.record, window, runs, now)
            if gone:
                # A pod that left is never reported here again: once folded, its uid
                # need not be kept (nor its run remembered).
                done = {u for u in gone if u in record.folded and u not in present}
                record = replace(record, folded=tuple(u for u in record.folded if u not in done))
                kept = {u: r for u, r in gone.items() if u not in done}
                if kept:
                    self._gone[name] = kept
                else:
                    self._gone.pop(name, None)
            book.record = record
        self._count(res, book, book.figures(window, now))
        # Every write here carries the phase too: a mirror's status write that lost its
        # race to one of these (it is conditional on the resourceVersion and leaves a
        # conflict to the writer that won) must not leave a stale phase behind.
        if book.phase != phase:
            return (name, res, book.record)
        if (advanced or book.record is not book.stored) and self._due(book, window, now):
            return (name, res, book.record)
        return None

    def _checkpoint_due(self, book: _Book, window: Window, now: datetime) -> bool:
        """Whether an untouched record must move its ``as_of`` now: its window stopped
        since it was last advanced, or it is open and was written a checkpoint ago.
        Otherwise a pass only reads the figures off the record (its open runs give
        them at any instant), so a steady pass costs no pod reads."""
        record, stored = book.record, book.stored
        if record.as_of is None or record.as_of < window.stop <= now:
            return True
        return window.start <= now < window.stop and self._stale(stored)

    def _stale(self, stored: Record) -> bool:
        """The stored record is a checkpoint old (or was never written)."""
        if stored.as_of is None:
            return True
        return (self._clock.now() - stored.as_of).total_seconds() >= self.settings.checkpoint_s

    def _due(self, book: _Book, window: Window, now: datetime) -> bool:
        """Whether the record must be written now."""
        record, stored = book.record, book.stored
        if record.as_of is None:
            return False
        if not usage.unchanged(record, stored):
            return True
        if now >= window.stop:
            return stored.as_of is None or stored.as_of < window.stop
        return window.start <= now and self._stale(stored)

    def _count(self, res: GPUReservation, book: _Book, fig: Figures) -> None:
        before = book.counted
        book.counted = fig
        if before is None:
            return  # the term's first look: the baseline (see the module docstring)
        labels = labels_of(res)
        for counter, grew in (
            (self.metrics.booked, fig.booked - before.booked),
            (self.metrics.used, fig.used - before.used),
            (self.metrics.idle, fig.idle - before.idle),
        ):
            if grew > 0:
                counter.labels(*labels).inc(grew)

    async def _write(self, name: str, res: GPUReservation, record: Record) -> int:
        phase = res.facts.phase(self._clock.now()).value
        status = {usage.STATUS_KEY: usagerecord.record_to_status(record, usage.window_of(res))}
        # The display values too (as every ledger write sets them): a usage write may be
        # the first to give the object a status, and the mirror's own first status
        # write is skipped once one exists.
        body = {"status": {**status, "phase": phase, "usedGpus": res.used_gpus}}
        try:
            await self._gateway.patch(
                GPU_RESERVATIONS,
                name,
                body,
                self._ns,
                "merge",
                subresource="status",
                read_answer=False,
            )
        except NotFound:
            self._books.pop(name, None)
            return 0
        except KubeError as exc:
            self.metrics.writes.labels("failed").inc()
            log(_log, logging.WARNING, "usage.write_failed", reservation=name, error=str(exc))
            return 0
        self.metrics.writes.labels("ok").inc()
        book = self._books.get(name)
        if book is not None:
            book.stored = record
            book.phase = phase
        return 1


def _final(record: Record, window: Window) -> bool:
    """Written after its window stopped: its figures never move again."""
    return record.as_of is not None and record.as_of >= window.stop
