"""Cancelling guarded tasks never hangs on a task that swallows its cancel."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from reconciler.base.settings import load
from reconciler.base.tasks import Tasks
from reconciler.process import LEAD_TASK, Reconciler
from shared.clock import ManualClock
from shared.logs import fields_of
from tests.fakekube import FakeKube
from tests.reconciler.builders import NS, START, FakeSource


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
        tasks = Tasks(grace_s=0.05)
        stuck = tasks.spawn("stubborn", ignores_its_first_cancel)
        fine = tasks.spawn("fine", waits_forever)
        await asyncio.sleep(0)  # both start and wait
        with caplog.at_level(logging.ERROR, logger="reconciler.base.tasks"):
            await tasks.cancel()
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


def test_losing_leadership_goes_on_when_the_terms_start_swallows_its_cancel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The start of a term (the startup sync) is cancelled when leadership is lost; a
    sync that swallowed the cancel must not hang the change: the replica moves on."""

    async def scenario() -> None:
        env = {"RESERVATION_API_URL": "http://a", "RESERVATION_API_KEY": "k", "POD_NAMESPACE": NS}
        settings, _ = load(env)
        r = Reconciler(settings, FakeKube(), FakeSource(), ManualClock(START))  # type: ignore[arg-type]
        r.tasks.grace_s = 0.05
        syncing = asyncio.Event()

        async def stubborn_sync(*, defer_status: bool = False) -> bool:
            syncing.set()
            await ignores_its_first_cancel()
            return True

        r.syncer.sync_once = stubborn_sync  # type: ignore[method-assign]
        r._on_leadership(True)
        await syncing.wait()
        with caplog.at_level(logging.ERROR, logger="reconciler.base.tasks"):
            async with asyncio.timeout(30):  # generous: without the bound it never returns
                await r._stop_leading()
        stuck_logs = [fields_of(r) for r in caplog.records if r.getMessage() == "task.cancel_stuck"]
        assert stuck_logs == [{"task": LEAD_TASK, "grace_s": 0.05}]
        await r.stop()

    asyncio.run(scenario())
