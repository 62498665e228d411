"""The watch side of the fault campaign: a LIST+WATCH cache against the Kubernetes
emulator with faults on its WATCH (410 Gone, a connection dropped mid-body, 500, 429
with Retry-After) keeps serving what it had and converges on a change made while the
watch was broken — after a relist, without a restart."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.faults.harness import FaultWorld, fault_world, kube_fault

pytest.importorskip("sandbox.kube.component")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
WATCH = "watch=true"
FAULTS = (
    kube_fault("410 Gone", "GET", "/api/v1/pods", query=WATCH, status=410, count=2),
    kube_fault("dropped", "GET", "/api/v1/pods", query=WATCH, drop=True, count=2),
    kube_fault("500", "GET", "/api/v1/pods", query=WATCH, status=500, count=2),
    kube_fault(
        "429", "GET", "/api/v1/pods", query=WATCH, status=429, headers={"Retry-After": "1"}, count=2
    ),
)


async def until(w: FaultWorld, check: object, within_s: float = 30.0) -> None:
    """Turn the manual clock (the cache's retry pause) until ``check()`` holds."""
    deadline = time.monotonic() + within_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the cache did not converge"
        await asyncio.sleep(0.02)
        await w.clock.advance(0.5)


def test_the_pod_cache_converges_through_every_watch_fault(tmp_path: Path) -> None:
    async def run() -> dict[str, str]:
        table = {}
        async with fault_world(tmp_path) as w:
            for i, fault in enumerate(FAULTS):
                await w.reset()
                pods = w.reconciler.caches.pods
                task = asyncio.create_task(pods.run())
                try:
                    # "before" is created after the first LIST, so it arrives by the WATCH:
                    # the stream is registered before the fault is injected and it is closed
                    await until(w, pods.synced.is_set)
                    await w.pod("before", None, tolerated=False)
                    await until(w, lambda c=pods: "alice/before" in c.items)
                    relists = pods.relists
                    await w.inject(fault)
                    w.kube.cluster.store.close_watchers()  # the stream ends: it must re-watch
                    await w.pod(f"during-{i}", None, tolerated=False)
                    await until(w, lambda c=pods, i=i: f"alice/during-{i}" in c.items)
                    assert "alice/before" in pods.items  # never emptied on a fault
                    assert pods.relists > relists
                    table[fault.name] = f"converged after {pods.relists - relists} relist(s)"
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    await w.clear()
        return table

    table = asyncio.run(run())
    print("\n".join(f"watch {k}: {v}" for k, v in table.items()))
    assert len(table) == len(FAULTS)
