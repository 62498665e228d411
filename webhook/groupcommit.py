"""Group commit: concurrent claims on one reservation share one ``/status`` write.

Every admission claims its GPUs through the ledger's compare-and-swap on the
reservation's status. When a Job's pods arrive at once, one-write-per-claim makes them
fight: all decide on the same resourceVersion, one wins, the rest re-read and retry
until their deadline. Inside one replica that fight is pointless, so claims on the same
reservation queue here and one writer per reservation takes every claim waiting and
makes them in one ``ledger.claim_group`` write (each caller told its own outcome).
While that write is in flight, claims arriving meanwhile form a second group, decided
on the ledger the first write will leave and sent before its answer (``DEPTH`` writes
in flight per reservation; the second's patch tests the ledger token the first sets,
so it lands only after it). Contention is left only between replicas (and the
reconciler's room-taking writes), where the lost-race loop still decides.

The writer is driven by callbacks, not by a task of its own: a group starts when a
claim arrives (once the callbacks the loop already has ready have run, so claims that
arrived in the same wake-up go together), when the write in flight tells the
expectation a follower is decided on, and when a write ends. The loop is the one the
first claim of a reservation ran on, held while that reservation has claims.

Spare holds (``SpareRules``; docs/webhook.md "Spare holds"): while claims of pods
without a name (a controller's, ``generateName``) keep coming on a reservation, each
write also appends a few unbound holds ahead of demand (only while the group leaves at
least ``min_room`` GPUs free, never more than a quarter of them), and the next such
pods of the same size are admitted from them at once — their holds were written before
the pod is stamped, as the ledger protocol asks, only earlier. Spares are given out
oldest first, each to one caller, never older than ``max_age_s``; the ones unused for
``idle_s`` are dropped by a write of their own (a replica that dies leaves them to the
reconciler's claim TTL, like any claim whose create never happened). A named pod never
takes one: its hold must carry its name. ``without_spares`` gives the decision a
reservation whose used GPUs leave this replica's spares out, so its own spares never
make a booking look full to it.

A caller waits at most until its own deadline; a claim written after its caller gave
up is an unbound hold the reconciler expires after the claim TTL, exactly like a
single claim's write cut off mid-flight. Dry runs write nothing and do not come here.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import chain
from typing import Any

from shared import ledger, model
from shared.ledger import Ask, ClaimResult, LedgerGateway
from shared.logs import log
from shared.model import GPUReservation

_log = logging.getLogger(__name__)

#: Most asks one write carries; more wait for the next write (bounds one body's size).
MAX_GROUP = 128
#: Writes in flight per reservation: a second group is sent before the first's answer,
#: decided on its expected result (docs/webhook.md "Group commit").
DEPTH = 2
#: Passes of the event loop a group waits after the claim that starts it: the request
#: tasks the same wake-up made ready (each runs one pass after the wake-up's reads) claim
#: first, so they go in this write instead of the next (docs/performance.md, sixth
#: session: 2 and 3 against 1).
SETTLE = 3
#: Budget of a write of spares alone, and of the write that drops unused spares.
SPARE_WRITE_S = 2.0

_Expected = tuple[dict[str, Any], GPUReservation]


@dataclass(frozen=True, slots=True)
class SpareRules:
    """How many spare holds a replica keeps per reservation, and for how long."""

    #: Most spare holds per reservation (0: none, every claim writes).
    most: int
    #: Spares unused this long are dropped.
    idle_s: float
    #: A spare older than this is never given out (well inside the reconciler's claim
    #: TTL, after which it drops unbound holds).
    max_age_s: float
    #: Spares are made only while a write leaves at least this many GPUs free, and
    #: never more than a quarter of them: a small booking, or a large one nearly full,
    #: writes each claim as it comes, so no pod finds it full while its last GPUs sit
    #: in another replica's spares.
    min_room: int = 32


class _Spares:
    """One reservation's spare holds: written (``ready``, claim id → the hold's
    instant as stored, oldest first), being written (``coming``), their size in GPUs,
    when one was last written or taken (``touched``, monotonic: the idle clock), whether
    one was taken since the reservation was last idle (``taken``), the idle timer."""

    __slots__ = (
        "coming",
        "gpus",
        "hidden",
        "ready",
        "taken",
        "timer",
        "touched",
        "view",
        "waiting",
    )

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus
        self.ready: dict[str, datetime] = {}
        self.coming: set[str] = set()
        #: Callers waiting for a spare being written (at most one per spare coming).
        self.waiting: list[asyncio.Future[ClaimResult | None]] = []
        self.touched = 0.0
        self.taken = False
        self.timer: asyncio.TimerHandle | None = None
        #: ``ready`` and ``coming`` as one set, made when asked and kept until they change.
        self.hidden: frozenset[str] | None = None
        #: The last reservation seen without them: (as cached, ``hidden``, the view).
        self.view: tuple[GPUReservation, frozenset[str], GPUReservation] | None = None

    def changed(self) -> None:
        self.hidden = None

    def give_back(self) -> list[str]:
        """The written spares' ids, no longer kept (the caller drops them)."""
        ids = list(self.ready)
        self.ready.clear()
        self.changed()
        return ids


class _Waiter:
    __slots__ = ("ask", "deadline", "future")

    def __init__(self, ask: Ask, deadline: float, future: asyncio.Future[ClaimResult]) -> None:
        self.ask = ask
        self.deadline = deadline
        self.future = future


class _Write:
    """One group's write in flight."""

    __slots__ = ("group", "made", "sent", "spares")

    def __init__(self, group: list[_Waiter], spares: list[str]) -> None:
        self.group = group
        #: The claim ids of the spare holds it appends after the group's, and their
        #: holds' instant as stored (what the reconciler's claim TTL is counted from).
        self.spares = spares
        self.made: datetime | None = None
        #: Whether its first attempt told its expectation (a retry's comes too late).
        self.sent = False


class _Lane:
    """One reservation's claims: the queue, the writes in flight, the deadline timer."""

    __slots__ = ("due", "expected", "full", "loop", "newest", "pumping", "queue", "timer", "writes")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: list[_Waiter] = []
        self.writes: list[_Write] = []
        #: The write started last while it is in flight, and the object and ledger it
        #: will leave once it told them (``None`` until then, or when it cannot).
        self.newest: _Write | None = None
        self.expected: _Expected | None = None
        #: The expected ledger had no room for the next group: wait for the real answer.
        self.full = False
        #: A start of the next group is scheduled on the loop.
        self.pumping = False
        #: One timer for the earliest deadline of the callers waiting (``due``).
        self.timer: asyncio.TimerHandle | None = None
        self.due = math.inf


class GroupCommit:
    """Claims on one reservation queue while its writes are in flight (at most
    ``depth`` per reservation, each decided on the one before's expected result)."""

    def __init__(
        self,
        gateway: LedgerGateway,
        namespace: str,
        cached: Callable[[str], dict[str, Any] | None],
        written: Callable[[ClaimResult], None],
        *,
        parsed: Callable[[str], GPUReservation | None] = lambda name: None,
        grouped: Callable[[int], None] = lambda size: None,
        sending: Callable[[ledger.QuietWrite], None] = lambda write: None,
        monotonic: Callable[[], float] = time.monotonic,
        depth: int = DEPTH,
        echo: bool = False,
        spares: SpareRules | None = None,
        now: Callable[[], datetime] | None = None,
        spare_events: Callable[[str, int], None] = lambda event, count: None,
    ) -> None:
        """``cached(name)`` is the watch cache's raw object (the first read of each
        write) and ``parsed(name)`` the same object parsed, when the cache has it;
        ``written(result)`` is told every group's outcome (an admitted ask's result:
        the one carrying the server's answer) before its callers are, so the cache
        holds the written version before the next group reads it;
        ``grouped(size)`` hears each group's size (metrics); ``depth`` is how many
        writes per reservation may be in flight (1: one at a time). The server's
        answer to a write that lands is not read unless ``echo``: ``written`` is then
        told the expected result (``ClaimResult.landed``, ``ReservationCache.wrote``),
        and ``sending`` hears of each such write as it is sent.

        ``spares``: keep spare holds (``SpareRules``; ``now`` gives the instant their
        holds are made at, and ``spare_events(event, count)`` hears of them: written,
        used, dropped). None: every claim joins a write."""
        self._gateway = gateway
        self._namespace = namespace
        self._cached = cached
        self._written = written
        self._parsed = parsed
        self._grouped = grouped
        self._monotonic = monotonic
        self._depth = max(1, depth)
        self._echo = echo
        self._sending = sending
        self._lanes: dict[str, _Lane] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        #: The background drops among ``_tasks`` (``close`` lets them finish).
        self._drops: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._rules = spares if spares is not None and spares.most > 0 else None
        self._now = now
        self._spare_events = spare_events
        self._spares: dict[str, _Spares] = {}
        #: Writes made, the asks they carried, and the writes sent while another was in
        #: flight (for tests and metrics).
        self.writes = 0
        self.asks = 0
        self.pipelined = 0

    @property
    def idle(self) -> bool:
        """Nothing queued and no write in flight, on any reservation."""
        return not self._lanes

    async def claim(self, name: str, ask: Ask, deadline: float) -> ClaimResult:
        """``ask`` on reservation ``name``, written with whatever else is waiting.

        At ``deadline`` the caller is answered ``deadline`` (the reservation's one
        timer, set for its earliest waiting deadline; the ask may still be in a write
        in flight, whose hold then expires unbound). A caller cancelled before its ask
        joins a group is left out of it.

        An ask for a pod without a name (``generateName``: a controller's pods) is
        answered from a spare hold of its size at once, or waits for spares being
        written (never past its deadline), and joins a group only when none is to be
        had; one of another size first gives the written spares back. A named pod's ask
        always joins a group: its hold must name it (``webhook.decide.own_admission``
        tells a reinvocation from a copied claim by that name), and a spare names none."""
        spares = self._spares.get(name)
        if spares is not None and ask.pod is None:
            if spares.gpus == ask.gpus:
                got = await self._spare(name, spares, deadline)
                if got is not None:
                    return got
            elif spares.ready:
                await self._release(name, spares)
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = _Lane(asyncio.get_running_loop())
        future: asyncio.Future[ClaimResult] = lane.loop.create_future()
        lane.queue.append(_Waiter(ask, deadline, future))
        if deadline < lane.due:
            self._arm(lane, deadline)
        if not lane.pumping and self._may_start(lane):
            lane.pumping = True
            lane.loop.call_soon(self._pump, name, lane, SETTLE)
        return await future

    def hidden(self, name: str) -> frozenset[str]:
        """The claim ids of this replica's spare holds on ``name`` (written or being
        written): the decision counts them as room, since the next claim takes one."""
        spares = self._spares.get(name)
        if spares is None:
            return frozenset()
        if spares.hidden is None:
            spares.hidden = frozenset(spares.ready).union(spares.coming)
        return spares.hidden

    def without_spares(self, res: GPUReservation) -> GPUReservation:
        """``res`` as this replica decides on it: its own spare holds counted as free
        (``model.seen_as_using``; the view kept until the cached object or the spares
        change). Its holds are left as they are: a claim copied from a spare is judged
        as any copied claim is (``webhook.decide.own_admission``), on every replica
        alike."""
        spares = self._spares.get(res.name)
        if spares is None or not (spares.ready or spares.coming):
            return res
        hidden = self.hidden(res.name)
        view = spares.view
        if view is not None and view[0] is res and view[1] is hidden:
            return view[2]
        mine = sum(1 for claim_id in hidden if claim_id in res.claims)
        seen = model.seen_as_using(res, res.used_gpus - mine * spares.gpus) if mine else res
        spares.view = (res, hidden, seen)
        return seen

    @property
    def keeping(self) -> bool:
        """Whether any reservation has spare holds (written or being written)."""
        return bool(self._spares)

    async def close(self) -> None:
        """Shutdown: every waiting caller is cancelled, the writes in flight too; then
        every spare hold — written, or in a write that may have landed — is dropped
        (best effort: the reconciler's claim TTL otherwise)."""
        self._closing = True
        for lane in self._lanes.values():
            for waiter in lane.queue:
                waiter.future.cancel()
            lane.queue.clear()
        for spares in self._spares.values():
            if spares.timer is not None:
                spares.timer.cancel()
                spares.timer = None
            for waiting in spares.waiting:
                waiting.cancel()
            spares.waiting.clear()
        tasks = list(self._tasks)
        for task in tasks:
            if task not in self._drops:
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for name, spares in list(self._spares.items()):
            left = [*spares.give_back(), *spares.coming]
            spares.coming.clear()
            if left:
                await self._dropping(name, left)
        self._spares.clear()

    def _may_start(self, lane: _Lane) -> bool:
        """Whether a group may start now: room for another write in flight, and a write
        in flight (if any) has told the ledger it leaves and left room for more."""
        if len(lane.writes) >= self._depth:
            return False
        return lane.newest is None or (lane.expected is not None and not lane.full)

    def _pump(self, name: str, lane: _Lane, passes: int = 1) -> None:
        """Start the next group if one may start; end the lane when nothing is left.
        Asked with ``passes`` > 1, it runs ``passes - 1`` passes of the loop later.

        A group starts at once while no write is in flight; with one in flight it is
        decided on that write's expected result (``ledger.claim_group``'s ``on_sent``:
        the new holds and the ledger token it sets), so its patch tests that token and
        lands only after it. It waits instead when that expectation is not known (a
        write conditional on the resourceVersion) or leaves too little room for the
        whole group: a refusal is decided on what the server holds, never on a write
        still in flight."""
        if passes > 1:
            lane.loop.call_soon(self._pump, name, lane, passes - 1)
            return
        lane.pumping = False
        if self._lanes.get(name) is not lane:
            return
        if lane.queue and self._may_start(lane):
            group = self._next_group(lane)
            base = lane.expected if lane.newest is not None else None
            if group and base is not None and not _fits(base[1], group):
                lane.queue[:0] = group
                lane.full = True
            elif group:
                self._start(name, lane, group, base)
        if not lane.writes and not lane.queue:
            del self._lanes[name]
            if lane.timer is not None:
                lane.timer.cancel()

    def _start(
        self,
        name: str,
        lane: _Lane,
        group: list[_Waiter],
        base: _Expected | None,
        spares: list[str] | None = None,
    ) -> None:
        write = _Write(group, self._wanted(name, group, base) if spares is None else spares)
        lane.writes.append(write)
        lane.newest, lane.expected, lane.full = write, None, False
        if base is not None:
            self.pipelined += 1

        def on_sent(raw: dict[str, Any], res: GPUReservation) -> None:
            if write.sent:
                return  # a retry's expectation comes too late for a follower
            write.sent = True
            if lane.newest is write:
                lane.expected = (raw, res)
                if lane.queue and not lane.pumping:
                    lane.pumping = True
                    lane.loop.call_soon(self._pump, name, lane, SETTLE)

        follow = on_sent if self._depth > 1 else None
        task = lane.loop.create_task(self._commit(name, lane, write, base, follow))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _commit(
        self,
        name: str,
        lane: _Lane,
        write: _Write,
        base: _Expected | None,
        on_sent: Callable[[dict[str, Any], GPUReservation], None] | None,
    ) -> None:
        """One group's ``ledger.claim_group``; its callers told their outcomes — after
        the next group's write is started, so that write is sent before the callers'
        answers are made (their tasks wake after its first step). A bug (an exception)
        is raised to them and to every caller still queued."""
        group = write.group
        told: list[ClaimResult] = []
        asks = [w.ask for w in group]
        claim_ids = None
        if write.spares:
            spares = self._spares[name]
            made = group[0].ask.now if group else self._instant()
            asks += [Ask(spares.gpus, None, made)] * len(write.spares)
            write.made = model.stored_instant(made)
            claim_ids = [*ledger.new_claim_ids(len(group)), *write.spares]
        try:
            results = await ledger.claim_group(
                self._gateway,
                self._namespace,
                name,
                asks,
                deadline=max(w.deadline for w in group)
                if group
                else self._monotonic() + SPARE_WRITE_S,
                cached=base[0] if base is not None else self._cached(name),
                cached_parsed=base[1] if base is not None else self._parsed(name),
                monotonic=self._monotonic,
                on_sent=on_sent,
                pipelined=base is not None,
                echo=self._echo,
                sending=self._sending,
                claim_ids=claim_ids,
            )
            self.writes += 1
            self.asks += len(group)
            if group:
                self._grouped(len(group))
            self._written(next((r for r in results if r.raw is not None), results[0]))
            told = results[: len(group)]
            if write.spares:
                self._arrived(name, write, results[len(group) :])
        except Exception as exc:
            if write.spares:
                self._arrived(name, write, [])
            for waiter in chain(group, lane.queue):
                _fail(waiter.future, exc)
            lane.queue.clear()
        except BaseException:
            for waiter in group:
                _fail(waiter.future, None)
            raise
        finally:
            lane.writes.remove(write)
            if lane.newest is write:
                lane.newest, lane.expected = None, None
            lane.full = False
            self._pump(name, lane)
        for waiter, result in zip(group, told, strict=False):  # told: none on a failure
            if not waiter.future.done():
                waiter.future.set_result(result)

    def _next_group(self, lane: _Lane) -> list[_Waiter]:
        """The next waiters (oldest first) whose callers still wait and have time."""
        now = self._monotonic()
        live = [w for w in lane.queue if not w.future.done() and w.deadline > now]
        lane.queue = live[MAX_GROUP:]
        return live[:MAX_GROUP]

    def _arm(self, lane: _Lane, deadline: float) -> None:
        """The lane's deadline timer, for ``deadline`` (the earliest waiting)."""
        if lane.timer is not None:
            lane.timer.cancel()
        lane.due = deadline
        delay = max(deadline - self._monotonic(), 0.0)
        lane.timer = lane.loop.call_later(delay, self._expire, lane, deadline)

    def _expire(self, lane: _Lane, due: float) -> None:
        """Answer ``deadline`` to every caller whose deadline is ``due`` or earlier
        (the timer was set for it), then set the timer for the next one waiting."""
        lane.timer, lane.due = None, math.inf
        following = math.inf
        for waiter in chain(lane.queue, *(w.group for w in lane.writes)):
            if waiter.future.done():
                continue
            if waiter.deadline <= due:
                waiter.future.set_result(ClaimResult(False, None, None, "deadline", 0))
            elif waiter.deadline < following:
                following = waiter.deadline
        if following < math.inf:
            self._arm(lane, following)

    # --- spare holds -------------------------------------------------------------

    async def _spare(self, name: str, spares: _Spares, deadline: float) -> ClaimResult | None:
        """A spare for one caller: a written one at once, or one of a write in flight
        (``deadline`` when the caller's comes first); None: none to be had."""
        if spares.ready:
            found = self._take(name, spares)
            if found is not None:
                return self._given(name, found)
        if len(spares.coming) <= len(spares.waiting):
            return None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ClaimResult | None] = loop.create_future()
        spares.waiting.append(future)
        timer = loop.call_later(max(deadline - self._monotonic(), 0.0), _too_late, future)
        try:
            return await future
        finally:
            timer.cancel()
            if future in spares.waiting:  # its deadline came, or it was cancelled
                spares.waiting.remove(future)

    def _serve(self, name: str, spares: _Spares) -> None:
        """Give the spares just written to the callers waiting for them, oldest first;
        the callers they do not cover (the write brought fewer, or none) go on without."""
        while spares.waiting and spares.ready:
            future = spares.waiting.pop(0)
            if future.done():
                continue
            found = self._take(name, spares)
            if found is None:
                spares.waiting.insert(0, future)
                break
            future.set_result(self._given(name, found))
        while len(spares.waiting) > len(spares.coming):
            future = spares.waiting.pop()
            if not future.done():
                future.set_result(None)

    def _given(self, name: str, claim_id: str) -> ClaimResult:
        """A caller's answer: admitted on spare ``claim_id``."""
        return ClaimResult(True, claim_id, self._parsed(name), "admitted", 0)

    def _wanted(self, name: str, group: list[_Waiter], base: _Expected | None) -> list[str]:
        """Claim ids of the spare holds the next write on ``name`` appends to ``group``.

        Spares are made while claims keep coming: the group holds two or more asks of
        pods without a name (the only ones spares are given to), or a spare of the
        reservation was taken since it was idle. Up to ``most`` of them (counting those
        written and being written), of the size of the group's first such ask,
        only while the group leaves at least ``min_room`` GPUs on the ledger the write
        is decided on and never more than a quarter of them, so another replica or the
        reconciler always finds most of the room."""
        rules = self._rules
        if rules is None or self._closing:
            return []
        spares = self._spares.get(name)
        unnamed = [w.ask.gpus for w in group if w.ask.pod is None]
        if len(unnamed) < 2 and (spares is None or not spares.taken):
            return []
        gpus = unnamed[0] if unnamed else spares.gpus if spares else 0
        if gpus <= 0:
            return []
        if spares is not None and spares.gpus != gpus:
            if spares.ready or spares.coming:
                return []  # the other size's spares first go back (``claim``)
            spares.gpus = gpus
        ledger_now = base[1] if base is not None else self._parsed(name)
        if ledger_now is None:
            return []
        have = len(spares.ready) + len(spares.coming) if spares is not None else 0
        room = ledger.free(ledger_now) - sum(w.ask.gpus for w in group)
        if room < rules.min_room:
            return []
        count = min(rules.most - have, room // 4 // gpus)
        if count <= 0:
            return []
        if spares is None:
            spares = self._spares[name] = _Spares(gpus)
        ids = ledger.new_claim_ids(count)
        spares.coming.update(ids)
        spares.changed()
        return ids

    def _arrived(self, name: str, write: _Write, results: list[ClaimResult]) -> None:
        """A write carrying spares ``ids`` ended: the admitted ones are ready; the rest
        (refused, or the write's outcome unknown) are dropped, should they have landed."""
        spares = self._spares.get(name)
        if spares is None:
            return
        ids = write.spares
        now = self._monotonic()
        lost: list[str] = []
        for i, claim_id in enumerate(ids):
            spares.coming.discard(claim_id)
            result = results[i] if i < len(results) else None
            if result is not None and result.admitted and write.made is not None:
                spares.ready[claim_id] = write.made
            elif result is None or result.reason in ("deadline", "error"):
                lost.append(claim_id)
        spares.changed()
        made = sum(1 for r in results if r.admitted)
        if made:
            self._spare_events("written", made)
        self._serve(name, spares)
        spares.touched = now
        if lost:
            self._drop(name, lost)
        self._arm_idle(name, spares)  # ``_idle`` forgets the reservation's spares

    def _take(self, name: str, spares: _Spares) -> str | None:
        """The oldest spare young enough to give out (older ones are dropped), and a
        refill started when fewer than half are left and nothing is being written."""
        rules = self._rules
        assert rules is not None
        res = self._parsed(name)
        if res is not None and ledger.free(res) < 0:  # the booking shrank below its holds
            self._drop(name, spares.give_back())
            return None
        oldest = self._instant() - timedelta(seconds=rules.max_age_s)
        stale: list[str] = []
        found: str | None = None
        while spares.ready:
            claim_id = next(iter(spares.ready))
            if spares.ready.pop(claim_id) >= oldest:
                found = claim_id
                break
            stale.append(claim_id)
        spares.changed()
        if stale:
            self._drop(name, stale)
        if found is None:
            return None
        spares.touched = self._monotonic()
        spares.taken = True
        self._spare_events("used", 1)
        left = len(spares.ready) + len(spares.coming)
        if left * 2 < rules.most and name not in self._lanes:
            more = self._wanted(name, [], None)
            if more:  # a write of spares alone, on a lane of its own while it lasts
                lane = self._lanes[name] = _Lane(asyncio.get_running_loop())
                self._start(name, lane, [], None, more)
        return found

    def _arm_idle(self, name: str, spares: _Spares) -> None:
        """Check at ``touched + idle_s`` whether the spares were used meanwhile."""
        rules = self._rules
        if rules is None or spares.timer is not None:
            return
        delay = max(spares.touched + rules.idle_s - self._monotonic(), 0.0)
        loop = asyncio.get_running_loop()
        spares.timer = loop.call_later(delay, self._idle, name, spares)

    def _idle(self, name: str, spares: _Spares) -> None:
        """Drop the written spares if none was written or taken for ``idle_s``; the
        reservation is idle again. A write of spares still in flight arms the next
        check when it lands."""
        spares.timer = None
        rules = self._rules
        if self._spares.get(name) is not spares or rules is None:
            return
        if self._monotonic() - spares.touched < rules.idle_s:
            self._arm_idle(name, spares)
            return
        spares.taken = False
        ready = spares.give_back()
        if ready:
            self._drop(name, ready)
        if not spares.coming and not spares.waiting:
            del self._spares[name]

    async def _release(self, name: str, spares: _Spares) -> None:
        """Drop every written spare of ``name`` now, and wait for the write."""
        ready = spares.give_back()
        if ready:
            await self._dropping(name, ready)

    def _drop(self, name: str, ids: list[str]) -> None:
        """Drop spares ``ids`` from the ledger in the background."""
        task = asyncio.get_running_loop().create_task(self._dropping(name, ids))
        self._tasks.add(task)
        self._drops.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(self._drops.discard)

    async def _dropping(self, name: str, ids: list[str]) -> None:
        gone = set(ids)
        got = await ledger.amend(
            self._gateway,
            self._namespace,
            name,
            lambda res: ledger.drop(res, gone),
            now=self._instant(),
            deadline=self._monotonic() + SPARE_WRITE_S,
            monotonic=self._monotonic,
        )
        if got is None:
            log(_log, logging.WARNING, "ledger.spares_not_dropped", reservation=name, n=len(ids))
        else:
            self._spare_events("dropped", len(ids))

    def _instant(self) -> datetime:
        if self._now is None:
            raise RuntimeError("GroupCommit: spare holds need a clock (now=)")
        return self._now()


def _fits(expected: GPUReservation, group: list[_Waiter]) -> bool:
    """Whether every ask of ``group`` fits the room ``expected`` leaves."""
    return sum(w.ask.gpus for w in group) <= ledger.free(expected)


def _too_late(future: asyncio.Future[ClaimResult | None]) -> None:
    """A caller waiting for a spare reached its deadline."""
    if not future.done():
        future.set_result(ClaimResult(False, None, None, "deadline", 0))


def _fail(future: asyncio.Future[ClaimResult], exc: Exception | None) -> None:
    if future.done():
        return
    if exc is None:
        future.cancel()
    else:
        future.set_exception(exc)
