"""Review: a replacement is installed before the cancellation of its source is written.

The contract's order is *install the new set → re-link → evict what is left*: the
leader reacts to each GPUReservation write as its watch delivers it, so a cancellation
written before its replacement exists evicts pods that should have been re-linked.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reconciler.base.metrics import Metrics
from reconciler.mirror import push
from reconciler.mirror.sync import Syncer
from shared.appclient import Reservation
from shared.clock import ManualClock, utc
from tests.fakekube import FakeKube
from tests.reconciler.builders import NS, FakeSource, row

CANCEL = row(1, status="cancelled", cancel_reason="superseded", updated_at="2026-01-05T09:59:00Z")


def harness() -> tuple[FakeKube, Syncer, list[tuple[str, str]]]:
    kube = FakeKube()
    syncer = Syncer(FakeSource(), kube, NS, ManualClock(utc(2026, 1, 5, 10)), Metrics(), 7)
    writes: list[tuple[str, str]] = []

    def seen(obj: dict[str, Any]) -> None:
        writes.append((obj["metadata"]["name"], obj["spec"]["state"]))

    kube.on_write = seen
    return kube, syncer, writes


def first_cancel_after_replacement(writes: list[tuple[str, str]]) -> bool:
    cancel = writes.index(("res-1", "cancelled"))
    return ("res-3", "active") in writes[:cancel]


def test_a_push_installs_the_replacement_before_cancelling_its_source() -> None:
    async def scenario() -> None:
        _kube, syncer, writes = harness()
        await push.apply(syncer, [Reservation.model_validate(row(1))])
        entries = [Reservation.model_validate(r) for r in (CANCEL, row(3))]
        await push.apply(syncer, entries)
        assert first_cancel_after_replacement(writes)

    asyncio.run(scenario())


@pytest.mark.parametrize("defer_status", [False, True], ids=["periodic", "startup"])
def test_a_poll_installs_the_replacement_before_cancelling_its_source(defer_status: bool) -> None:
    async def scenario() -> None:
        _kube, syncer, writes = harness()
        source = syncer.source
        assert isinstance(source, FakeSource)
        source.rows = [Reservation.model_validate(row(1))]
        assert await syncer.sync_once()
        source.rows = [Reservation.model_validate(r) for r in (CANCEL, row(3))]
        assert await syncer.sync_once(defer_status=defer_status)
        assert first_cancel_after_replacement(writes)

    asyncio.run(scenario())
