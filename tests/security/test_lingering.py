"""Threat-model case 10: a pod that would run on a reserved node long after it is
deleted. One sandbox whose reconciler allows ``GRACE_S`` of termination grace
(``EVICTION_GRACE_SECONDS``); users act with ``kubectl`` and their own kubeconfig. Each
pod asks for a day of grace, and the sandbox's kubelet honours whatever grace the API
server holds, as a real one does: without the bound each pod would run for a day.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from shared import vocab
from tests.reconciler.test_integration import kubectl_sandbox_marks
from tests.security.kit import Stage, admitted, class_toleration, gpus, pod, waits
from tests.security.test_webhook_down import WebhookDown, squatter

pytest.importorskip("sandbox.kube.component")
pytestmark = kubectl_sandbox_marks(240)
GRACE_S = 2
DAY_S = 86_400
WEEK_S = 7 * DAY_S


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    s = Stage(tmp_path_factory.mktemp("lingering"), env={"EVICTION_GRACE_SECONDS": str(GRACE_S)})
    try:
        yield s
    finally:
        s.close()


def a_day_of_grace(body: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["terminationGracePeriodSeconds"] = DAY_S
    return body


def test_a_squatter_asking_for_a_day_of_grace_stops_within_the_allowed_grace(
    stage: Stage,
) -> None:
    """carol pins her pod to a reserved node while the webhook is down; the backstop
    evicts it, and the eviction gives it ``GRACE_S``, not its own day."""

    async def removed() -> bool:
        return await stage.pod("carol", "squat") is None

    async def scenario() -> None:
        try:
            async with WebhookDown(stage):
                done = await stage.create("carol", a_day_of_grace(squatter()))
                assert done.code == 0, done.err
            await waits(removed, 2 + GRACE_S)
            reasons = await stage.events("carol", "squat")
            assert vocab.REASON_UNADMITTED_TOLERATION in reasons, reasons
        finally:
            await stage.clear("carol")

    stage.run(scenario())


def test_a_pod_its_owner_deletes_with_a_week_of_grace_stops_within_the_allowed_grace(
    stage: Stage,
) -> None:
    """alice's admitted pod runs on a reserved a100 node; she deletes it with ``kubectl
    delete --grace-period`` of a week. The reconciler deletes it again with ``GRACE_S``
    and tells her why."""

    async def bound() -> bool:
        got = await stage.pod("alice", "long")
        return got is not None and bool(got["spec"].get("nodeName"))

    async def removed() -> bool:
        return await stage.pod("alice", "long") is None

    async def scenario() -> None:
        rid = await stage.book("alice", 1, "a100")  # a class whose nodes are reserved
        try:
            tolerations = [class_toleration("a100")]  # every GPU node's ordinary taint
            body = pod("long", gpu_class="a100", limits=gpus(1), tolerations=tolerations)
            body = a_day_of_grace(body)
            done = await stage.create("alice", body)
            assert done.code == 0, done.err
            assert admitted(await stage.pod("alice", "long"))
            await waits(bound, 5)
            args = ("delete", "pod", "long", "-n", "alice", f"--grace-period={WEEK_S}")
            done = await stage.as_user("alice", *args, "--wait=false")
            assert done.code == 0, done.err
            await waits(removed, 2 + GRACE_S)
            reasons = await stage.events("alice", "long")
            assert vocab.REASON_TERMINATION_GRACE_SHORTENED in reasons, reasons
        finally:
            await stage.cancel(rid)
            await stage.clear("alice")

    stage.run(scenario())
