"""Pushing reservation changes to the controller (reservation-api.md §4.1).

Changes are queued and sent in order by one background task as
``POST <reconciler>/api/reservations/push`` with ``Authorization: Bearer <token>``
and body ``{"reservations": [...]}``. Pushes are best-effort, like the real app's: a
failure is logged and recorded, never retried (the controller's next pull heals it).
The target is looked up at send time, because the reconciler starts after the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from shared.logs import log

logger = logging.getLogger("sandbox.app.push")

PUSH_PATH = "/api/reservations/push"

#: Returns ``(base_url, bearer_token)`` of the controller, or None when not configured.
PushTarget = Callable[[], tuple[str, str] | None]


@dataclass(frozen=True)
class PushRecord:
    """One push attempt, kept for tests and ``GET /_sandbox/pushes``."""

    ids: tuple[int, ...]
    outcome: str
    status: int | None = None


class Pusher:
    """Queues changed reservations and sends them to the controller in order."""

    def __init__(self, target: PushTarget, seconds: float = 5.0) -> None:
        self._target = target
        self._seconds = seconds
        self._queue: asyncio.Queue[list[dict[str, Any]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self.records: list[PushRecord] = []

    @property
    def configured(self) -> bool:
        """Whether a controller to push to is known right now."""
        return self._target() is not None

    def notify(self, reservations: list[dict[str, Any]]) -> None:
        """Queue one push of these ``ReservationResponse`` bodies."""
        if reservations:
            self._queue.put_nowait(reservations)

    def start(self) -> None:
        self._client = httpx.AsyncClient()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="app-push")

    async def drain(self) -> None:
        """Wait until every queued push was attempted."""
        await self._queue.join()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._client is not None:
            await self._client.aclose()

    async def _run(self) -> None:
        while True:
            batch = await self._queue.get()
            try:
                self.records.append(await self._send(batch))
            finally:
                self._queue.task_done()

    async def _send(self, batch: list[dict[str, Any]]) -> PushRecord:
        ids = tuple(int(r["id"]) for r in batch)
        target = self._target()
        if target is None or self._client is None:
            return PushRecord(ids, "not_configured")
        url, token = target
        try:
            response = await self._client.post(
                url.rstrip("/") + PUSH_PATH,
                json={"reservations": batch},
                headers={"Authorization": f"Bearer {token}"},
                timeout=self._seconds,
            )
        except httpx.HTTPError as exc:
            log(logger, logging.WARNING, "app.push_failed", ids=ids, error=type(exc).__name__)
            return PushRecord(ids, "error")
        outcome = "delivered" if response.is_success else "refused"
        log(logger, logging.INFO, "app.pushed", ids=ids, status=response.status_code)
        return PushRecord(ids, outcome, response.status_code)
