"""Awaiting many calls with a bound on how many are in flight at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TypeVar

T = TypeVar("T")


async def bounded(calls: Sequence[Awaitable[T]], limit: int) -> list[T]:
    """Await ``calls`` with at most ``limit`` in flight; their results in order.

    The gateway runs each Kubernetes call on one of a bounded pool of worker threads;
    the bound here keeps one burst (a window opening, a first sync) from queueing
    thousands of calls ahead of everything else the process does.
    """
    gate = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T:
        async with gate:
            return await call

    return list(await asyncio.gather(*(one(c) for c in calls)))
