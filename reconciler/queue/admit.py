"""The reserved queue's loop on the leader (R11, R12, R13): ``Admitter``.

``once`` is one pass, in phases: *select* the pods to look at, *route* each waiting one
over the reservation cache (``shared.policy.routing``), *sort* the routes (ADMIT: grouped
by their first candidate whose ledger is not behind the live pods, a pod whose last
patch failed backing off; QUEUE / NONE: told why they wait through the shared
``Teller``; JIT: left to ``reconciler.ondemand``), *gauge* the queue depth, *admit* the
groups (reservations concurrently; within one, a single ``ledger.claim_group`` write,
then the patches through the shared step, ``reconciler.admission.step``), *announce*
every admitted pod not yet announced (``RuntimeGuaranteed``), and after a full pass
*prune* what was kept of pods that left.

Triggers: a full pass (every waiting pod) runs when the caches are first synced, on a
reservation change that is not its ledger's alone (facts, status facts, a reservation
new or gone), at the next window start (a timer on the injected clock, re-armed every
pass) and every ``QUEUE_PROCESSOR_INTERVAL`` as a backstop. Between them a pass costs
what changed (``Touched``): the pods whose cache entry changed, and — for a reservation
whose holds alone moved (a claim, a binding, a mark, upkeep freeing a holder's hold:
R13) — its owner's waiting pods (``caches.waiting``), the only ones that could route to
it. Changes during a pass cause exactly one more pass, however many arrive.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime

from reconciler.admission import pending
from reconciler.admission.announce import MARK_TASK, Admitted, HoldsOf, guaranteed_until
from reconciler.admission.step import Admission, Attempt
from reconciler.base import loops, upkeep
from reconciler.base.caches import Caches, ledger_only
from reconciler.base.component import Ground
from reconciler.base.loops import until_ready
from reconciler.base.metrics import QueueMetrics
from reconciler.base.pods import PodView
from reconciler.base.settings import ReconcilerSettings
from shared import ledger, model
from shared.clock import Clock
from shared.concurrency import bounded
from shared.model import GPUReservation
from shared.policy import noshow
from shared.policy.routing import Path, Pool, Route, Wait, route_in

_log = logging.getLogger(__name__)
ADMIT_TASK = "reserved-queue"
#: Pod patches of one reservation's admissions in flight at once.
PATCH_CONCURRENCY = 16


class Touched(loops.Dirty):
    """What the queue's next pass looks at: the pods (cache keys) changed since its last
    pass and the reservations whose holds alone moved (their owner's waiting pods), or
    everything. Coalesced as ``loops.Dirty`` is: one pass drains a burst."""

    def __init__(self) -> None:
        super().__init__()
        self.reservations: set[str] = set()

    def moved(self, key: str) -> None:
        """The holds of the reservation at cache key ``key`` moved: its owner's waiting
        pods, soon."""
        self.reservations.add(key)
        self.wake.set()

    def take_all(self) -> tuple[set[str], set[str]] | None:
        """(pod keys, reservation cache keys) the next pass looks at (None: everything),
        collecting afresh from now."""
        names, self.reservations = self.reservations, set()
        keys = self.take()
        return None if keys is None else (keys, names)


class Admitter:
    """The reserved queue of one leader term: its passes over the waiting pods."""

    def __init__(
        self,
        step: Admission,
        caches: Caches,
        settings: ReconcilerSettings,
        clock: Clock,
        metrics: QueueMetrics,
    ) -> None:
        self.step = step
        self._caches = caches
        self._settings = settings
        self._clock = clock
        self._metrics = metrics
        self.touched = Touched()
        #: cache key → why the pod waits (QUEUE routes only): the depth gauges, kept
        #: current pass by pass without routing the pods a pass does not look at.
        self._waits: dict[str, str] = {}
        self._depth: dict[str, int] = {}
        self.passes = 0
        #: Pods routed, all passes together (a pass costs what changed: tests count it).
        self.routed = 0
        caches.pods.listeners.append(self._pod_changed)
        caches.reservations.listeners.append(self._reservation_changed)

    def loops(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """The leader's loop for the queue."""
        return [
            (ADMIT_TASK, lambda: self.run(float(self._settings.queue_interval_s))),
            (MARK_TASK, self.step.announcer.run_marks),
        ]

    def _pod_changed(self, _key: str, old: PodView | None, new: PodView | None) -> None:
        if (new is None or new.finished or new.admitted) and old is not None:
            gone = new is None or new.finished
            self.step.teller.forget(old.uid, gone)
            if gone:
                self.step.forget(old.uid)
        self.touched.touch(_key)

    def _reservation_changed(
        self, _key: str, old: GPUReservation | None, new: GPUReservation | None
    ) -> None:
        if new is not None and ledger_only(old, new):
            self.touched.moved(_key)
        else:
            self.touched.touch()

    async def run(self, tick_s: float) -> None:
        """A full pass now, then a pass over what changed on every change, and a full
        pass at each window start and every ``tick_s``."""
        await until_ready(self._caches.ready)
        beat = loops.Beat(self._clock, tick_s)
        while True:
            # The next window start as it stands before the pass: one that passes
            # while the pass runs is still owed its full pass.
            opens = pending.next_start(self._caches.reservations.items.values(), self._clock.now())
            await self.once(self.touched.take_all())
            if await beat.wait(self.touched.wake, opens):
                self.touched.touch()

    async def once(self, touched: tuple[set[str], set[str]] | None = None) -> list[Admitted]:
        """One pass; the admissions it made. Over every waiting pod (``touched`` None),
        or over the pods of ``touched``: (cache keys of pods changed, cache keys of
        reservations whose holds moved — their owner's waiting pods).

        Select the pods, route them, sort the routes (the admissible grouped by their
        reservation, the waiting told why), update the depth gauges, admit the groups,
        tell, announce, and after a full pass forget the pods that left."""
        if not self._caches.ready():
            return []
        self.passes += 1
        now = self._clock.now()
        pool = list(self._caches.reservations.items.values())
        pods = self._select(touched)
        routes = self._route(pods, pool, now)
        groups, told = self._sort(routes, pool, now)
        self._gauge()
        admitted = await self._admit(groups, pool, now)
        await asyncio.gather(*told)
        await self.step.announcer.all(pods, admitted, now)
        if touched is None:
            self._prune(pods, routes)
        return admitted

    def _select(self, touched: tuple[set[str], set[str]] | None) -> list[PodView]:
        """The pods this pass looks at, oldest first; their waits are noted afresh."""
        if touched is None:
            self._waits, self._depth = {}, {}
            return pending.oldest_first(self._caches.pods.items.values())
        pods = self._concerned(*touched)
        for key in touched[0] | {p.key for p in pods}:
            self._note_wait(key, None)
        return pods

    def _route(
        self, pods: list[PodView], pool: list[GPUReservation], now: datetime
    ) -> list[tuple[PodView, Route]]:
        """Each waiting pod of ``pods`` with its route over the reservation pool."""
        no_shows = noshow.declared(pool)
        owned = Pool(pool)
        routes = [
            (pod, route_in(pod.profile, owned, now, self._settings.rules, no_shows=no_shows))
            for pod in pending.waiting(pods)
        ]
        self.routed += len(routes)
        return routes

    def _sort(
        self, routes: list[tuple[PodView, Route]], pool: list[GPUReservation], now: datetime
    ) -> tuple[dict[str, list[tuple[PodView, Route]]], list[Awaitable[None]]]:
        """The admissible pods grouped by their first candidate that is not behind (a
        pod backing off waits), and the telling of every other pod why it waits."""
        behind = self._behind(
            {r.name for _, found in routes if found.path is Path.ADMIT for r in found.candidates},
            now,
        )
        groups: dict[str, list[tuple[PodView, Route]]] = {}
        told: list[Awaitable[None]] = []
        for pod, found in routes:
            wait = found.wait if found.path is Path.QUEUE else None
            self._note_wait(pod.key, wait.value if wait is not None else None)
            if found.path is Path.ADMIT:
                ready = tuple(r for r in found.candidates if r.name not in behind)
                if ready and not self.step.backing_off(pod, now):
                    groups.setdefault(ready[0].name, []).append(
                        (pod, replace(found, candidates=ready))
                    )
                continue
            if wait is Wait.OPENS_LATER and found.reservation is not None:
                self.step.waited_open.setdefault(pod.uid, found.reservation.name)
            by_reference = self._caches.by_reference.pods
            told.append(self.step.teller.tell(pod, found, pool, by_reference, now))
        return groups, told

    def _gauge(self) -> None:
        """The queue depth gauges, by why the pods wait."""
        for wait_name in ("opens_later", "full", "too_small"):
            self._metrics.depth.labels(wait_name).set(self._depth.get(wait_name, 0))

    async def _admit(
        self,
        groups: dict[str, list[tuple[PodView, Route]]],
        pool: list[GPUReservation],
        now: datetime,
    ) -> list[Admitted]:
        """Admit every group; reservations are admitted concurrently."""
        results = await asyncio.gather(
            *(self._admit_group(items, pool, now) for items in groups.values())
        )
        return [a for batch in results for a in batch]

    def _prune(self, pods: list[PodView], routes: list[tuple[PodView, Route]]) -> None:
        """After a full pass: forget what was kept of pods no longer live."""
        live = {p.uid for p in pods}
        self.step.teller.prune((p.uid for p, _ in routes), live)
        self.step.keep_only(live)

    def _concerned(self, keys: set[str], names: set[str]) -> list[PodView]:
        """The pods a pass over ``keys`` and ``names`` looks at, oldest first: the pods
        changed, and for each reservation whose holds moved its owner's waiting pods
        (who may now fit, or be told another holder) and the pods whose hold in it is
        still to announce (not the booking's every pod, on every claim and mark)."""
        items = self._caches.pods.items
        chosen = {key: items[key] for key in keys if key in items}
        for name in names:
            res = self._caches.reservations.items.get(name)
            if res is None:
                continue
            for pod in self._caches.waiting.of(res.facts.owner):
                chosen[pod.key] = pod
            holds = HoldsOf(res)
            for pod in self._caches.by_reference.pods(res.name):
                hold = holds.of(pod)
                if hold is not None and not hold.announced:
                    chosen[pod.key] = pod
        return pending.oldest_first(chosen.values())

    def _note_wait(self, key: str, wait: str | None) -> None:
        """The pod at ``key`` waits because of ``wait`` now (None: it does not queue)."""
        was = self._waits.pop(key, None)
        if was is not None:
            self._depth[was] -= 1
        if wait is not None:
            self._waits[key] = wait
            self._depth[wait] = self._depth.get(wait, 0) + 1

    def _behind(self, names: set[str], now: datetime) -> set[str]:
        """Which of reservations ``names`` have a ledger the live pods contradict: no
        claim until upkeep ran.

        A claim against a ledger missing an admitted pod's hold (a wiped status, a
        restart before the rebuild) would over-admit; upkeep fixes it at once and its
        write wakes the next pass. A hold that only waits for the announcer to bind it
        to its new pod is counted already: not behind. Only the candidates of this
        pass's pods are judged, each from the pods it holds (``caches.by_reference``),
        not every reservation from every pod."""
        cached = self._caches.by_name() if names else {}
        concerned = {n: cached[n] for n in names if n in cached}
        uses = {n: self._caches.by_reference.uses(n) for n in concerned}
        ttl = self._settings.ledger_claim_ttl_s
        return upkeep.behind(concerned, uses, now, ttl, self._settings.unseen_s)

    async def _admit_group(
        self, items: list[tuple[PodView, Route]], pool: list[GPUReservation], now: datetime
    ) -> list[Admitted]:
        """Admit the pods routed to one reservation: one ledger write, then the patches.

        The pods claim their first candidate together (``ledger.claim_group``: one
        status write for all that fit, in queue order) and the admitted ones are patched
        concurrently, at most ``PATCH_CONCURRENCY`` at once, each patch built from the
        cache's view with a ``test`` on its resourceVersion (R11 without a re-read). A
        pod the group claim refused (full) tries its other candidates one by one, as a
        single admission does.
        """
        first = items[0][1].candidates[0]
        ns = self._settings.common.namespace
        got = await ledger.claim_group(
            self.step.gateway,
            ns,
            first.name,
            [ledger.Ask(pod.gpus, pod.name, now) for pod, _ in items],
            deadline=self.step.deadline(),
            cached=model.to_object(first, ns, now),
            monotonic=self.step.monotonic,
        )
        latest: dict[str, GPUReservation] = {}
        stamps: list[Awaitable[Attempt]] = []
        others: list[tuple[PodView, Route]] = []
        # The guarantee end depends on the reservation alone: one chain walk per group.
        until = guaranteed_until(first, pool, now, self._settings.rules)
        for (pod, found), result in zip(items, got, strict=True):
            if result.reservation is not None:
                latest[first.name] = result.reservation
            if result.admitted and result.claim is not None and result.reservation is not None:
                stamps.append(
                    self.step.stamp(pod, result.reservation, result.claim, pool, now, until=until)
                )
            elif result.reason not in {"error", "deadline"} and len(found.candidates) > 1:
                others.append((pod, replace(found, candidates=found.candidates[1:])))
        done = [a for a in await bounded(stamps, PATCH_CONCURRENCY) if isinstance(a, Admitted)]
        for pod, found in others:
            one = await self.step.claim_in_order(pod, found, pool, latest, now)
            if isinstance(one, Admitted):
                done.append(one)
        return done


def setup(ground: Ground, step: Admission) -> Admitter:
    """The reserved queue of one leader term, admitting through ``step`` (shared with
    the on-demand path), subscribed to the pod and reservation caches."""
    return Admitter(step, ground.caches, ground.settings, ground.clock, ground.queue_metrics)
