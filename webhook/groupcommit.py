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

A caller waits at most until its own deadline; a claim written after its caller gave
up is an unbound hold the reconciler expires after the claim TTL, exactly like a
single claim's write cut off mid-flight. Dry runs write nothing and do not come here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shared import ledger
from shared.ledger import Ask, ClaimResult, LedgerGateway
from shared.model import GPUReservation

#: Most asks one write carries; more wait for the next write (bounds one body's size).
MAX_GROUP = 128
#: Writes in flight per reservation: a second group is sent before the first's answer,
#: decided on its expected result (docs/webhook.md "Group commit").
DEPTH = 2


@dataclass
class _Waiter:
    ask: Ask
    deadline: float
    future: asyncio.Future[ClaimResult] = field(repr=False)


class GroupCommit:
    """One writer per reservation; claims queue while it writes (at most ``depth``
    writes in flight per reservation, each decided on the one before's expected
    result)."""

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
        self._queues: dict[str, list[_Waiter]] = {}
        self._writers: dict[str, asyncio.Task[None]] = {}
        #: Per reservation whose writer waits with room for another write: the future
        #: the next claim to arrive resolves.
        self._arrived: dict[str, asyncio.Future[None]] = {}
        #: Writes made, the asks they carried, and the writes sent while another was in
        #: flight (for tests and metrics).
        self.writes = 0
        self.asks = 0
        self.pipelined = 0

    async def claim(self, name: str, ask: Ask, deadline: float) -> ClaimResult:
        """``ask`` on reservation ``name``, written with whatever else is waiting.

        At ``deadline`` the caller is answered ``deadline`` (one timer on the loop; the
        ask may still be in a write in flight, whose hold then expires unbound). A
        caller cancelled before its ask joins a group takes it out of the queue."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ClaimResult] = loop.create_future()
        self._queues.setdefault(name, []).append(_Waiter(ask, deadline, future))
        if name not in self._writers:
            self._writers[name] = asyncio.ensure_future(self._write_all(name))
        else:
            arrival = self._arrived.pop(name, None)
            if arrival is not None and not arrival.done():
                arrival.set_result(None)
        timer = loop.call_later(max(deadline - self._monotonic(), 0.0), _expire, future)
        try:
            return await future
        finally:
            timer.cancel()

    async def close(self) -> None:
        """Cancel the writers (shutdown); their waiting callers are cancelled too."""
        writers = list(self._writers.values())
        for task in writers:
            task.cancel()
        await asyncio.gather(*writers, return_exceptions=True)

    async def _write_all(self, name: str) -> None:
        """Write groups for ``name`` until nobody waits.

        A group starts at once while fewer than ``depth`` writes are in flight; with one
        in flight it is decided on that write's expected result (``ledger.claim_group``'s
        ``on_sent``: the new holds and the ledger token it sets), so its patch tests that
        token and lands only after it. It waits instead when that expectation is not
        known (a write conditional on the resourceVersion) or leaves too little room
        for the whole group: a refusal is decided on what the server holds, never on a
        write still in flight."""
        loop = asyncio.get_running_loop()
        running: set[asyncio.Task[None]] = set()
        newest: asyncio.Task[None] | None = None
        expected: tuple[dict[str, Any], GPUReservation] | None = None
        try:
            while True:
                for task in [t for t in running if t.done()]:
                    running.discard(task)
                    task.result()  # a bug in a write is raised to everyone waiting
                in_flight = newest is not None and not newest.done()
                blocked = in_flight and expected is None
                if len(running) < self._depth and not blocked and self._queues.get(name):
                    group = self._next_group(name)
                    base = expected if in_flight else None
                    if group and base is not None and not _fits(base[1], group):
                        self._queues[name] = [*group, *self._queues.get(name, [])]
                        blocked = True
                    elif group:
                        newest, expected = await self._start(name, group, base, running)
                        continue
                if not running:
                    if not self._queues.get(name):
                        return
                    continue
                waits: set[asyncio.Future[Any]] = set(running)
                if len(running) < self._depth and not blocked:
                    arrival: asyncio.Future[None] = loop.create_future()
                    self._arrived[name] = arrival
                    waits.add(arrival)
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    self._arrived.pop(name, None)
        except BaseException as exc:
            failed = exc if isinstance(exc, Exception) else None
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            for waiter in self._queues.pop(name, []):
                _fail(waiter.future, failed)
            raise
        finally:
            del self._writers[name]
            self._arrived.pop(name, None)

    async def _start(
        self,
        name: str,
        group: list[_Waiter],
        base: tuple[dict[str, Any], GPUReservation] | None,
        running: set[asyncio.Task[None]],
    ) -> tuple[asyncio.Task[None], tuple[dict[str, Any], GPUReservation] | None]:
        """Start ``group``'s write; the task and, when a next group may follow it before
        its answer, the object and ledger it will leave."""
        sent: asyncio.Future[tuple[dict[str, Any], GPUReservation]] = (
            asyncio.get_running_loop().create_future()
        )

        def on_sent(raw: dict[str, Any], res: GPUReservation) -> None:
            if not sent.done():  # a retry's expectation comes too late for a follower
                sent.set_result((raw, res))

        follow = on_sent if self._depth > 1 else None
        task = asyncio.ensure_future(self._commit(name, group, base, follow))
        running.add(task)
        if base is not None:
            self.pipelined += 1
        if follow is None:
            return task, None
        either: set[asyncio.Future[Any]] = {sent, task}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not sent.done():
            sent.cancel()
            return task, None
        return task, sent.result()

    async def _commit(
        self,
        name: str,
        group: list[_Waiter],
        base: tuple[dict[str, Any], GPUReservation] | None,
        on_sent: Callable[[dict[str, Any], GPUReservation], None] | None,
    ) -> None:
        """One group's ``ledger.claim_group``; its callers told their outcomes."""
        try:
            results = await ledger.claim_group(
                self._gateway,
                self._namespace,
                name,
                [w.ask for w in group],
                deadline=max(w.deadline for w in group),
                cached=base[0] if base is not None else self._cached(name),
                cached_parsed=base[1] if base is not None else self._parsed(name),
                monotonic=self._monotonic,
                on_sent=on_sent,
                pipelined=base is not None,
                echo=self._echo,
                sending=self._sending,
            )
            self.writes += 1
            self.asks += len(group)
            self._grouped(len(group))
            self._written(next((r for r in results if r.raw is not None), results[0]))
            for waiter, result in zip(group, results, strict=True):
                if not waiter.future.done():
                    waiter.future.set_result(result)
        except BaseException as exc:
            failed = exc if isinstance(exc, Exception) else None
            for waiter in group:
                _fail(waiter.future, failed)
            raise

    def _next_group(self, name: str) -> list[_Waiter]:
        """The next waiters (oldest first) whose callers still wait and have time."""
        queue = self._queues.pop(name, [])
        now = self._monotonic()
        live = [w for w in queue if not w.future.done() and w.deadline > now]
        group, rest = live[:MAX_GROUP], live[MAX_GROUP:]
        if rest:
            self._queues[name] = rest
        return group


def _fits(expected: GPUReservation, group: list[_Waiter]) -> bool:
    """Whether every ask of ``group`` fits the room ``expected`` leaves."""
    return sum(w.ask.gpus for w in group) <= ledger.free(expected)


def _expire(future: asyncio.Future[ClaimResult]) -> None:
    """A caller's deadline: answered ``deadline`` unless answered already."""
    if not future.done():
        future.set_result(ClaimResult(False, None, None, "deadline", 0))


def _fail(future: asyncio.Future[ClaimResult], exc: Exception | None) -> None:
    if future.done():
        return
    if exc is None:
        future.cancel()
    else:
        future.set_exception(exc)
