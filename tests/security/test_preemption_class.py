"""Issue 25 acceptance 1, case 6 (preemption): a pod's class for preemption is its
admission's, not a label its owner can still edit. One reserved h100 node of 4 GPUs
on a clock running 4x: alice's two 1-GPU pods are admitted under her booking; while the
webhook is down (the only way left to edit the label) she removes the ``gpu-class``
label of one. Her booking is then ended by an admin, so both overstay, and bob books
the whole node starting 70 sandbox seconds later. Both of alice's pods are preempted
and bob's pod runs — the unlabelled one is not immune.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from shared import vocab
from shared.clock import ScaledClock
from tests.reconciler.test_integration import kubectl_sandbox_marks
from tests.reconciler.test_preempt_sandbox import end_booking, node, scenario
from tests.security.kit import Stage, admitted, gpus, pod, waits

pytest.importorskip("sandbox.kube.component")
pytestmark = kubectl_sandbox_marks(180)
ENV = {
    "PREEMPTION_LEAD_MINUTES": "1",
    "TERMINATION_WARNING_LEAD_MINUTES": "2",
    "PREEMPTION_CHECK_INTERVAL": "10",
}


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    seed = scenario([node("h100-r1")], [{"username": "alice", "gpu_count": 2}])
    s = Stage(tmp_path_factory.mktemp("preemption"), scenario=seed, clock=ScaledClock(4.0), env=ENV)
    try:
        yield s
    finally:
        s.close()


def test_case_6_preemption_reads_the_class_from_the_admission(stage: Stage) -> None:
    """Case 6: at bob's booking start both of alice's overstaying pods are preempted,
    the one whose gpu-class label she removed included, and bob's pod runs."""

    async def play() -> None:
        made = [pod(n, gpu_class="h100", limits=gpus(1)) for n in ("labelled", "unlabelled")]
        assert (await stage.create("alice", *made)).code == 0
        for name in ("labelled", "unlabelled"):
            assert admitted(await stage.pod("alice", name)), name
            await waits(lambda n=name: running(stage, "alice", n), 10)  # type: ignore[misc]
        await stage.release.scale("webhook", 0)  # kubectl scale --replicas=0
        try:
            args = ("label", "pod", "unlabelled", "-n", "alice", f"{vocab.GPU_CLASS_LABEL}-")
            done = await stage.as_user("alice", *args)
            assert done.code == 0, done.err
        finally:
            await stage.release.scale("webhook", 1)
        await end_booking(stage.world, 1)
        await waits(lambda: overstays(stage, "labelled"), 10)
        rid = await stage.book("bob", 4, "h100", start="+70s")
        assert (await stage.create("bob", pod("whole", gpu_class="h100", limits=gpus(4)))).code == 0

        async def preempted() -> list[str] | None:
            names = [n for n in ("labelled", "unlabelled") if await gone_by_preemption(n)]
            return names if len(names) == 2 else None

        try:
            await waits(preempted, 20)
        except AssertionError:
            left = {n: await stage.events("alice", n) for n in ("labelled", "unlabelled")}
            raise AssertionError(f"not both preempted; their Events: {left}") from None
        await waits(lambda: running(stage, "bob", "whole"), 10)
        await stage.cancel(rid)

    async def gone_by_preemption(name: str) -> bool:
        return vocab.REASON_PREEMPTED in await stage.events("alice", name)

    stage.run(play(), timeout=170)


async def running(stage: Stage, ns: str, name: str) -> bool:
    got: dict[str, Any] | None = await stage.pod(ns, name)
    return bool(got) and (got or {}).get("status", {}).get("phase") == "Running"


async def overstays(stage: Stage, name: str) -> bool:
    got = await stage.pod("alice", name)
    found = ((got or {}).get("metadata") or {}).get("annotations") or {}
    return bool(found.get(vocab.GUARANTEE_STATUS) == vocab.GUARANTEE_STATUS_OVERSTAY)
