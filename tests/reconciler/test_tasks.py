"""Cancelling guarded tasks never hangs on a task that swallows its cancel."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from reconciler.tasks import Tasks
from shared.logs import fields_of


async def waits_forever() -> None:
    await asyncio.Event().wait()


async def ignores_its_first_cancel() -> None:
    """What a loop does when ``asyncio.wait_for`` swallowed the cancel (Python 3.11)."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()
    await asyncio.Event().wait()


def test_cancel_goes_on_without_a_task_that_ignores_its_cancel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        tasks = Tasks()
        stuck = tasks.spawn("stubborn", ignores_its_first_cancel)
        fine = tasks.spawn("fine", waits_forever)
        await asyncio.sleep(0)  # both start and wait
        with caplog.at_level(logging.ERROR, logger="reconciler.tasks"):
            await tasks.cancel(grace_s=0.05)
        assert fine.cancelled()
        assert tasks.running() == []
        assert tasks.healthy
        stuck_logs = [fields_of(r) for r in caplog.records if r.getMessage() == "task.cancel_stuck"]
        assert stuck_logs == [{"task": "stubborn", "grace_s": 0.05}]
        await asyncio.wait([stuck])  # the second cancel ends it
        assert stuck.cancelled()

    asyncio.run(scenario())


def test_cancel_of_named_tasks_leaves_the_others_running() -> None:
    async def scenario() -> None:
        tasks = Tasks()
        tasks.spawn("pods", waits_forever)
        tasks.spawn("nodes", waits_forever)
        await tasks.cancel("pods")
        assert tasks.running() == ["nodes"]
        await tasks.cancel()
        assert tasks.running() == []

    asyncio.run(scenario())
