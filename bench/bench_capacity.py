"""Node inventory and capacity audit benchmark (issue 11, acceptance 4).

Two cluster sizes — 50 nodes / 1,000 pods and 500 nodes / 10,000 pods — each in a
fresh child process (``python -m bench.bench_capacity <nodes> <pods>``) that imports
the reconciler (``reconciler.process``, so the code a replica loads is resident) and
fills the leader's real caches (``reconciler.base.caches.Caches``: the node and pod
``Watched`` caches, projected by the product's own functions) from an in-memory LIST
stand-in. Nodes: 5 classes, 8 GPUs each, every 10th one cordoned or NotReady; pods:
1 GPU, bound round-robin, every 20th finished.

Per size the child reports:

- **recompute CPU**: ``Caches.inventory()`` after a node change invalidated the memo
  (placements of every cached pod, node facts, per-class totals and blocks) plus one
  ``shared.policy.capacity.audit`` against the app's counts — median CPU time
  (``time.process_time``) of ``REPEATS`` recomputations;
- **memoised read**: the same call when nothing changed (what the guards pay per
  decision);
- **pod event**: what the leader's pod-cache listeners do when a pod starts or stops
  holding its GPUs (the inventory keeps GPUs per node up to date there, so a
  recomputation costs per node, not per pod);
- **RSS**: the child's resident set (``VmRSS``) with the caches filled, beside the
  same process before filling them (the code alone), so the caches' share shows.

Figures go to ``$BENCH_OUT/capacity.json``. This is not a live reconciler (no HTTP
server running, no watch streams): it isolates the inventory's and the caches' cost.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]
SIZES = ((50, 1_000), (500, 10_000))
CLASSES = [f"g{i}" for i in range(5)]
GPUS_PER_NODE = 8


def repeats() -> int:
    return 200 if os.environ.get("BENCH_MODE") == "full" else 50


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def node(i: int) -> dict[str, Any]:
    from shared import vocab

    name = f"n{i:04d}"
    ready = "False" if i % 10 == 3 else "True"
    return {
        "metadata": {"name": name, "resourceVersion": str(i + 1)},
        "spec": {
            "unschedulable": i % 10 == 7,
            "taints": [
                {
                    "key": vocab.RESERVATION_TAINT_KEY,
                    "value": CLASSES[i % len(CLASSES)],
                    "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
                }
            ],
        },
        "status": {
            "allocatable": {vocab.GPU_RESOURCE: str(GPUS_PER_NODE)},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def pod(i: int, nodes: int) -> dict[str, Any]:
    from shared import vocab

    on = i % nodes
    return {
        "metadata": {
            "name": f"p{i:05d}",
            "namespace": f"u{i % 40:02d}",
            "uid": f"uid-{i}",
            "resourceVersion": str(100_000 + i),
            "labels": {vocab.GPU_CLASS_LABEL: CLASSES[on % len(CLASSES)]},
            "annotations": {vocab.BOOKING_REFERENCE: f"{vocab.RESERVATION_REF_PREFIX}{i // 4}"},
        },
        "spec": {
            "nodeName": f"n{on:04d}",
            "containers": [{"name": "c", "resources": {"limits": {vocab.GPU_RESOURCE: "1"}}}],
        },
        "status": {"phase": "Succeeded" if i % 20 == 0 else "Running"},
    }


class Listing:
    """The LIST half of the gateway, from memory."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
        self.objects = objects

    async def list_all(self, res: Any, namespace: str | None = None, **_: Any) -> Any:
        from shared.gateway import ListResult

        return ListResult(self.objects.get(res.plural, []), "1")


def child(nodes: int, pods: int) -> dict[str, Any]:
    """Measure one size in this process (see the module docstring)."""
    import reconciler.process  # noqa: F401 - the reconciler's code, resident as in a replica
    from reconciler.base.caches import Caches
    from reconciler.base.kube import KubeWatcher
    from reconciler.base.settings import load
    from shared.clock import ManualClock, utc
    from shared.policy.capacity import audit
    from shared.resources import NODES, PODS

    code_kb = rss_kb()
    raw = {
        NODES.plural: [node(i) for i in range(nodes)],
        PODS.plural: [pod(i, nodes) for i in range(pods)],
    }
    env = {"RESERVATION_API_URL": "http://app", "RESERVATION_API_KEY": "k"}
    settings, _ = load(env)
    # LIST only: the caches are filled by relisting, never by a watch stream.
    listing = cast(KubeWatcher, Listing(raw))
    caches = Caches(listing, settings, ManualClock(utc(2026, 12, 3)), lambda: CLASSES)

    async def fill() -> None:
        await caches.nodes.relist()
        await caches.pods.relist()

    asyncio.run(fill())
    del raw
    app = {c: nodes // len(CLASSES) * GPUS_PER_NODE for c in CLASSES}
    first = next(iter(caches.nodes.items))
    cold, warm = [], []
    for _ in range(repeats()):
        facts = caches.nodes.items[first]
        for listener in caches.nodes.listeners:  # a node changed: the memo is dropped
            listener(first, facts, facts)
        began = time.process_time()
        inv = caches.inventory()
        assert inv is not None
        audit(inv, app)
        cold.append(time.process_time() - began)
        began = time.process_time()
        caches.inventory()
        warm.append(time.process_time() - began)
    events = []
    some = list(caches.pods.items)[1]
    view = caches.pods.items[some]
    gone = replace(view, phase="Succeeded")
    for i in range(repeats()):
        old, new = (view, gone) if i % 2 == 0 else (gone, view)
        began = time.process_time()
        for pod_listener in caches.pods.listeners:
            pod_listener(some, old, new)
        events.append(time.process_time() - began)
    inv = caches.inventory()
    assert inv is not None
    return {
        "nodes": nodes,
        "pods": pods,
        "cached_nodes": len(caches.nodes.items),
        "cached_pods": len(caches.pods.items),
        "excluded_nodes": len(inv.excluded),
        "recompute_ms": statistics.median(cold) * 1000,
        "memoised_us": statistics.median(warm) * 1_000_000,
        "pod_event_us": statistics.median(events) * 1_000_000,
        "rss_code_mb": code_kb / 1024,
        "rss_mb": rss_kb() / 1024,
    }


def measure(nodes: int, pods: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.bench_capacity", str(nodes), str(pods)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    found: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


def run() -> list[str]:
    rows = [measure(n, p) for n, p in SIZES]
    folder = Path(os.environ.get("BENCH_OUT", ROOT / ".bench"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "capacity.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    lines = [
        f"{'nodes':>6} {'pods':>7} {'recompute ms':>13} {'memoised us':>12} "
        f"{'pod event us':>13} {'RSS MB':>7} {'code MB':>8} {'caches MB':>10}"
    ]
    for r in rows:
        lines.append(
            f"{r['nodes']:>6} {r['pods']:>7} {r['recompute_ms']:>13.2f} "
            f"{r['memoised_us']:>12.1f} {r['pod_event_us']:>13.1f} "
            f"{r['rss_mb']:>7.1f} {r['rss_code_mb']:>8.1f} "
            f"{r['rss_mb'] - r['rss_code_mb']:>10.1f}"
        )
    small, large = rows
    caches = [max(0.1, r["rss_mb"] - r["rss_code_mb"]) for r in rows]
    lines.append(
        f"growth x{large['pods'] / small['pods']:.0f} in size: recompute "
        f"x{large['recompute_ms'] / small['recompute_ms']:.1f}, pod event "
        f"x{large['pod_event_us'] / small['pod_event_us']:.1f}, caches' RSS "
        f"x{caches[1] / caches[0]:.1f} (medians of {repeats()}; CPU is process time)"
    )
    return lines


if __name__ == "__main__":
    print(json.dumps(child(int(sys.argv[1]), int(sys.argv[2]))))
