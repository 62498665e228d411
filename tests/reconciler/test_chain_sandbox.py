"""Issue 7 acceptance 3 against the sandbox: two abutting bookings of one owner, class
and count chain the pod's guarantee to the end of the second; once both have ended the
pod reads ``overstay`` and its ``guaranteed-until`` stays frozen at that end."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from shared import model, vocab
from shared.clock import format_utc
from shared.resources import PODS
from tests.reconciler.test_evict_sandbox import kubectl
from tests.reconciler.test_integration import eventually, kubectl_sandbox_marks, world
from tests.reconciler.upholdkit import raw_pod

pytestmark = kubectl_sandbox_marks(90)


def test_abutting_bookings_chain_the_guarantee_then_the_pod_overstays(tmp_path: Path) -> None:
    asyncio.run(scenario(tmp_path))


async def scenario(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        config = tmp_path / "kubeconfig"
        await w.replica("r1", LEADER_ELECTION_ENABLED="false", RESERVATION_FETCH_INTERVAL="3600")
        now = datetime.now(UTC).replace(microsecond=0)
        # The pod must be seen guaranteed before the second booking ends: 24 s leave a
        # loaded machine room for the push, the kubectl apply and the annotation.
        first_end, second_end = now + timedelta(seconds=12), now + timedelta(seconds=24)
        first = await w.book(
            gpus=2, start=format_utc(now - timedelta(minutes=1)), end=format_utc(first_end)
        )
        await w.book(gpus=2, start=format_utc(first_end), end=format_utc(second_end))
        name = model.reference(first)
        await eventually(lambda: w.get(name), 10)
        pod: dict[str, Any] = raw_pod("chained", name, node=None)
        pod["metadata"].pop("uid")
        await asyncio.to_thread(kubectl, config, "apply", "-f", "-", stdin=json.dumps(pod))

        async def annotations() -> dict[str, str]:
            got = await w.gateway.get(PODS, "chained", "alice")
            return dict(got["metadata"].get("annotations") or {})

        async def chained() -> bool:
            notes = await annotations()
            return notes.get(vocab.GUARANTEED_UNTIL) == format_utc(second_end)

        await eventually(chained, 6)
        assert (await annotations())[vocab.GUARANTEE_STATUS] == vocab.GUARANTEE_STATUS_GUARANTEED

        async def overstaying() -> bool:
            notes = await annotations()
            return notes.get(vocab.GUARANTEE_STATUS) == vocab.GUARANTEE_STATUS_OVERSTAY

        remaining = (second_end - datetime.now(UTC)).total_seconds()
        await eventually(overstaying, remaining + 5)
        assert datetime.now(UTC) >= second_end
        assert (await annotations())[vocab.GUARANTEED_UNTIL] == format_utc(second_end)
