"""Group commit: concurrent claims on one reservation share one ``/status`` write.

Every admission claims its GPUs through the ledger's compare-and-swap on the
reservation's status. When a Job's pods arrive at once, one-write-per-claim makes them
fight: all decide on the same resourceVersion, one wins, the rest re-read and retry
until their deadline. Inside one replica that fight is pointless, so claims on the same
reservation queue here and one writer per reservation takes every claim waiting and
makes them in one ``ledger.claim_group`` write (each caller told its own outcome).
While that write is in flight, new claims queue for the next one. Contention is left
only between replicas (and the reconciler), where the 409 loop still decides.

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


@dataclass
class _Waiter:
    ask: Ask
    deadline: float
    future: asyncio.Future[ClaimResult] = field(repr=False)


class GroupCommit:
    """One writer per reservation; claims queue while it writes."""

    def __init__(
        self,
        gateway: LedgerGateway,
        namespace: str,
        cached: Callable[[str], dict[str, Any] | None],
        written: Callable[[ClaimResult], None],
        *,
        parsed: Callable[[str], GPUReservation | None] = lambda name: None,
        grouped: Callable[[int], None] = lambda size: None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``cached(name)`` is the watch cache's raw object (the first read of each
        write) and ``parsed(name)`` the same object parsed, when the cache has it;
        ``written(result)`` is told every group's outcome (an admitted ask's result:
        the one carrying the server's answer) before its callers are, so the cache
        holds the written version before the next group reads it;
        ``grouped(size)`` hears each group's size (metrics)."""
        self._gateway = gateway
        self._namespace = namespace
        self._cached = cached
        self._written = written
        self._parsed = parsed
        self._grouped = grouped
        self._monotonic = monotonic
        self._queues: dict[str, list[_Waiter]] = {}
        self._writers: dict[str, asyncio.Task[None]] = {}
        #: Writes made and the asks they carried (for tests and metrics).
        self.writes = 0
        self.asks = 0

    async def claim(self, name: str, ask: Ask, deadline: float) -> ClaimResult:
        """``ask`` on reservation ``name``, written with whatever else is waiting."""
        future: asyncio.Future[ClaimResult] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(name, []).append(_Waiter(ask, deadline, future))
        if name not in self._writers:
            self._writers[name] = asyncio.ensure_future(self._write_all(name))
        remaining = deadline - self._monotonic()
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(remaining, 0.0))
        except TimeoutError:
            return ClaimResult(False, None, None, "deadline", 0)

    async def close(self) -> None:
        """Cancel the writers (shutdown); their waiting callers are cancelled too."""
        writers = list(self._writers.values())
        for task in writers:
            task.cancel()
        await asyncio.gather(*writers, return_exceptions=True)

    async def _write_all(self, name: str) -> None:
        """Write groups for ``name`` until nobody waits."""
        group: list[_Waiter] = []
        try:
            while group := self._next_group(name):
                results = await ledger.claim_group(
                    self._gateway,
                    self._namespace,
                    name,
                    [w.ask for w in group],
                    deadline=max(w.deadline for w in group),
                    cached=self._cached(name),
                    cached_parsed=self._parsed(name),
                    monotonic=self._monotonic,
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
            for waiter in [*group, *self._queues.pop(name, [])]:
                _fail(waiter.future, failed)
            raise
        finally:
            del self._writers[name]

    def _next_group(self, name: str) -> list[_Waiter]:
        """The next waiters (oldest first) whose callers still wait and have time."""
        queue = self._queues.pop(name, [])
        now = self._monotonic()
        live = [w for w in queue if not w.future.done() and w.deadline > now]
        group, rest = live[:MAX_GROUP], live[MAX_GROUP:]
        if rest:
            self._queues[name] = rest
        return group


def _fail(future: asyncio.Future[ClaimResult], exc: Exception | None) -> None:
    if future.done():
        return
    if exc is None:
        future.cancel()
    else:
        future.set_exception(exc)
