"""``explain`` through the real CLI when the controller stops, and for an admitted pod
that lacks its class's pool toleration (issue 27, case 5), in the sandbox.

alice books one a100 GPU. ``notol`` (no ``gpu-class=a100`` toleration) is admitted but
no node takes it: explain names the toleration to add, not free GPUs. ``waiter`` waits
for the full booking. Then the reconciler shuts down (it releases its Lease): explain no
longer promises an admission "at once" but says the controller is not running.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from shared import vocab
from shared.clock import SystemClock
from tests.reconciler import test_queue_sandbox as queue_sandbox
from tests.reconciler.test_integration import eventually, leading
from tests.reconciler.test_ondemand_outage_sandbox import OUTAGE_ENV, explain
from tests.reconciler.test_queue_sandbox import create, manifest, pod_of, reference, sandbox_world

pytestmark = queue_sandbox.pytestmark


def test_a_stopped_controller_and_a_missing_toleration_are_told(tmp_path: Path) -> None:
    asyncio.run(scenario(tmp_path))


async def scenario(tmp_path: Path) -> None:
    async with sandbox_world(tmp_path, SystemClock()) as w:
        config = tmp_path / "kubeconfig"
        proc = await w.replica("r1", True, **OUTAGE_ENV)
        await leading(proc)
        rid = await w.book(1, "+0s", "+2h", "a100")
        name = f"{vocab.RESERVATION_REF_PREFIX}{rid}"
        bare = manifest("notol")
        bare["spec"]["tolerations"] = []
        await create(config, bare)

        async def admitted() -> bool:
            return reference(await pod_of(w, "notol")) == name

        await eventually(admitted, 15)

        async def judged() -> str | None:
            text = await asyncio.to_thread(explain, w, config, "alice/notol")
            return text if "The scheduler says:" in text else None

        text = await eventually(judged, 15)
        assert text.startswith(f"alice/notol: admitted under {name}, waiting for the scheduler")
        assert "It does not tolerate the taint gpu-class=a100" in text
        assert "{key: gpu-class, operator: Equal, value: a100}" in text
        assert "enough free GPUs" not in text

        await create(config, manifest("waiter"))
        text = await asyncio.to_thread(explain, w, config, "alice/waiter")
        assert text.startswith(f"alice/waiter: waiting: your booking {name} is full")
        assert "admitted at once" in text

        await proc.stop()
        text = await asyncio.to_thread(explain, w, config, "alice/waiter")
        head = text.splitlines()[0]
        assert head.startswith("alice/waiter: not admitted, and nothing will admit it now")
        assert "the controller is not running (no leader since" in head
        assert "admitted at once" not in text
        assert f"Once it runs: waiting: your booking {name} is full." in text
