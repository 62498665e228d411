"""Issue 12 acceptance 5 in the sandbox: a burst of 100 candidates.

100 one-GPU a100 pods of alice's arrive in one ``kubectl create``. The app has 16 a100
GPUs, so 16 leases are granted and the rest denied (contended). Checked: at most two
admission batches (batches that asked the app), and no duplicate lease — every lease
the app emulator holds maps to one pod through its idempotency key, and no pod has
more than one active lease.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

from shared.clock import SystemClock
from shared.resources import PODS
from tests.reconciler import test_queue_sandbox as queue_sandbox
from tests.reconciler.test_integration import World, eventually, leading
from tests.reconciler.test_ondemand_sandbox import app_of, jit_manifest, leases
from tests.reconciler.test_queue_sandbox import ENV, create, sandbox_world

pytestmark = queue_sandbox.pytestmark
BURST = 100


async def metric(w: World, url: str, name: str) -> float:
    text = (await w.http.get(f"{url}/metrics")).text
    for line in text.splitlines():
        if line.startswith(f"gpu_reservation_{name} "):
            return float(line.split()[1])
    return 0.0


async def unschedulable(w: World, count: int) -> bool:
    """Whether ``count`` of alice's pods carry the scheduler's Unschedulable verdict."""
    pods = (await w.gateway.list_all(PODS, "alice")).items
    verdicts = [
        c
        for p in pods
        for c in (p.get("status") or {}).get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
    ]
    return len(verdicts) == count


def test_acceptance_5_burst_of_100_two_batches_no_duplicates(tmp_path: Path) -> None:
    asyncio.run(burst(tmp_path))


async def burst(tmp_path: Path) -> None:
    async with sandbox_world(tmp_path, SystemClock()) as w:
        config = tmp_path / "kubeconfig"
        proc = await w.replica("r1", True, **ENV)
        await leading(proc)
        # A burst is what the reconciler sees at once. kubectl creates the pods one by one
        # and the scheduler gives its verdicts one by one, which a loaded machine can
        # spread over more than the batch's settle window (SETTLE_MAX_S): the replica is
        # paused meanwhile, and its watches deliver the whole burst when it resumes.
        proc.signal(signal.SIGSTOP)
        try:
            await create(config, *(jit_manifest(f"b{i:03d}") for i in range(BURST)))
            await eventually(lambda: unschedulable(w, BURST), 20)
        finally:
            proc.signal(signal.SIGCONT)

        async def settled() -> bool:
            asked = await metric(w, proc.url, 'ondemand_lease_asks_total{outcome="granted"}')
            denied = await metric(w, proc.url, 'ondemand_lease_asks_total{outcome="contended"}')
            return asked + denied >= BURST

        try:
            await eventually(settled, 40)
        except AssertionError as exc:
            text = (await w.http.get(f"{proc.url}/metrics")).text
            asks = [x for x in text.splitlines() if x.startswith("gpu_reservation_ondemand_")]
            told = Counter(str(e.get("event")) for e in proc.logs())
            raise AssertionError(f"{exc}; {asks}; {told}") from None
        batches = await metric(w, proc.url, "ondemand_batches_total")
        assert 1 <= batches <= 2, f"{batches} admission batches for one burst"
        granted = leases(w)
        assert len(granted) == 16
        keys = app_of(w).state.idempotency
        by_pod = Counter(
            key.split(".")[0] for key, rid in keys.items() if rid in {r.id for r in granted}
        )
        assert all(n == 1 for n in by_pod.values()), by_pod
        assert len(by_pod) == len(granted)
