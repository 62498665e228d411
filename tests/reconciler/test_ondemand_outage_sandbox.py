"""A reservation-app outage seen by a JIT user, in the sandbox (issue 27, case 6).

While every call to the app answers 503, a JIT candidate gets one Normal
``OnDemandLeaseDelayed`` Event, the leader publishes the outage on its Lease and
``explain`` says so; once the app answers again the lease is requested within one poll
(``RESERVATION_FETCH_INTERVAL``), not after the 2–5 minute retry.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from shared import vocab
from shared.clock import SystemClock
from tests.reconciler import test_queue_sandbox as queue_sandbox
from tests.reconciler.test_integration import World, eventually, leading
from tests.reconciler.test_ondemand_sandbox import jit_manifest
from tests.reconciler.test_queue_sandbox import ENV, create, ours, pod_of, reference, sandbox_world

pytestmark = queue_sandbox.pytestmark
POLL_S = 2
OUTAGE_ENV = {
    **ENV,
    "LEADER_ELECTION_ENABLED": "true",
    "LEADER_ELECTION_LEASE_SECONDS": "6",
    "LEADER_ELECTION_RENEW_SECONDS": "1",
    "RESERVATION_FETCH_INTERVAL": str(POLL_S),
}


def explain(w: World, config: Path, pod: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "reconciler", "--kubeconfig", str(config),
         "--controller-namespace", w.ctx.namespace, "explain", pod],
        capture_output=True, text=True, timeout=30, check=False,
        env={"TZ": "UTC", "PATH": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_outage_is_told_once_and_the_lease_follows_the_recovery(tmp_path: Path) -> None:
    asyncio.run(outage(tmp_path))


async def outage(tmp_path: Path) -> None:
    async with sandbox_world(tmp_path, SystemClock()) as w:
        config = tmp_path / "kubeconfig"
        proc = await w.replica("r1", True, **OUTAGE_ENV)
        await leading(proc)
        fault = {"path": "/api/*", "status": 503, "count": None}
        assert (await w.http.post(f"{w.app}/_sandbox/faults", json=fault)).status_code == 201
        await create(config, jit_manifest("job"))

        async def delayed() -> bool:
            return any(e["reason"] == vocab.REASON_ONDEMAND_LEASE_DELAYED for e in await ours(w))

        await eventually(delayed, 20)
        (told,) = [e for e in await ours(w) if e["reason"] == vocab.REASON_ONDEMAND_LEASE_DELAYED]
        assert told["type"] == "Normal"

        async def published() -> bool:
            text = await asyncio.to_thread(explain, w, config, "alice/job")
            return "The reservation app has been unreachable since" in text

        await eventually(published, 15)
        text = await asyncio.to_thread(explain, w, config, "alice/job")
        assert f"in its Events ({vocab.REASON_ONDEMAND_LEASE_DELAYED}" in text
        assert vocab.REASON_ONDEMAND_LEASE_DENIED not in text

        assert (await w.http.delete(f"{w.app}/_sandbox/faults")).status_code in (200, 204)

        async def admitted() -> bool:
            return reference(await pod_of(w, "job")) is not None

        # Within a poll and a batch of the recovery: ``eventually`` gives up after 30 s,
        # and the whole outage lasted less than the 2-minute retry it used to wait for.
        await eventually(admitted, POLL_S + 10)
        reasons = [e["reason"] for e in await ours(w)]
        assert reasons.count(vocab.REASON_ONDEMAND_LEASE_DELAYED) == 1
