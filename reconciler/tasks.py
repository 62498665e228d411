"""Guarded background tasks and the health they report.

A loop returns only when cancelled. The guard logs a crash (with the traceback) and an
unexpected clean exit as ``task.crashed`` / ``task.exited`` and records it, which turns
``GET /health`` into a 503 naming the task, so Kubernetes restarts the process.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from shared.logs import log

_log = logging.getLogger(__name__)


class Tasks:
    """Starts named loops under a guard and remembers which ones failed."""

    def __init__(self) -> None:
        self.failed: dict[str, str] = {}
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
        """Cancel the named tasks (all when none named) and wait for them to finish."""
        chosen = [t for n, t in self._running.items() if not names or n in names]
        for task in chosen:
            task.cancel()
        await asyncio.gather(*chosen, return_exceptions=True)
        for name in [n for n, t in self._running.items() if t in chosen]:
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
