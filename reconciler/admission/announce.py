"""Saying once that a pod was admitted: ``RuntimeGuaranteed`` / ``BestEffortAdmitted``.

Every admitted pod whose ledger hold is not marked announced — admitted by the
reconciler's queue, by an on-demand lease, or by the webhook at creation — gets the
Event, then its hold is bound to the pod and marked (``ledger.announce_all``: one write
per reservation for all the holds one call announced), so a restart does not say it
twice. While the leader's mark loop runs (``run_marks``), the marks of the queue's passes
are gathered for ``MARK_GATHER_S`` and written together, one write per reservation:
pods created one after another each made a ledger write of their own, and each write
is a watch event every webhook replica and the reconciler decode. The Events go out at
once; the marks of several reservations are written one after another, never at once:
with every booking busy they are a write per booking, and sent together they reached
the API server as one burst that the webhook's claims, made while pods are created,
queued behind (docs/developer/performance.md, "Pod creation").

For a hold this process did not create, the pod's Events are read back first (a
status wiped between the Event and the mark must not announce twice) — unless the pod
was created after this leader term's first LIST of pods (``first_listed``): an earlier
leader acts only before the term begins, and the term lists its pods after it began,
so no earlier leader can have announced it, and this term remembers what it announced.
The read, a LIST of the pod's Events for every pod the webhook admits, is then skipped.
The rule needs no clock: an admitted pod carries controller-owned annotations and so is
in every LIST of the pods the reconciler watches, and one absent from the term's first
LIST was created after it. What this process announced is remembered while its hold is
unannounced and for a claim TTL at least (``_forget``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from reconciler.base.caches import Caches
from reconciler.base.kube import KubeWriter
from reconciler.base.metrics import QueueMetrics
from reconciler.base.pods import PodView
from reconciler.base.settings import ReconcilerSettings
from shared import ledger, vocab
from shared.clock import MonotonicClock, SystemMonotonic
from shared.errors import KubeError
from shared.model import GPUReservation, Hold, Kind
from shared.policy import noshow, wording
from shared.policy.matching import MatchRules
from shared.policy.windows import guarantee_end
from shared.resources import EVENTS

#: Seconds the ledger mark of one announcement may take.
MARK_DEADLINE_S = 10.0
#: Seconds the mark loop gathers the marks of the queue's passes before writing them.
MARK_GATHER_S = 0.25
#: The leader's task that writes the gathered marks.
MARK_TASK = "announce-marks"

Send = Callable[[PodView, str, str, datetime], Awaitable[bool]]
#: Marks to write: reservation → claim → (pod name, uid).
Marks = dict[str, dict[str, tuple[str, str]]]


@dataclass(frozen=True)
class Admitted:
    """One admission made by this process, to announce."""

    pod: PodView
    reservation: GPUReservation
    claim: str


class HoldsOf:
    """A ledger's holds by pod uid and, unbound, by claim (the first of each, as the
    ledger lists them): finding the hold of each of a booking's pods costs one pass
    over its holds, not one per pod."""

    def __init__(self, res: GPUReservation) -> None:
        self.res = res
        self.by_uid: dict[str, Hold] = {}
        self.unbound: dict[str, Hold] = {}
        for h in res.holds:
            if h.pod_uid:
                self.by_uid.setdefault(h.pod_uid, h)
            if not h.bound:
                self.unbound.setdefault(h.claim, h)

    def of(self, pod: PodView) -> Hold | None:
        """The pod's hold: by uid, else by its claim id while that hold is bound to no
        pod (a hold bound to another pod's uid is that pod's: ``pod`` carries a copy of
        its claim)."""
        found = self.by_uid.get(pod.uid) if pod.uid else None
        if found is not None or pod.claim is None:
            return found
        return self.unbound.get(pod.claim)


def guaranteed_until(
    res: GPUReservation, pool: list[GPUReservation], now: datetime, rules: MatchRules
) -> datetime:
    """Until when a pod admitted under ``res`` now is guaranteed (the chained window)."""
    facts = [r.facts for r in pool]
    no_shows = noshow.declared(pool)
    return guarantee_end(res.facts, facts, now, use_group=rules.use_group, no_shows=no_shows)


class Announcer:
    """The announcements of one leader term."""

    def __init__(
        self,
        gateway: KubeWriter,
        caches: Caches,
        settings: ReconcilerSettings,
        metrics: QueueMetrics,
        send: Send,
        *,
        mono: MonotonicClock | None = None,
    ) -> None:
        self._mono = mono or SystemMonotonic()
        self._gateway = gateway
        self._caches = caches
        self._settings = settings
        self._metrics = metrics
        self._send = send
        self._ns = settings.common.namespace
        self._zone = settings.common.display_timezone
        #: (reservation, claim) announced by this process → when; kept until the cache
        #: shows the ledger's announced flag (or, flag never seen, for a claim TTL).
        self.announced: dict[tuple[str, str], datetime] = {}
        #: Pods (uids) whose admission by this process is under way or made and is
        #: announced by ``announce`` (the on-demand path announces a batch's admissions
        #: once its asks are done): ``all`` leaves them alone meanwhile, rather than take
        #: their unannounced holds for the webhook's and announce them a second time.
        self.expected: set[str] = set()
        #: The uids of the pods in this leader term's first LIST (None: not listed yet
        #: in this term — every hold this process did not create is read back).
        self.listed: frozenset[str] | None = None
        caches.pods.on_synced = self.first_listed
        #: The marks waiting for the mark loop, and the instant of the latest pass that
        #: added one.
        self._gathered: Marks = {}
        self._gathered_at: datetime | None = None
        #: The gathered marks being written, those not written yet (the mark loop's).
        self._writing: Marks = {}
        self._gathering = False
        self._gathered_some = asyncio.Event()

    def begin(self) -> None:
        """A leader term begins: its caches list afresh (``first_listed``)."""
        self.listed = None

    def first_listed(self) -> None:
        """The pod cache holds this term's first LIST: what an earlier leader may have
        announced is among these pods."""
        self.listed = frozenset(p.uid for p in self._caches.pods.items.values())

    def inherited(self, pod: PodView) -> bool:
        """Whether an earlier leader may have announced ``pod``'s admission: the pod was
        in this term's first LIST of pods (or that LIST is not in yet)."""
        return self.listed is None or pod.uid in self.listed

    def expect(self, uid: str) -> None:
        """The pod ``uid`` is being admitted here; ``announce`` will announce it."""
        self.expected.add(uid)

    def forget_expected(self, uid: str) -> None:
        """The admission of ``uid`` did not happen (or was announced)."""
        self.expected.discard(uid)

    async def announce(self, admitted: list[Admitted], now: datetime) -> None:
        """Announce admissions this process made."""
        try:
            await self._many([(a, False) for a in admitted], now)
        finally:
            for item in admitted:
                self.expected.discard(item.pod.uid)

    async def all(self, pods: list[PodView], admitted: list[Admitted], now: datetime) -> None:
        """Announce ``admitted`` (this pass's) and every unannounced admitted pod."""
        by_name = self._caches.by_name()
        todo = {(a.reservation.name, a.claim): a for a in admitted}
        found: list[tuple[PodView, GPUReservation, Hold]] = []
        index: dict[str, HoldsOf] = {}
        for pod in pods:
            res = by_name.get(pod.reference or "")
            if res is None or pod.finished or pod.deleting or pod.uid in self.expected:
                continue
            holds = index.get(res.name)
            if holds is None:
                holds = index[res.name] = HoldsOf(res)
            hold = holds.of(pod)
            if hold is not None and not hold.announced:
                found.append((pod, res, hold))
        # Binding follows: of two pods carrying one unbound claim, the first persisted
        # takes it (``ledger.persisted``, as upkeep and the backstop decide), whatever
        # order the cache lists them in.
        found.sort(key=lambda item: ledger.persisted(item[0].use()))
        for pod, res, hold in found:
            if (res.name, hold.claim) not in todo:
                todo[(res.name, hold.claim)] = Admitted(pod, res, hold.claim)
        self._forget(by_name, now)
        ours = {(a.reservation.name, a.claim) for a in admitted}
        fresh = [(a, key not in ours) for key, a in todo.items() if key not in self.announced]
        await self._many(fresh, now, gather=True)

    async def run_marks(self) -> None:
        """The mark loop of a leader term: while it runs, the marks of the queue's
        passes wait ``MARK_GATHER_S`` and are written together: one write per
        reservation, the reservations one after another. When the term ends,
        marks not written — gathered, or waiting their turn to be written — are
        forgotten with their announcements, so a later term of this process reads those
        pods back rather than leave their holds unmarked."""
        self._gathering = True
        try:
            while True:
                await self._gathered_some.wait()
                await asyncio.sleep(MARK_GATHER_S)
                await self._write_gathered()
        finally:
            self._gathering = False
            for marks in (self._gathered, self._writing):
                for name, claims in marks.items():
                    for claim in claims:
                        self.announced.pop((name, claim), None)
            self._gathered, self._writing = {}, {}
            self._gathered_some.clear()

    async def _write_gathered(self) -> None:
        marks, now = self._gathered, self._gathered_at
        self._gathered, self._gathered_at = {}, None
        self._gathered_some.clear()
        if now is None:
            return
        self._writing = marks
        await self._mark_all(marks, now)

    async def _many(
        self, items: list[tuple[Admitted, bool]], now: datetime, *, gather: bool = False
    ) -> None:
        """Each item's Event (``True``: a hold this process did not create, read back
        first), then one ledger write per reservation binding and marking every hold
        whose Event went out — not one write per pod: a window opening for ten pods of
        one booking would make ten writes race on one object. ``gather``: left to the
        mark loop, if it runs."""
        pool = list(self._caches.reservations.items.values())
        ends: dict[str, datetime] = {}  # the guarantee end per reservation, this call
        sent = await asyncio.gather(*(self._say(a, w, pool, ends, now) for a, w in items))
        marks: Marks = {}
        for (item, _), ok in zip(items, sent, strict=True):
            if ok:
                marks.setdefault(item.reservation.name, {})[item.claim] = (
                    item.pod.name,
                    item.pod.uid,
                )
        if gather and self._gathering:
            for name, pods in marks.items():
                self._gathered.setdefault(name, {}).update(pods)
            if marks:
                self._gathered_at = now
                self._gathered_some.set()
            return
        await self._mark_all(marks, now)

    async def _mark_all(self, marks: Marks, now: datetime) -> None:
        """Write ``marks``, one reservation after the other (the module docstring says
        why), each on the watch's copy as it stands when its turn comes: a copy taken
        before the writes ahead of it lacks the claims made meanwhile, and the write
        would set ``usedGpus`` and ``phase`` from it. Each is taken out of ``marks``
        once written."""
        while marks:
            name = next(iter(marks))
            await self._mark(name, marks[name], now, self._caches.by_name().get(name))
            del marks[name]

    async def _say(
        self,
        item: Admitted,
        webhook: bool,
        pool: list[GPUReservation],
        ends: dict[str, datetime],
        now: datetime,
    ) -> bool:
        """The Event of one admission (unless read back as sent); whether it is out."""
        res, pod = item.reservation, item.pod
        if res.facts.kind is Kind.BEST_EFFORT:
            reason, text = vocab.REASON_BEST_EFFORT_ADMITTED, wording.best_effort_admitted(res)
        else:
            if res.name not in ends:
                ends[res.name] = guaranteed_until(res, pool, now, self._settings.rules)
            reason = vocab.REASON_RUNTIME_GUARANTEED
            text = wording.runtime_guaranteed(res, ends[res.name], self._zone)
        told = webhook and self.inherited(pod) and await self._told_before(pod, reason, res.name)
        if not told and not await self._send(pod, reason, text, now):
            return False
        self.announced.pop((res.name, item.claim), None)  # kept in the order announced
        self.announced[(res.name, item.claim)] = now
        if webhook:
            self._metrics.admissions.labels("webhook").inc()
        return True

    async def _mark(
        self,
        name: str,
        pods: dict[str, tuple[str, str]],
        now: datetime,
        seen: GPUReservation | None,
    ) -> None:
        """Bind the holds ``pods`` names (claim → pod name, uid) and mark them announced:
        a JSON Patch testing each hold on the cache's copy ``seen`` (no read first; a
        copy that lags fails the test, and the ledger is read)."""
        deadline = self._mono.monotonic() + MARK_DEADLINE_S
        await ledger.amend(
            self._gateway,
            self._ns,
            name,
            lambda cur: ledger.announce_all(cur, pods),
            now=now,
            deadline=deadline,
            monotonic=self._mono.monotonic,
            seen=seen,
        )

    def _forget(self, by_name: Mapping[str, GPUReservation], now: datetime) -> None:
        """Drop what the ledger now remembers: announced more than a claim TTL ago with
        its reservation gone or the hold shown announced or absent. Not sooner: a
        status wiped after the mark is rebuilt with the hold of a pod admitted within
        the TTL unannounced (``ledger.rebuild``), and this term's pods are not read
        back (``inherited``)."""
        cutoff = now - timedelta(seconds=self._settings.ledger_claim_ttl_s)
        done = []
        for key, at in self.announced.items():
            if at >= cutoff:
                break  # kept in the order announced: the rest are younger still
            res = by_name.get(key[0])
            hold = next((h for h in res.holds if h.claim == key[1]), None) if res else None
            if res is None or hold is None or hold.announced:
                done.append(key)
        for key in done:
            del self.announced[key]

    async def _told_before(self, pod: PodView, reason: str, res_name: str) -> bool:
        """Whether the pod already carries our announcement of ``res_name`` (read back).

        Only for holds this process did not create (webhook admissions, rebuilt holds)
        of pods an earlier leader may have announced (``inherited``): a status wiped
        between the Event and the flag must not announce twice."""
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
