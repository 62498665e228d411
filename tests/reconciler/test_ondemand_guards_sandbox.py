"""Issue 12 acceptance 2 in the sandbox: each guard holds the pods it should, and only those.

One world, in order: a non-GPU shortage gets no lease; a node selector matching no
a100 node is told ``NoMatchingNode``; a 4-GPU ask on fragmented a100 capacity (two
5-GPU leases on the two 8-GPU nodes) gets no lease until a node frees; with both a100
nodes cordoned a new pod is told ``OnDemandAdmissionPaused``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from shared import vocab
from shared.clock import SystemClock
from shared.resources import PODS
from tests.reconciler import test_queue_sandbox as queue_sandbox
from tests.reconciler.test_evict_sandbox import kubectl
from tests.reconciler.test_integration import World, eventually, leading
from tests.reconciler.test_ondemand_sandbox import jit_manifest, leases
from tests.reconciler.test_queue_sandbox import (
    ENV,
    create,
    pod_of,
    reasons_of,
    reference,
    sandbox_world,
)

pytestmark = queue_sandbox.pytestmark


def h100_of_carol(name: str, cpu: str) -> dict[str, Any]:
    """A JIT h100 pod of carol's asking for ``cpu`` (she holds no booking)."""
    body = jit_manifest(name)
    body["metadata"]["namespace"] = "carol"
    body["metadata"]["labels"][vocab.GPU_CLASS_LABEL] = "h100"
    body["spec"]["tolerations"][0]["value"] = "h100"
    resources = body["spec"]["containers"][0]["resources"]
    resources["requests"] = {"cpu": cpu}
    resources["limits"]["cpu"] = cpu
    return body


def leases_of(w: World, gpus: int) -> list[int]:
    return [r.id for r in leases(w) if r.gpu_count == gpus and str(r.status) == "active"]


def test_acceptance_2_each_guard_holds_what_it_should(tmp_path: Path) -> None:
    asyncio.run(guards(tmp_path))


async def guards(tmp_path: Path) -> None:
    async with sandbox_world(tmp_path, SystemClock()) as w:
        config = tmp_path / "kubeconfig"
        await leading(await w.replica("r1", True, **ENV))

        # A cpu shortage on the node that got past the taints (carol's h100 pod reaches
        # the ordinary h100 node): no lease can help.
        big_cpu = h100_of_carol("cpu-hungry", cpu="1000")
        # A selector no a100 node matches (h100 nodes do not either: no disk label).
        pinned = jit_manifest("pinned", nodeSelector={"disk": "nvme"})
        await create(config, big_cpu, pinned)

        async def told(pod: str, reason: str) -> bool:
            return reason in await reasons_of(config, pod)

        await eventually(lambda: told("pinned", vocab.REASON_NO_MATCHING_NODE), 10)

        async def verdict_given(pod: str, namespace: str = "alice") -> bool:
            got = await w.gateway.get(PODS, pod, namespace)
            conditions = got["status"].get("conditions") or []
            return any(c.get("reason") == "Unschedulable" for c in conditions)

        await eventually(lambda: verdict_given("cpu-hungry", "carol"), 10)
        await asyncio.sleep(1.0)
        assert leases(w) == [], "no lease for a cpu shortage or an impossible selector"
        assert reference(await w.gateway.get(PODS, "cpu-hungry", "carol")) is None

        # Fragmented capacity: 5 of 8 GPUs taken on each a100 node.
        await create(config, jit_manifest("filler-1", gpus=5), jit_manifest("filler-2", gpus=5))

        async def running(pod: str) -> bool:
            return bool((await pod_of(w, pod))["status"].get("phase") == "Running")

        await eventually(lambda: running("filler-1"), 10)
        await eventually(lambda: running("filler-2"), 10)
        nodes = {(await pod_of(w, p))["spec"]["nodeName"] for p in ("filler-1", "filler-2")}
        assert len(nodes) == 2
        await create(config, jit_manifest("wide", gpus=4))
        await eventually(lambda: verdict_given("wide"), 10)
        await asyncio.sleep(1.5)
        assert leases_of(w, 4) == [], "no lease while no single node has 4 free GPUs"
        await asyncio.to_thread(
            kubectl, config, "delete", "pod", "filler-1", "-n", "alice", "--grace-period=0",
            "--force",
        )  # fmt: skip

        async def admitted(pod: str) -> bool:
            return reference(await pod_of(w, pod)) is not None

        await eventually(lambda: admitted("wide"), 5)
        assert len(leases_of(w, 4)) == 1

        # A drained class: every a100 node cordoned.
        await asyncio.to_thread(kubectl, config, "cordon", "a100-r1", "a100-r2")
        await create(config, jit_manifest("drained"))
        await eventually(lambda: told("drained", vocab.REASON_ONDEMAND_ADMISSION_PAUSED), 10)
        assert reference(await pod_of(w, "drained")) is None
        assert len(leases_of(w, 1)) == 0


def test_guard_4_holds_what_does_not_fit_while_the_app_over_counts(tmp_path: Path) -> None:
    asyncio.run(overcommit(tmp_path))


async def overcommit(tmp_path: Path) -> None:
    """The app counts 16 a100 GPUs; the nodes are forced down to 1 and 0: a 1-GPU lease
    fits the physical GPU, the next one does not and is told the class is limited."""
    async with sandbox_world(tmp_path, SystemClock()) as w:
        config = tmp_path / "kubeconfig"
        for name, gpus in (("a100-r1", "1"), ("a100-r2", "0")):
            await asyncio.to_thread(
                kubectl, config, "annotate", "node", name, f"{vocab.FORCE_NODE_CAPACITY}={gpus}"
            )
        await leading(await w.replica("r1", True, **ENV))
        await create(config, jit_manifest("first"))

        async def admitted(pod: str) -> bool:
            return reference(await pod_of(w, pod)) is not None

        await eventually(lambda: admitted("first"), 10)
        await create(config, jit_manifest("second"))

        async def told() -> list[str]:
            return [
                e["message"]
                for e in await queue_sandbox.events_of(config, "second")
                if e["reason"] == vocab.REASON_ONDEMAND_ADMISSION_PAUSED
            ]

        said = await eventually(told, 10)
        assert "is limited" in said[0]
        assert "A smaller or shorter job may start sooner" in said[0]
        assert not await admitted("second")
        assert len(leases_of(w, 1)) == 1
