"""Admission of queued pods on the leader: the reserved queue's passes.

Each *pass* routes every GPU pod that is not yet admitted (``reconciler.admission.pending``) over
the reservation cache:
- ADMIT: the budget claimed through the ledger (the cache's copy first, a fresh GET
  after a conflict), then the pod patched once (``pending.admission_patch``), the patch
  built from the cache's view and testing its resourceVersion: a pod that changed since
  — finished, deleted, admitted meanwhile — refuses it (R11 without a re-read). If the
  patch is refused the hold is dropped again (``ledger.amend``). The pods routed to one
  reservation claim together — one ``ledger.claim_group`` write for all that fit — and
  are then patched concurrently (bounded); reservations are admitted concurrently. A
  patch whose answer was lost (timeout, 5xx) may have been applied: the pod is re-read,
  and the hold is kept when it carries the claim (admitted) or when the patch may still
  land (upkeep binds the hold then, or expires it after the claim TTL). A pod whose
  patch failed is tried again when it changes or at the backstop tick, not at once: the
  claim and release it caused wake the queue, which would otherwise loop on a lasting
  refusal.
- QUEUE / NONE: the pod is told why it waits (``reconciler.queue.waiting``).
- JIT: left to the lease path (``reconciler.ondemand.leaser``).

After the admissions, every admitted pod not yet announced gets ``RuntimeGuaranteed``
(``reconciler.admission.announce``).

Triggers: a full pass (every waiting pod) runs when the caches are first synced, on a
reservation change that is not its ledger's alone (facts, status facts, a reservation
new or gone), at the next window start (a timer on the injected clock, re-armed every
pass) and every ``QUEUE_PROCESSOR_INTERVAL`` as a backstop. Between them a pass costs
what changed (``Touched``): the pods whose cache entry changed, and — for a reservation
whose holds alone moved (a claim, a binding, a mark, upkeep freeing a holder's hold) —
its owner's waiting pods (``caches.waiting``), the only ones that could route to it.
Changes during a pass cause exactly one more pass, however many arrive.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from reconciler.admission import pending
from reconciler.admission.announce import Admitted, Announcer, guaranteed_until
from reconciler.base import events, upkeep
from reconciler.base.caches import Caches, ledger_only
from reconciler.base.metrics import QueueMetrics
from reconciler.base.pods import PodView, project_pod
from reconciler.base.settings import ReconcilerSettings
from reconciler.base.throttle import HOLD
from reconciler.base.upkeep import until_ready, wait_either
from reconciler.queue.waiting import Emit, Knowledge, Teller
from shared import ledger, model, vocab
from shared.clock import Clock
from shared.concurrency import bounded
from shared.errors import KubeError, NotFound, ServerError
from shared.logs import log
from shared.model import GPUReservation, claim_key
from shared.policy import noshow
from shared.policy.routing import Path, Pool, Route, Wait, route_in
from shared.policy.statuses import Status
from shared.resources import PODS

_log = logging.getLogger(__name__)
ADMIT_TASK = "reserved-queue"
#: Seconds one admission (claim + patch) may take.
ADMIT_DEADLINE_S = 10.0
#: Pod patches of one reservation's admissions in flight at once.
PATCH_CONCURRENCY = 16
#: How often the on-demand path reads its pod again and retries when the admission
#: patch was refused because the pod changed meanwhile (a scheduler status write).
ON_DEMAND_ATTEMPTS = 3


class Failed(enum.Enum):
    """Why one admission attempt did not admit its pod."""

    #: No candidate's claim admitted the pod (full, gone, an error, the deadline).
    CLAIM = "claim"
    #: The patch was refused (the pod changed or left, the API said no); hold dropped.
    REFUSED = "refused"
    #: The patch's answer was lost and it may still land; the hold is kept.
    UNKNOWN = "unknown"


#: What one admission attempt (claim, then patch) came to.
Attempt = Admitted | Failed


class Touched(upkeep.Dirty):
    """What the queue's next pass looks at: the pods (cache keys) changed since its last
    pass and the reservations whose holds alone moved (their owner's waiting pods), or
    everything. Coalesced as ``upkeep.Dirty`` is: one pass drains a burst."""

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
    """The reserved queue of one leader term."""

    def __init__(
        self,
        gateway: Any,
        caches: Caches,
        settings: ReconcilerSettings,
        clock: Clock,
        metrics: QueueMetrics,
        knowledge: Knowledge,
        emit: Emit = events.emit,
    ) -> None:
        self._gateway = gateway
        self._caches = caches
        self._settings = settings
        self._clock = clock
        self._metrics = metrics
        self._knowledge = knowledge
        self._ns = settings.common.namespace
        self.teller = Teller(gateway, settings, clock, self._count, knowledge, emit)
        self.announcer = Announcer(gateway, caches, settings, metrics, self.teller.send)
        self.touched = Touched()
        #: uid → the reservation it waited to open (the window-open lag metric).
        self._waited_open: dict[str, str] = {}
        #: uid → (resourceVersion patched against, retry at): pods whose admission patch
        #: was refused or lost. Retried when the pod changes or at the backstop tick —
        #: not on the reservation change our own claim and release cause (a hot loop).
        self._refused: dict[str, tuple[str, datetime]] = {}
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
        return [(ADMIT_TASK, lambda: self.run(float(self._settings.queue_interval_s)))]

    def _pod_changed(self, _key: str, old: PodView | None, new: PodView | None) -> None:
        if (new is None or new.finished or new.admitted) and old is not None:
            gone = new is None or new.finished
            self.teller.forget(old.uid, gone)
            if gone:
                self._waited_open.pop(old.uid, None)
                self._refused.pop(old.uid, None)
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
        while True:
            await self.once(self.touched.take_all())
            if await wait_either(self._clock.sleep(self._delay(tick_s)), self.touched.wake.wait()):
                self.touched.touch()

    def _delay(self, tick_s: float) -> float:
        now = self._clock.now()
        upcoming = pending.next_start(self._caches.reservations.items.values(), now)
        if upcoming is None:
            return tick_s
        return min(tick_s, (upcoming - now).total_seconds())

    async def once(self, touched: tuple[set[str], set[str]] | None = None) -> list[Admitted]:
        """One pass; the admissions it made. Over every waiting pod (``touched`` None),
        or over the pods of ``touched``: (cache keys of pods changed, cache keys of
        reservations whose holds moved — their owner's waiting pods)."""
        if not self._caches.ready():
            return []
        self.passes += 1
        now = self._clock.now()
        pool = list(self._caches.reservations.items.values())
        if touched is None:
            pods = pending.oldest_first(self._caches.pods.items.values())
            self._waits, self._depth = {}, {}
        else:
            pods = self._concerned(*touched)
            for key in touched[0] | {p.key for p in pods}:
                self._note_wait(key, None)
        groups: dict[str, list[tuple[PodView, Route]]] = {}
        told: list[Awaitable[None]] = []
        no_shows = noshow.declared(pool)
        owned = Pool(pool)
        routes = [
            (pod, route_in(pod.profile, owned, now, self._settings.rules, no_shows=no_shows))
            for pod in pending.waiting(pods)
        ]
        self.routed += len(routes)
        behind = self._behind(
            {r.name for _, found in routes if found.path is Path.ADMIT for r in found.candidates},
            now,
        )
        for pod, found in routes:
            wait = found.wait if found.path is Path.QUEUE else None
            self._note_wait(pod.key, wait.value if wait is not None else None)
            if found.path is Path.ADMIT:
                ready = tuple(r for r in found.candidates if r.name not in behind)
                if ready and not self._backing_off(pod, now):
                    groups.setdefault(ready[0].name, []).append(
                        (pod, replace(found, candidates=ready))
                    )
                continue
            if wait is Wait.OPENS_LATER and found.reservation is not None:
                self._waited_open.setdefault(pod.uid, found.reservation.name)
            told.append(self.teller.tell(pod, found, pool, self._caches.by_reference.pods, now))
        for wait_name in ("opens_later", "full", "too_small"):
            self._metrics.depth.labels(wait_name).set(self._depth.get(wait_name, 0))
        results = await asyncio.gather(
            *(self._admit_group(items, pool, now) for items in groups.values())
        )
        admitted = [a for batch in results for a in batch]
        await asyncio.gather(*told)
        await self.announcer.all(pods, admitted, now)
        if touched is None:
            live = {p.uid for p in pods}
            self.teller.prune((p.uid for p, _ in routes), live)
            for uid in self._waited_open.keys() - live:
                del self._waited_open[uid]
            for uid in self._refused.keys() - live:
                del self._refused[uid]
        return admitted

    def _concerned(self, keys: set[str], names: set[str]) -> list[PodView]:
        """The pods a pass over ``keys`` and ``names`` looks at, oldest first: the pods
        changed, and for each reservation whose holds moved its owner's waiting pods
        (who may now fit, or be told another holder) and the pods it holds (a hold to
        announce)."""
        items = self._caches.pods.items
        chosen = {key: items[key] for key in keys if key in items}
        for name in names:
            res = self._caches.reservations.items.get(name)
            if res is None:
                continue
            for pod in self._caches.waiting.of(res.facts.owner):
                chosen[pod.key] = pod
            for pod in self._caches.by_reference.pods(res.name):
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

    def _backing_off(self, pod: PodView, now: datetime) -> bool:
        """Whether ``pod``'s last admission patch failed and nothing changed since."""
        refused = self._refused.get(pod.uid)
        if refused is None:
            return False
        version, retry_at = refused
        if pod.resource_version != version or now >= retry_at:
            del self._refused[pod.uid]
            return False
        return True

    def _behind(self, names: set[str], now: datetime) -> set[str]:
        """Which of reservations ``names`` have a ledger the live pods contradict: no
        claim until upkeep ran.

        A claim against a ledger missing an admitted pod's hold (a wiped status, a
        restart before the rebuild) would over-admit; upkeep fixes it at once and its
        write wakes the next pass. Only the candidates of this pass's pods are judged,
        each from the pods it holds (``caches.by_reference``), not every reservation
        from every pod."""
        cached = self._caches.by_name() if names else {}
        concerned = {n: cached[n] for n in names if n in cached}
        uses = {n: self._caches.by_reference.uses(n) for n in concerned}
        ttl = self._settings.ledger_claim_ttl_s
        return set(upkeep.stale(concerned, uses, now, ttl, self._settings.unseen_s))

    # --- admission ---------------------------------------------------------------------

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
        got = await ledger.claim_group(
            self._gateway,
            self._ns,
            first.name,
            [ledger.Ask(pod.gpus, pod.name, now) for pod, _ in items],
            deadline=time.monotonic() + ADMIT_DEADLINE_S,
            cached=model.to_object(first, self._ns, now),
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
                    self._stamp(pod, result.reservation, result.claim, pool, now, until=until)
                )
            elif result.reason not in {"error", "deadline"} and len(found.candidates) > 1:
                others.append((pod, replace(found, candidates=found.candidates[1:])))
        done = [a for a in await bounded(stamps, PATCH_CONCURRENCY) if isinstance(a, Admitted)]
        for pod, found in others:
            one = await self._admit(pod, found, pool, latest, now)
            if isinstance(one, Admitted):
                done.append(one)
        return done

    async def _admit(
        self,
        pod: PodView,
        found: Route,
        pool: list[GPUReservation],
        latest: dict[str, GPUReservation],
        now: datetime,
        path: str = "reserved",
    ) -> Attempt:
        """Claim the candidates in order for one pod; patch it under the first that
        admits."""
        for cand in found.candidates:
            res = latest.get(cand.name, cand)
            got = await ledger.claim(
                self._gateway,
                self._ns,
                res.name,
                pod.gpus,
                pod=pod.name,
                now=now,
                deadline=time.monotonic() + ADMIT_DEADLINE_S,
                cached=model.to_object(res, self._ns, now),
            )
            if got.reservation is not None:
                latest[cand.name] = got.reservation
            if got.admitted and got.claim is not None and got.reservation is not None:
                return await self._stamp(pod, got.reservation, got.claim, pool, now, path)
            if got.reason in {"error", "deadline"}:
                return Failed.CLAIM
        return Failed.CLAIM

    async def admit_under(
        self,
        pod: PodView,
        res: GPUReservation,
        now: datetime,
        announce: bool = True,
        fresh: PodView | None = None,
    ) -> Admitted | None:
        """Admit ``pod`` under ``res`` at once — a just-granted on-demand lease (``res``
        as written, with its resourceVersion) — and announce it (``announce``; else the
        caller passes it to ``announce`` later). The same claim and patch as a queued
        pod; None when the pod no longer waits or the claim or the patch failed (the
        caller cancels the lease then). ``fresh``: the pod as the caller has just read it
        (``reread``, side by side with writing the lease's mirror), used by the first
        attempt instead of reading again.

        A pod waiting for a lease is Pending, and the scheduler may rewrite its
        ``PodScheduled`` condition between the read and the patch: the patch's ``test`` on
        the resourceVersion then refuses it (its claim is dropped again). That is no reason
        to give a granted lease up, so the pod is read again and the admission retried, at
        most ``ON_DEMAND_ATTEMPTS`` times; a failed claim or a patch whose answer was lost
        (its hold kept) is not retried. A backoff the reserved queue holds for the pod
        (``_refused``) is left as it is."""
        pool = [*self._caches.reservations.items.values(), res]
        found = Route(Path.ADMIT, (res,))
        got: Attempt | None = None
        # Announced by this call or its caller, never by a queue pass that sees the
        # admission first (as if the webhook had made it: a second RuntimeGuaranteed).
        self.announcer.expect(pod.uid)
        try:
            for _ in range(ON_DEMAND_ATTEMPTS):
                fresh = fresh or await self.reread(pod)
                if fresh is None:
                    return None
                got = await self._admit(fresh, found, pool, {}, now, path="on_demand")
                if isinstance(got, Admitted):
                    if announce:
                        await self.announce([got], now)
                    return got
                if got is not Failed.REFUSED:
                    return None  # the claim failed, or the answer was lost (the hold kept)
                fresh = None  # refused: the pod changed since; read it again
            return None
        finally:
            if not isinstance(got, Admitted):
                self.announcer.forget_expected(pod.uid)

    async def announce(self, admitted: list[Admitted], now: datetime) -> None:
        """``RuntimeGuaranteed`` (or ``BestEffortAdmitted``) for admissions this process
        made, then the ledger's announced mark (as after a queue pass)."""
        await self.announcer.announce(admitted, now)

    async def say(self, pod: PodView, status: Status | None, now: datetime) -> None:
        """Tell ``pod`` a waiting status on the shared throttle (one story per pod)."""
        await self.teller.say(pod, HOLD, status, now)

    async def reread(self, pod: PodView) -> PodView | None:
        """The pod as it is now, when it still waits (R11 step 3); else None. The
        on-demand path's view was taken before a lease round trip: read it again rather
        than let a since-changed pod fail the patch and cost the lease."""
        try:
            raw: dict[str, Any] = await self._gateway.get(PODS, pod.name, pod.namespace)
        except NotFound:
            return None
        except KubeError as exc:
            log(_log, logging.WARNING, "queue.read_failed", pod=pod.key, error=str(exc))
            return None
        fresh = project_pod(raw, self._settings.rules)
        if fresh is None or fresh.uid != pod.uid or not pending.waiting([fresh]):
            return None
        return fresh

    async def _stamp(
        self,
        pod: PodView,
        res: GPUReservation,
        claim: str,
        pool: list[GPUReservation],
        now: datetime,
        path: str = "reserved",
        until: datetime | None = None,
    ) -> Attempt:
        """Patch the pod after a successful claim; drop the hold again if the patch was
        refused, keep it if its answer was lost (it may still land). ``until`` is the
        reservation's guarantee end when the caller has it already."""
        if until is None:
            until = guaranteed_until(res, pool, now, self._settings.rules)
        patch = pending.admission_patch(pod, res, claim, until, now, self._settings.queue.gate_name)
        try:
            await self._gateway.patch(PODS, pod.name, patch, pod.namespace)
        except KubeError as exc:
            log(_log, logging.WARNING, "queue.patch_failed", pod=pod.key, error=str(exc))
            landed = await self._landed(pod, claim) if isinstance(exc, ServerError) else False
            if not landed:
                retry_at = now + timedelta(seconds=self._settings.queue_interval_s)
                self._refused[pod.uid] = (pod.resource_version, retry_at)
            if landed is None:
                # The answer was lost and the patch may still land: keep the hold; upkeep
                # binds it if it does, and expires it after the claim TTL if not.
                log(
                    _log,
                    logging.WARNING,
                    "queue.patch_unknown",
                    pod=pod.key,
                    claim=claim_key(claim),
                )
                return Failed.UNKNOWN
            if not landed:
                await ledger.amend(
                    self._gateway,
                    self._ns,
                    res.name,
                    lambda cur: ledger.drop(cur, {claim_key(claim)}),
                    now=now,
                    deadline=time.monotonic() + ADMIT_DEADLINE_S,
                )
                return Failed.REFUSED
        lag = (self._clock.now() - res.facts.start).total_seconds()
        if self._waited_open.pop(pod.uid, None) == res.name:
            self._metrics.lag.observe(max(0.0, lag))
        self._metrics.admissions.labels(path).inc()
        log(
            _log,
            logging.INFO,
            "queue.admitted",
            namespace=pod.namespace,
            pod=pod.name,
            reservation=res.name,
            claim=claim_key(claim),
            since_open_s=round(lag, 3),
        )
        return Admitted(pod, res, claim_key(claim))

    async def _landed(self, pod: PodView, claim: str) -> bool | None:
        """After a patch whose answer was lost: whether it was applied (the pod carries
        ``claim``), not and never will be (the pod changed since the view the patch was
        built from, so its ``test`` fails), or unknown (None)."""
        try:
            now_raw: dict[str, Any] = await self._gateway.get(PODS, pod.name, pod.namespace)
        except NotFound:
            return False
        except KubeError:
            return None
        meta = now_raw.get("metadata") or {}
        if meta.get("uid") != pod.uid:
            return False
        if (meta.get("annotations") or {}).get(vocab.ADMISSION_CLAIM) == claim:
            return True
        return False if meta.get("resourceVersion") != pod.resource_version else None

    def _count(self, reason: str) -> None:
        self._metrics.events.labels(reason).inc()
