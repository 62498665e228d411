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

A caller waits at most until its own deadline; a claim written after its caller gave
up is an unbound hold the reconciler expires after the claim TTL, exactly like a
single claim's write cut off mid-flight. Dry runs write nothing and do not come here.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from itertools import chain
from typing import Any

from shared import ledger
from shared.ledger import Ask, ClaimPlan, ClaimResult, LedgerGateway, Reason, Write, write_claims
from shared.model import GPUReservation

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

_Expected = tuple[dict[str, Any], GPUReservation]


class _Waiter:
    __slots__ = ("ask", "deadline", "future")

    def __init__(self, ask: Ask, deadline: float, future: asyncio.Future[ClaimResult]) -> None:
        self.ask = ask
        self.deadline = deadline
        self.future = future


class _Write:
    """One group's write in flight."""

    __slots__ = ("group", "sent")

    def __init__(self, group: list[_Waiter]) -> None:
        self.group = group
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
        sending: Callable[[Write], None] = lambda write: None,
        monotonic: Callable[[], float] = time.monotonic,
        depth: int = DEPTH,
        echo: bool = False,
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
        and ``sending`` hears of each such write as it is sent."""
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
        self._tasks: set[asyncio.Task[None]] = set()
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
        joins a group is left out of it."""
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

    async def close(self) -> None:
        """Cancel the writes in flight (shutdown); every waiting caller is cancelled."""
        for lane in self._lanes.values():
            for waiter in lane.queue:
                waiter.future.cancel()
            lane.queue.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

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

    def _start(self, name: str, lane: _Lane, group: list[_Waiter], base: _Expected | None) -> None:
        write = _Write(group)
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
        try:
            plan = ClaimPlan(
                namespace=self._namespace,
                name=name,
                asks=[w.ask for w in group],
                deadline=max(w.deadline for w in group),
                base=base[0] if base is not None else self._cached(name),
                parsed=base[1] if base is not None else self._parsed(name),
                pipelined=base is not None,
                echo=self._echo,
                monotonic=self._monotonic,
            )
            results = await write_claims(self._gateway, plan, _Told(on_sent, self._sending))
            self.writes += 1
            self.asks += len(group)
            self._grouped(len(group))
            self._written(next((r for r in results if r.raw is not None), results[0]))
            told = results
        except Exception as exc:
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
                waiter.future.set_result(ClaimResult(admitted=False, reason=Reason.DEADLINE))
            elif waiter.deadline < following:
                following = waiter.deadline
        if following < math.inf:
            self._arm(lane, following)


def _fits(expected: GPUReservation, group: list[_Waiter]) -> bool:
    """Whether every ask of ``group`` fits the room ``expected`` leaves."""
    return sum(w.ask.gpus for w in group) <= ledger.free(expected)


def _fail(future: asyncio.Future[ClaimResult], exc: Exception | None) -> None:
    if future.done():
        return
    if exc is None:
        future.cancel()
    else:
        future.set_exception(exc)


class _Told:
    """The ``WriteLog`` of one group's write: its first attempt's expectation to the
    lane (``on_sent``), each quiet attempt to the cache (``sending``)."""

    __slots__ = ("on_sent", "sending")

    def __init__(
        self,
        on_sent: Callable[[dict[str, Any], GPUReservation], None] | None,
        sending: Callable[[Write], None],
    ) -> None:
        self.on_sent = on_sent
        self.sending = sending

    def sent(self, write: Write) -> None:
        if self.on_sent is not None:
            self.on_sent(write.after, write.result)
        if write.quiet:
            self.sending(write)
