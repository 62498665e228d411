"""Guarded background tasks and the health they report.

A loop returns only when cancelled. The guard logs a crash (with the traceback) and an
unexpected clean exit as ``task.crashed`` / ``task.exited`` and records it, which turns
``GET /health`` into a 503 naming the task, so Kubernetes restarts the process.

Cancelling waits for the tasks a bounded time (``CANCEL_GRACE_S``): a task that
swallowed its cancel must not hang a leadership change or a shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from shared.logs import log

_log = logging.getLogger(__name__)

#: Longest a cancel waits for the cancelled tasks to end before going on (seconds).
CANCEL_GRACE_S = 5.0


#: Cancelled tasks that outlived their grace, held so they are not garbage-collected
#: while still pending (the event loop keeps only weak references to tasks).
_abandoned: set[asyncio.Task[Any]] = set()


async def end_within(tasks: Mapping[str, asyncio.Task[Any]], grace_s: float) -> None:
    """Cancel ``tasks`` (by name) and wait for them to end, at most ``grace_s``.

    A task still running after the grace swallowed its cancel (Python 3.11's
    ``asyncio.wait_for`` does when the cancel arrives as the awaited call completes).
    It is logged by name as ``task.cancel_stuck``, cancelled once more and left
    behind: the caller — a leadership change, a shutdown — goes on without it.
    """
    for task in tasks.values():
        task.cancel()
    if tasks:
        await asyncio.wait(tasks.values(), timeout=grace_s)
    for name, task in tasks.items():
        if not task.done():
            log(_log, logging.ERROR, "task.cancel_stuck", task=name, grace_s=grace_s)
            task.cancel()
            _abandoned.add(task)
            task.add_done_callback(_abandoned.discard)


class Tasks:
    """Starts named loops under a guard and remembers which ones failed."""

    def __init__(self, grace_s: float = CANCEL_GRACE_S) -> None:
        self.failed: dict[str, str] = {}
        #: Longest ``cancel`` waits for the cancelled tasks (seconds).
        self.grace_s = grace_s
        self._running: dict[str, asyncio.Task[None]] = {}

    @property
    def healthy(self) -> bool:
        """No guarded task has crashed or exited."""
        return not self.failed

    def running(self) -> list[str]:
        """Names of the tasks still running."""
        return sorted(n for n, t in self._running.items() if not t.done())

    def spawn(self, name: str, loop: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run ``loop`` as task ``name`` under the guard."""
        task = asyncio.create_task(self._guard(name, loop), name=name)
        self._running[name] = task
        return task

    async def cancel(self, *names: str) -> None:
        """Cancel the named tasks (all when none named); wait at most ``grace_s``
        (``end_within``)."""
        chosen = {n: t for n, t in self._running.items() if not names or n in names}
        await end_within(chosen, self.grace_s)
        for name, task in chosen.items():
            if self._running.get(name) is task:
                del self._running[name]

    async def _guard(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        try:
            await loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failed[name] = f"crashed: {type(exc).__name__}: {exc}"[:200]
            log(_log, logging.ERROR, "task.crashed", exc_info=True, task=name)
            return
        self.failed[name] = "exited"
        log(_log, logging.ERROR, "task.exited", task=name)
