"""The claim engine: the one object the handler asks to claim budget.

Inside one replica, concurrent claims on one reservation do not race each other
through 409s: they queue in the reservation's lane (``webhook.claims.lanes``) and each
write carries every claim waiting (``shared.ledger.write_claims``, each caller told
its own outcome). While a write is in flight, the next group may be decided on what it
leaves and sent before its answer (``Phase.PIPELINE``). Contention is left only between
replicas (and the reconciler's room-taking writes), where the ledger's lost-race loop
decides.

A group starts a few passes of the event loop after the claim that finds the lane free
(``SETTLE``): request tasks the same wake-up made ready claim first, so they go in this
write instead of the next. After a write starts, the lane looks again ``SETTLE`` passes
after the write's first step, the one that tells what it leaves (``SETTLE + 1`` after
the start: the claims arriving meanwhile go in the next group), and when a write ends.

A caller waits at most until its own deadline; a claim written after its caller gave
up is an unbound hold the reconciler expires after the claim TTL, exactly like a single
claim's write cut off mid-flight. Dry runs write nothing and do not queue.

The engine calls down only: the ledger, the journal, the cache (``Ledgers``) and the
metrics. Nothing it calls calls back into it or the handler.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from itertools import chain
from typing import Any, Protocol

from shared.ledger import Ask, ClaimPlan, ClaimResult, LedgerGateway, Reason, write_claims
from shared.model import GPUReservation
from webhook.claims.entries import Entry
from webhook.claims.journal import Journal, Stage
from webhook.claims.lanes import DEPTH, Flight, Lane, Phase, Waiter, next_group, phase_of

#: Passes of the event loop a group waits after the claim that starts it: the request
#: tasks the same wake-up made ready (each runs one pass after the wake-up's reads)
#: claim first, so they go in this write instead of the next (docs/developer/performance.md:
#: 2 and 3 against 1).
SETTLE = 3


class Ledgers(Protocol):
    """What the engine needs of the reservation cache (``webhook.cache``)."""

    journal: Journal

    def entry(self, name: str) -> Entry | None:
        """The cached object, parsed and raw (None: not cached)."""
        ...

    def landed(self, result: ClaimResult) -> None:
        """A group's write ended: its result carrying the server's answer, or the
        write that landed unread (``result.landed``)."""
        ...


class ClaimMetrics(Protocol):
    """What the engine reports: each write's size and races lost."""

    def grouped(self, size: int) -> None: ...

    def conflicts(self, count: int) -> None: ...


class ClaimEngine:
    """Claims budget for the handler: ``claim`` (queued, grouped, pipelined) and
    ``dry_run`` (decided alone, nothing written)."""

    def __init__(
        self,
        gateway: LedgerGateway,
        ledgers: Ledgers,
        namespace: str,
        metrics: ClaimMetrics | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        depth: int = DEPTH,
    ) -> None:
        self._gateway = gateway
        self._ledgers = ledgers
        self._namespace = namespace
        self._metrics = metrics
        self._monotonic = monotonic
        self._depth = max(1, depth)
        self._lanes: dict[str, Lane] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: Writes made, the asks they carried, and the writes decided on another still
        #: in flight (for tests and metrics).
        self.writes = 0
        self.asks = 0
        self.pipelined = 0

    @property
    def idle(self) -> bool:
        """Nothing queued and no write in flight, on any reservation."""
        return not self._lanes

    async def claim(self, name: str, ask: Ask, deadline: float) -> ClaimResult:
        """``ask`` on reservation ``name``, written with whatever else is waiting.

        At ``deadline`` the caller is answered ``deadline`` (the ask may still be in a
        write in flight, whose hold then expires unbound). A caller cancelled before
        its ask joins a group is left out of it."""
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = Lane(asyncio.get_running_loop())
        future: asyncio.Future[ClaimResult] = lane.loop.create_future()
        lane.queue.append(Waiter(ask, deadline, future))
        if deadline < lane.due:
            self._arm(lane, deadline)
        if len(lane.flights) < self._depth and (not lane.flights or lane.flights[-1].first):
            self._schedule(name, lane)  # else the end of a write or a first send starts it
        return await future

    async def dry_run(self, name: str, ask: Ask, deadline: float) -> ClaimResult:
        """``ask`` decided on the cached object (or a GET) as a claim would be; nothing
        written, nothing queued."""
        entry = self._ledgers.entry(name)
        plan = ClaimPlan(
            namespace=self._namespace,
            name=name,
            asks=[ask],
            deadline=deadline,
            base=entry.raw if entry else None,
            dry_run=True,
            monotonic=self._monotonic,
        )
        (result,) = await write_claims(self._gateway, plan)
        return result

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

    # --- the lane's steps -------------------------------------------------------------

    def _schedule(self, name: str, lane: Lane, passes: int = SETTLE) -> None:
        """A start of the next group ``passes`` passes of the loop from now, unless one
        is scheduled already."""
        if lane.start is None:
            lane.start = lane.loop.call_soon(self._settle, name, lane, passes)

    def _settle(self, name: str, lane: Lane, passes: int) -> None:
        if passes > 1:
            lane.start = lane.loop.call_soon(self._settle, name, lane, passes - 1)
            return
        lane.start = None
        self._pump(name, lane)

    def _pump(self, name: str, lane: Lane) -> None:
        """Start the next group when the lane's phase lets it; end the lane when
        nothing is left in it."""
        if self._lanes.get(name) is not lane:
            return
        if lane.queue:
            group = next_group(lane, self._monotonic())
            phase = phase_of(lane.flights, self._depth, sum(w.ask.gpus for w in group))
            if group and phase in (Phase.IDLE, Phase.PIPELINE):
                self._start(name, lane, group)
            else:
                lane.queue[:0] = group
        if not lane.flights and not lane.queue:
            del self._lanes[name]
            for handle in (lane.timer, lane.start):
                if handle is not None:
                    handle.cancel()

    def _start(self, name: str, lane: Lane, group: list[Waiter]) -> None:
        before = lane.flights[-1].first if lane.flights else None
        flight = Flight(group, self._ledgers.journal)
        lane.flights.append(flight)
        base: dict[str, Any] | None
        parsed: GPUReservation | None
        if before is not None:
            self.pipelined += 1
            base, parsed = before.after, before.result
        else:
            entry = self._ledgers.entry(name)
            base, parsed = (entry.raw, entry.reservation) if entry else (None, None)
        plan = ClaimPlan(
            namespace=self._namespace,
            name=name,
            asks=[w.ask for w in group],
            deadline=max(w.deadline for w in group),
            base=base,
            parsed=parsed,
            pipelined=before is not None,
            echo=False,
            monotonic=self._monotonic,
        )
        task = lane.loop.create_task(self._commit(name, lane, flight, plan))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self._depth > 1:  # SETTLE passes after the write's first step (it told its result)
            self._schedule(name, lane, SETTLE + 1)

    async def _commit(self, name: str, lane: Lane, flight: Flight, plan: ClaimPlan) -> None:
        """One group's write; its callers told their outcomes — after the next group's
        write is started, so that write is sent before the callers' answers are made.
        A bug (an exception) is raised to them and to every caller still queued."""
        group = flight.group
        told: list[ClaimResult] = []
        try:
            results = await write_claims(self._gateway, plan, flight)
            self._wrote(flight, results)
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
            lane.flights.remove(flight)
            self._pump(name, lane)
        for waiter, result in zip(group, told, strict=False):  # told: none on a failure
            if not waiter.future.done():
                waiter.future.set_result(result)

    def _wrote(self, flight: Flight, results: list[ClaimResult]) -> None:
        """A write ended: counted, and its outcome put in the cache before the next
        group reads it (the result carrying the server's answer, if any)."""
        self.writes += 1
        self.asks += len(results)
        told = next((r for r in results if r.raw is not None), results[0])
        flight.stage = Stage.LANDED if told.admitted else Stage.LOST
        if told.landed is None:  # nothing landed unread: no attempt of it is awaited
            self._ledgers.journal.lost(flight.attempts)
        if self._metrics is not None:
            self._metrics.grouped(len(results))
            self._metrics.conflicts(told.conflicts)
        self._ledgers.landed(told)

    def _arm(self, lane: Lane, deadline: float) -> None:
        """The lane's deadline timer, for ``deadline`` (the earliest waiting)."""
        if lane.timer is not None:
            lane.timer.cancel()
        lane.due = deadline
        delay = max(deadline - self._monotonic(), 0.0)
        lane.timer = lane.loop.call_later(delay, self._expire, lane, deadline)

    def _expire(self, lane: Lane, due: float) -> None:
        """Answer ``deadline`` to every caller whose deadline is ``due`` or earlier
        (the timer was set for it), then set the timer for the next one waiting."""
        lane.timer, lane.due = None, float("inf")
        following = float("inf")
        for waiter in chain(lane.queue, *(f.group for f in lane.flights)):
            if waiter.future.done():
                continue
            if waiter.deadline <= due:
                waiter.future.set_result(ClaimResult(admitted=False, reason=Reason.DEADLINE))
            elif waiter.deadline < following:
                following = waiter.deadline
        if following < float("inf"):
            self._arm(lane, following)


def _fail(future: asyncio.Future[ClaimResult], exc: Exception | None) -> None:
    if future.done():
        return
    if exc is None:
        future.cancel()
    else:
        future.set_exception(exc)
