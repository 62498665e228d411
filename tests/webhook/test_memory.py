"""The webhook's memory does not grow with the requests it serves.

Measured with ``tracemalloc``, not ``ps``: after a warm-up, two equal rounds of
admissions (claims, pods matching nothing, plain pods) are served; an allocation site
in our code whose live blocks grow by at least one per request of a kind in *both*
rounds grows with every request, and the test names it. (Blocks the interpreter keeps
in its free lists stay attributed to where they were first allocated; the warm-up
fills those lists, and what they add later stays below that rate.) The structures that hold state
across requests are checked by name as well: the hold memo stays within its bound,
the group commit keeps no queue or writer once its callers are answered, the cache
holds one entry per reservation and no write of ours pending once the server's state
has shown it.

The store stands in for the reconciler's upkeep between rounds (it drops the oldest
holds, as pods finishing would, and the cache hears of it as from its watch), so the
ledger itself stays the size a booking has.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest

from shared import ledger, model
from tests.policy.builders import NOW, PodBuilder, gpu_pod, reservation
from tests.webhook.helpers import call, review, wired
from webhook.handler import Admission

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
OURS = tuple(str(ROOT / package) for package in ("shared", "webhook"))
ROUND = 100  # requests of each kind per round
KEEP = 16


async def serve_round(admission: Admission, store, start: int) -> None:
    for i in range(start, start + ROUND):
        await call(admission, review(gpu_pod(1).build() | {"metadata": meta(f"c-{i}")}))
        await call(admission, review(gpu_pod(1, namespace="nobody").build()))
        await call(admission, review(PodBuilder(f"plain-{i}").build()))

    def trim(res: model.GPUReservation) -> model.GPUReservation:
        return ledger.drop(res, {h.claim for h in res.holds[:-KEEP]})

    await ledger.amend(store, store.namespace, "res-1", trim, now=NOW, deadline=1e12)
    await admission.cache.relist()  # what the watch would deliver


def meta(name: str) -> dict[str, object]:
    return {"name": name, "namespace": "alice", "labels": gpu_pod(1).build()["metadata"]["labels"]}


def blocks_by_site() -> Counter[str]:
    """Live blocks per allocating line of our code (garbage collected first: cycles
    awaiting collection are not growth)."""
    gc.collect()
    counts: Counter[str] = Counter()
    for stat in tracemalloc.take_snapshot().statistics("lineno"):
        frame = stat.traceback[0]
        if frame.filename.startswith(OURS):
            counts[f"{Path(frame.filename).relative_to(ROOT)}:{frame.lineno}"] += stat.count
    return counts


async def test_serving_admissions_grows_no_structure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model, "HOLD_MEMO_SIZE", 64)  # cycle the memo within the test
    admission, store = await wired(reservation(1, gpus=10**6))
    for start in (0, ROUND):  # warm-up: caches, imports, the interpreter's free lists
        await serve_round(admission, store, start)
    tracemalloc.start()
    try:
        a = blocks_by_site()
        await serve_round(admission, store, 2 * ROUND)
        b = blocks_by_site()
        await serve_round(admission, store, 3 * ROUND)
        c = blocks_by_site()
    finally:
        tracemalloc.stop()
    growing = {
        site: (b[site] - a[site], c[site] - b[site])
        for site in c
        if b[site] - a[site] >= ROUND and c[site] - b[site] >= ROUND
    }
    assert not growing, f"allocation sites growing with every round of requests: {growing}"
    assert len(model._HOLDS) <= 64
    for _ in range(10):  # a writer ends a few loop steps after its last caller's answer
        if admission.engine.idle:
            break
        await asyncio.sleep(0)
    assert admission.engine.idle
    assert len(admission.cache) == 1
    # A claim's write goes into the cache as provisional (its answer not read); the
    # pending writes it keeps end with the next state of the server met (here the
    # relist after each round, as the watch's events would).
    assert admission.cache.journal.names == []
