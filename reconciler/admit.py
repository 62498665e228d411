"""Admission of queued pods on the leader, the RuntimeGuaranteed announcement, waiting Events.

Each *pass* routes every GPU pod that is not yet admitted (``reconciler.queue``) over
the reservation cache:
- ADMIT: the budget claimed through the ledger (the cache's copy first, a fresh GET
  after a conflict), then the pod patched once (``queue.admission_patch``), the patch
  built from the cache's view and testing its resourceVersion: a pod that changed since
  — finished, deleted, admitted meanwhile — refuses it (R11 without a re-read). If the
  patch is refused the hold is dropped again (``ledger.amend``). The pods routed to one
  reservation claim together — one ``ledger.claim_group`` write for all that fit — and
  are then patched concurrently (bounded); reservations are admitted concurrently. A
  patch whose answer was lost (timeout, 5xx) may have been applied: the pod is re-read,
  and the hold is kept when it carries the claim (admitted) or when the patch may still land (upkeep
  binds the hold then, or expires it after the claim TTL). A pod whose patch failed is
  tried again when it changes or at the backstop tick, not at once: the claim and
  release it caused wake the queue, which would otherwise loop on a lasting refusal.
- QUEUE: the pod is told why it waits (WaitingForReservation, ReservationFull,
  ReservationTooSmall) when ``RESERVATION_WAIT_EVENT_ENABLED``.
- NONE: UnknownGpuClass / NoReservation when ``POD_PROBLEM_EVENT_ENABLED`` and a full
  fetch happened; AnnotationIgnored on its own topic.
- JIT: left to the lease path (a later issue).

Every admitted pod whose ledger hold is not marked announced — ours or the
webhook's — gets ``RuntimeGuaranteed`` (``BestEffortAdmitted`` for a best-effort
stub), then the hold is marked (``ledger.announce``), so a restart does not say it
twice. Waiting statuses go through the R39 throttle, seeded for each pod from its own
Events before the first send of a process, so a restart does not restate a status
inside the repeat interval.

Triggers: a pass runs when the caches are first synced, on any pod or reservation
cache change (a holder leaving frees its hold through upkeep, whose status write
arrives as a reservation change), at the next window start (a timer on the injected
clock, re-armed every pass) and every ``QUEUE_PROCESSOR_INTERVAL`` as a backstop.
Changes during a pass cause exactly one more pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from reconciler import events, queue, upkeep
from reconciler.caches import Caches
from reconciler.pods import PodView, project_pod
from reconciler.settings import ReconcilerSettings
from reconciler.throttle import ANNOTATIONS, HOLD, Throttle
from reconciler.upkeep import until_ready, wait_either
from shared import ledger, model, vocab
from shared.clock import Clock, parse_utc
from shared.concurrency import bounded
from shared.errors import KubeError, NotFound, ServerError
from shared.logs import log
from shared.model import GPUReservation, Hold, Kind
from shared.policy import noshow, statuses, wording
from shared.policy.routing import Path, Pool, Route, Wait, route_in
from shared.policy.statuses import Status
from shared.policy.windows import guarantee_end
from shared.resources import EVENTS, PODS

_log = logging.getLogger(__name__)
ADMIT_TASK = "reserved-queue"
#: Seconds one admission (claim + patch) may take.
ADMIT_DEADLINE_S = 10.0
#: Events written at once (the gateway has a bounded worker pool anyway).
EVENT_CONCURRENCY = 16
#: Pod reads and patches of one reservation's admissions in flight at once.
PATCH_CONCURRENCY = 16

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


@dataclass(frozen=True)
class Admitted:
    """One admission made by this pass, to announce."""

    pod: PodView
    reservation: GPUReservation
    claim: str


def find_hold(res: GPUReservation, pod: PodView) -> Hold | None:
    """The pod's hold in ``res``: by uid, else by its claim id."""
    by_uid = next((h for h in res.holds if h.pod_uid and h.pod_uid == pod.uid), None)
    if by_uid is not None or pod.claim is None:
        return by_uid
    return next((h for h in res.holds if h.claim == pod.claim), None)


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


class Admitter:
    """The reserved queue of one leader term."""

    def __init__(
        self,
        gateway: Any,
        caches: Caches,
        settings: ReconcilerSettings,
        clock: Clock,
        metrics: queue.QueueMetrics,
        knowledge: Knowledge,
        emit: Emit = events.emit,
    ) -> None:
        self._gateway = gateway
        self._caches = caches
        self._settings = settings
        self._clock = clock
        self._metrics = metrics
        self._knowledge = knowledge
        self._emit = emit
        self._ns = settings.common.namespace
        self._zone = settings.common.display_timezone
        self.throttle = Throttle(clock, settings.queue.repeat)
        self._wake = asyncio.Event()
        #: (reservation, claim) announced by this process → when; kept until the cache
        #: shows the ledger's announced flag (or, flag never seen, for a claim TTL).
        self._announced: dict[tuple[str, str], datetime] = {}
        self._recalled: set[str] = set()
        self._waited_open: dict[str, str] = {}
        #: uid → (resourceVersion patched against, retry at): pods whose admission patch
        #: was refused or lost. Retried when the pod changes or at the backstop tick —
        #: not on the reservation change our own claim and release cause (a hot loop).
        self._refused: dict[str, tuple[str, datetime]] = {}
        self._events = asyncio.Semaphore(EVENT_CONCURRENCY)
        self.passes = 0
        caches.pods.listeners.append(self._pod_changed)
        caches.reservations.listeners.append(lambda _k, _o, _n: self._wake.set())

    def loops(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """The leader's loop for the queue."""
        return [(ADMIT_TASK, lambda: self.run(float(self._settings.queue_interval_s)))]

    def _pod_changed(self, _key: str, old: PodView | None, new: PodView | None) -> None:
        if (new is None or new.finished or new.admitted) and old is not None:
            self.throttle.forget(old.uid)
            if new is None or new.finished:
                self._waited_open.pop(old.uid, None)
                self._recalled.discard(old.uid)
        self._wake.set()

    async def run(self, tick_s: float) -> None:
        """A pass now, then on every change, at each window start and every ``tick_s``."""
        await until_ready(self._caches.ready)
        while True:
            self._wake.clear()
            await self.once()
            await wait_either(self._clock.sleep(self._delay(tick_s)), self._wake.wait())

    def _delay(self, tick_s: float) -> float:
        now = self._clock.now()
        upcoming = queue.next_start(self._caches.reservations.items.values(), now)
        if upcoming is None:
            return tick_s
        return min(tick_s, (upcoming - now).total_seconds())

    async def once(self) -> list[Admitted]:
        """One pass over every waiting pod; the admissions it made."""
        if not self._caches.ready():
            return []
        self.passes += 1
        now = self._clock.now()
        pool = list(self._caches.reservations.items.values())
        pods = list(self._caches.pods.items.values())
        groups: dict[str, list[tuple[PodView, Route]]] = {}
        told: list[Awaitable[None]] = []
        depth: dict[str, int] = {}
        behind = self._behind(pods, now)
        no_shows = noshow.declared(pool)
        owned = Pool(pool)
        for pod in queue.waiting(pods):
            found = route_in(pod.profile, owned, now, self._settings.rules, no_shows=no_shows)
            if found.path is Path.ADMIT:
                ready = tuple(r for r in found.candidates if r.name not in behind)
                if ready and not self._backing_off(pod, now):
                    groups.setdefault(ready[0].name, []).append(
                        (pod, replace(found, candidates=ready))
                    )
                continue
            if found.path is Path.QUEUE and found.wait is not None:
                depth[found.wait.value] = depth.get(found.wait.value, 0) + 1
                if found.wait is Wait.OPENS_LATER and found.reservation is not None:
                    self._waited_open.setdefault(pod.uid, found.reservation.name)
            told.append(self._tell(pod, found, pool, pods, now))
        for wait in ("opens_later", "full", "too_small"):
            self._metrics.depth.labels(wait).set(depth.get(wait, 0))
        results = await asyncio.gather(
            *(self._admit_group(items, pool, now) for items in groups.values())
        )
        admitted = [a for batch in results for a in batch]
        await asyncio.gather(*told)
        await self._announce_all(pods, admitted, now)
        self.throttle.prune({p.uid for p in queue.waiting(pods)})
        live = {p.uid for p in pods}
        self._recalled &= live  # pods that left unseen (e.g. while another replica led)
        for uid in self._waited_open.keys() - live:
            del self._waited_open[uid]
        for uid in self._refused.keys() - live:
            del self._refused[uid]
        return admitted

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

    def _behind(self, pods: list[PodView], now: datetime) -> set[str]:
        """Reservations whose ledger the live pods contradict: no claim until upkeep ran.

        A claim against a ledger missing an admitted pod's hold (a wiped status, a
        restart before the rebuild) would over-admit; upkeep fixes it at once and its
        write wakes the next pass."""
        uses = upkeep.uses_by_reservation(pods)
        ttl = self._settings.ledger_claim_ttl_s
        return set(upkeep.stale(self._caches.by_name(), uses, now, ttl))

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
        stamps: list[Awaitable[Admitted | None]] = []
        others: list[tuple[PodView, Route]] = []
        for (pod, found), result in zip(items, got, strict=True):
            if result.reservation is not None:
                latest[first.name] = result.reservation
            if result.admitted and result.claim is not None and result.reservation is not None:
                stamps.append(self._stamp(pod, result.reservation, result.claim, pool, now))
            elif result.reason not in {"error", "deadline"} and len(found.candidates) > 1:
                others.append((pod, replace(found, candidates=found.candidates[1:])))
        done = [a for a in await bounded(stamps, PATCH_CONCURRENCY) if a is not None]
        for pod, found in others:
            one = await self._admit(pod, found, pool, latest, now)
            if one is not None:
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
    ) -> Admitted | None:
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
                return None
        return None

    async def admit_under(
        self, pod: PodView, res: GPUReservation, now: datetime, announce: bool = True
    ) -> Admitted | None:
        """Admit ``pod`` under ``res`` at once — a just-granted on-demand lease (``res``
        as written, with its resourceVersion) — and announce it (``announce``; else the
        caller passes it to ``announce`` later). The same claim and patch as a queued
        pod; None when the pod no longer waits or the claim or the patch failed (the
        caller cancels the lease then)."""
        pool = [*self._caches.reservations.items.values(), res]
        fresh = await self._reread(pod)
        if fresh is None:
            return None
        found = Route(Path.ADMIT, (res,))
        got = await self._admit(fresh, found, pool, {}, now, path="on_demand")
        if got is not None and announce:
            await self.announce([got], now)
        return got

    async def announce(self, admitted: list[Admitted], now: datetime) -> None:
        """``RuntimeGuaranteed`` (or ``BestEffortAdmitted``) for admissions this process
        made, then the ledger's announced mark (as after a queue pass)."""
        await asyncio.gather(*(self._announce(a, now, False) for a in admitted))

    async def say(self, pod: PodView, status: Status | None, now: datetime) -> None:
        """Tell ``pod`` a waiting status on the shared throttle (one story per pod)."""
        await self._say(pod, HOLD, status, now)

    async def _reread(self, pod: PodView) -> PodView | None:
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
        if fresh is None or fresh.uid != pod.uid or not queue.waiting([fresh]):
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
    ) -> Admitted | None:
        """Patch the pod after a successful claim; drop the hold again if that fails."""
        until = self._until(res, pool, now)
        patch = queue.admission_patch(pod, res, claim, until, now, self._settings.queue.gate_name)
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
                log(_log, logging.WARNING, "queue.patch_unknown", pod=pod.key, claim=claim)
                return None
            if not landed:
                await ledger.amend(
                    self._gateway,
                    self._ns,
                    res.name,
                    lambda cur: ledger.drop(cur, {claim}),
                    now=now,
                    deadline=time.monotonic() + ADMIT_DEADLINE_S,
                )
                return None
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
            claim=claim,
            since_open_s=round(lag, 3),
        )
        return Admitted(pod, res, claim)

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

    def _until(self, res: GPUReservation, pool: list[GPUReservation], now: datetime) -> datetime:
        facts = [r.facts for r in pool]
        use_group = self._settings.rules.use_group
        no_shows = noshow.declared(pool)
        return guarantee_end(res.facts, facts, now, use_group=use_group, no_shows=no_shows)

    # --- RuntimeGuaranteed -----------------------------------------------------------

    async def _announce_all(
        self, pods: list[PodView], admitted: list[Admitted], now: datetime
    ) -> None:
        """Announce this pass's admissions and every unannounced admitted pod."""
        by_name = self._caches.by_name()
        todo = {(a.reservation.name, a.claim): a for a in admitted}
        for pod in pods:
            res = by_name.get(pod.reference or "")
            if res is None or pod.finished or pod.deleting:
                continue
            hold = find_hold(res, pod)
            if hold is not None and not hold.announced and (res.name, hold.claim) not in todo:
                todo[(res.name, hold.claim)] = Admitted(pod, res, hold.claim)
        self._forget_announced(by_name, now)
        fresh = [a for key, a in todo.items() if key not in self._announced]
        await asyncio.gather(*(self._announce(a, now, a not in admitted) for a in fresh))

    def _forget_announced(self, by_name: dict[str, GPUReservation], now: datetime) -> None:
        """Drop what the ledger now remembers: a hold the cache shows announced, or gone
        (its reservation gone, or the hold absent for longer than a claim TTL)."""
        cutoff = now - timedelta(seconds=self._settings.ledger_claim_ttl_s)
        for key, at in list(self._announced.items()):
            res = by_name.get(key[0])
            hold = next((h for h in res.holds if h.claim == key[1]), None) if res else None
            if (
                res is None
                or (hold is not None and hold.announced)
                or (hold is None and at < cutoff)
            ):
                del self._announced[key]

    async def _announce(self, item: Admitted, now: datetime, webhook: bool) -> None:
        res, pod = item.reservation, item.pod
        pool = list(self._caches.reservations.items.values())
        if res.facts.kind is Kind.BEST_EFFORT:
            reason, text = vocab.REASON_BEST_EFFORT_ADMITTED, wording.best_effort_admitted(res)
        else:
            until = self._until(res, pool, now)
            reason = vocab.REASON_RUNTIME_GUARANTEED
            text = wording.runtime_guaranteed(res, until, self._zone)
        told = webhook and await self._told_before(pod, reason, res.name)
        if not told and not await self._send(pod, reason, text, now):
            return
        self._announced[(res.name, item.claim)] = now
        if webhook:
            self._metrics.admissions.labels("webhook").inc()

        def mark(cur: GPUReservation) -> GPUReservation:
            return ledger.announce(ledger.bind(cur, item.claim, pod.name, pod.uid), item.claim)

        deadline = time.monotonic() + ADMIT_DEADLINE_S
        await ledger.amend(self._gateway, self._ns, res.name, mark, now=now, deadline=deadline)

    async def _told_before(self, pod: PodView, reason: str, res_name: str) -> bool:
        """Whether the pod already carries our announcement of ``res_name`` (read back).

        Only for holds this process did not create (webhook admissions, rebuilt holds):
        a status wiped between the Event and the flag must not announce twice."""
        selector = f"involvedObject.uid={pod.uid},reason={reason}"
        try:
            listed = await self._gateway.list_all(EVENTS, pod.namespace, field_selector=selector)
        except KubeError:
            return False
        return any(
            e.get("reportingComponent") == vocab.PRODUCT_NAME
            and e.get("reason") == reason
            and (e.get("involvedObject") or {}).get("uid") == pod.uid
            and res_name in (w.strip(".,:;()") for w in str(e.get("message", "")).split())
            for e in listed.items
        )

    # --- waiting Events --------------------------------------------------------------

    async def _tell(
        self,
        pod: PodView,
        found: Route,
        pool: list[GPUReservation],
        pods: list[PodView],
        now: datetime,
    ) -> None:
        """Tell the pod its waiting or problem status (throttled, switches honoured)."""
        q = self._settings.queue
        if found.path is Path.QUEUE and q.wait_events:
            owner = pod.namespace
            res = found.reservation
            names = queue.holders(res, pods, owner) if res is not None else []
            status = statuses.waiting(found, pod.gpus, names, self._zone)
            await self._say(pod, HOLD, status, now)
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
            await self._say(pod, HOLD, status, now)
        if found.path in {Path.NONE, Path.JIT} and q.problem_events:
            ignored = statuses.ignored_annotations(
                pod.annotations, self._settings.rules, q.support_contact
            )
            await self._say(pod, ANNOTATIONS, ignored, now)

    async def _say(self, pod: PodView, topic: str, status: Status | None, now: datetime) -> None:
        if status is None or not self.throttle.due(pod.uid, topic, status.reason, status.message):
            return
        if pod.uid not in self._recalled:
            await self._recall(pod)
            if not self.throttle.due(pod.uid, topic, status.reason, status.message):
                return
        if await self._send(pod, status.reason, status.message, now):
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

    async def _send(self, pod: PodView, reason: str, message: str, now: datetime) -> bool:
        async with self._events:
            return await self._emit(
                self._gateway, pod, reason, message, now=now, on_sent=self._count
            )

    def _count(self, reason: str) -> None:
        self._metrics.events.labels(reason).inc()
