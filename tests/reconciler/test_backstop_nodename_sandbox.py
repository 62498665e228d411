"""Issue 25, case 1 and 4 in the sandbox with the real kubectl: a pod pinned to a
reserved node by ``spec.nodeName`` — an 8-GPU one declaring nothing, and one asking for
no GPU at all — never meets the scheduler or the webhook; the backstop evicts both with
UnadmittedToleration once the reconciler sees them, and leaves a pod pinned to an
ordinary node alone."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from shared import vocab
from shared.errors import NotFound
from shared.resources import PODS
from tests.reconciler.test_backstop_sandbox import ENV
from tests.reconciler.test_evict_sandbox import kubectl
from tests.reconciler.test_integration import World, eventually, kubectl_sandbox_marks, world

pytest.importorskip("sandbox.kube.component")

pytestmark = kubectl_sandbox_marks(120)


def pinned(name: str, node: str, gpus: int) -> dict[str, Any]:
    """carol's pod pinned to ``node``, no label, no toleration, no annotation."""
    limits = {vocab.GPU_RESOURCE: str(gpus)} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "carol"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "busybox", "resources": {"limits": limits}}],
        },
    }


async def exists(w: World, name: str) -> bool:
    """Present and not being deleted (a bound pod stays terminating until its kubelet
    confirms — the emulator has none — so a delete shows as ``deletionTimestamp``)."""
    try:
        got = await w.gateway.get(PODS, name, "carol")
    except NotFound:
        return False
    return not got["metadata"].get("deletionTimestamp")


def test_pods_pinned_to_a_reserved_node_are_evicted_an_ordinary_node_is_left(
    tmp_path: Path,
) -> None:
    asyncio.run(scenario(tmp_path))


async def scenario(tmp_path: Path) -> None:
    async with world(tmp_path, components=("kube", "app")) as w:
        config = tmp_path / "kubeconfig"
        await w.replica("r1", True, **ENV)
        await eventually(lambda: w.get("res-1"), 10)  # the mirror is current
        started = time.monotonic()
        for obj in (
            pinned("squat", "a100-r1", 8),
            pinned("cpu-only", "h100-r1", 0),
            pinned("ordinary", "h100-o1", 1),
        ):
            await asyncio.to_thread(kubectl, config, "apply", "-f", "-", stdin=json.dumps(obj))

        async def both_gone() -> bool:
            return not await exists(w, "squat") and not await exists(w, "cpu-only")

        # Bounded loosely (a loaded CI box): the figure is printed; alone, well under 2 s.
        await eventually(both_gone, 2.0)
        print(f"pinned pods evicted {time.monotonic() - started:.2f} s after their create")
        assert await exists(w, "ordinary")
        text = await asyncio.to_thread(
            kubectl, config, "get", "events", "-n", "carol", "-o", "json"
        )
        said = {
            e["involvedObject"]["name"]: e["message"]
            for e in json.loads(text)["items"]
            if e.get("reason") == vocab.REASON_UNADMITTED_TOLERATION
        }
        assert sorted(said) == ["cpu-only", "squat"]
        assert "on node a100-r1, which is reserved for GPU class a100" in said["squat"]
