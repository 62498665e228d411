"""Scheduler and kubelet against the API emulator over HTTP (the ``cluster`` component)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from shared import vocab
from shared.errors import NotFound
from shared.gateway import Gateway
from shared.resources import EVENTS, NODES, PODS
from tests.cluster.builders import node, reservation_taint, reservation_toleration
from tests.cluster.running import cluster_gateway

pytestmark = [
    pytest.mark.anyio,
    # see tests/admission/test_emulator.py: the emulator leaks a socket per error answer
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

NS = "team-a"


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with cluster_gateway(tmp_path, NS) as client:
        reserved = node("h100-1", gpus=8, taints=[reservation_taint()], ready=None)
        await client.create(NODES, reserved)
        # The emulated kubelet registers the node Ready (it was created without the
        # condition); until then the scheduler sees it unreachable, as kube-scheduler
        # would, and a pod created first could get that verdict before the real one.
        await node_ready(client, "h100-1")
        yield client


async def node_ready(gateway: Gateway, name: str) -> None:
    """Wait until the node reports Ready=True (a generous liveness bound)."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        found = await gateway.get(NODES, name)
        ready = condition(found, "Ready")
        if ready.get("status") == "True":
            return
        assert asyncio.get_running_loop().time() < deadline, found.get("status")
        await asyncio.sleep(0.05)


def gpu_pod(
    name: str, gpus: int, tolerations: list[dict[str, Any]], **annotations: str
) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "busybox",
        "resources": {"limits": {vocab.GPU_RESOURCE: str(gpus)}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": [container], "tolerations": tolerations},
    }


async def eventually(
    gateway: Gateway, name: str, check: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """Poll the pod until ``check`` holds (a generous bound: a loaded machine is slow,
    and a passing check returns at once)."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        pod = await gateway.get(PODS, name, NS)
        if check(pod):
            return pod
        assert asyncio.get_running_loop().time() < deadline, pod.get("status")
        await asyncio.sleep(0.05)


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == kind), {})


async def test_an_untolerating_pod_stays_unschedulable_naming_the_taint(gateway: Gateway) -> None:
    expected = (
        "0/1 nodes are available: 1 node(s) had untolerated taint "
        f"{{{vocab.RESERVATION_TAINT_KEY}: h100}}. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
    await gateway.create(PODS, gpu_pod("plain", 1, []), NS)
    # The verdict the pod settles on (a pass that ran before the scheduler's cache saw
    # the node Ready names the node unreachable; the next pass corrects it).
    pod = await eventually(
        gateway, "plain", lambda p: condition(p, "PodScheduled").get("message") == expected
    )
    scheduled = condition(pod, "PodScheduled")
    assert scheduled["status"] == "False"
    assert scheduled["reason"] == "Unschedulable"
    assert not pod["spec"].get("nodeName")


async def test_a_tolerating_pod_is_bound_runs_and_finishes(gateway: Gateway) -> None:
    run = {vocab.SANDBOX_RUN_SECONDS: "1"}
    await gateway.create(PODS, gpu_pod("reserved", 4, [reservation_toleration()], **run), NS)
    # It runs for one second: a poll slowed by a loaded machine may first see it done.
    pod = await eventually(
        gateway, "reserved", lambda p: p["status"].get("phase") in ("Running", "Succeeded")
    )
    assert pod["spec"]["nodeName"] == "h100-1"
    assert condition(pod, "PodScheduled")["status"] == "True"
    if pod["status"]["phase"] == "Running":
        assert condition(pod, "Ready")["status"] == "True"
        assert pod["status"]["podIP"].startswith("127.")
    done = await eventually(gateway, "reserved", lambda p: p["status"].get("phase") == "Succeeded")
    assert condition(done, "Ready")["reason"] == "PodCompleted"


async def test_too_many_gpus_is_insufficient(gateway: Gateway) -> None:
    expected = f"0/1 nodes are available: 1 Insufficient {vocab.GPU_RESOURCE}."
    await gateway.create(PODS, gpu_pod("big", 9, [reservation_toleration()]), NS)
    pod = await eventually(
        gateway,
        "big",
        lambda p: str(condition(p, "PodScheduled").get("message", "")).startswith(expected),
    )
    assert condition(pod, "PodScheduled")["reason"] == "Unschedulable"
    assert not pod["spec"].get("nodeName")


async def test_deletion_honours_the_grace_period(gateway: Gateway) -> None:
    await gateway.create(PODS, gpu_pod("graceful", 1, [reservation_toleration()]), NS)
    await eventually(gateway, "graceful", lambda p: p["status"].get("phase") == "Running")
    await gateway.delete(PODS, "graceful", NS, grace_period_s=1)
    terminating = await gateway.get(PODS, "graceful", NS)
    assert terminating["metadata"]["deletionTimestamp"]
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        try:
            await gateway.get(PODS, "graceful", NS)
        except NotFound:
            break
        assert loop.time() - start < 5
        await asyncio.sleep(0.05)
    assert loop.time() - start >= 0.5


async def test_a_pod_pinned_by_node_name_skips_taints_but_not_the_kubelets_check(
    gateway: Gateway,
) -> None:
    """Rule: a pod created with ``spec.nodeName`` never meets the scheduler: the kubelet runs
    it on a node whose NoSchedule reservation taint it does not tolerate, but refuses one the
    node has no room for — phase Failed, reason ``OutOfnvidia.com/gpu``, ``Pod was rejected:
    …`` — with a Warning Event of that reason."""
    first = gpu_pod("pinned", 8, [])
    first["spec"]["nodeName"] = "h100-1"
    await gateway.create(PODS, first, NS)
    running = await eventually(gateway, "pinned", lambda p: p["status"].get("phase") != "Pending")
    assert running["status"]["phase"] == "Running"
    second = gpu_pod("squeezed", 1, [])
    second["spec"]["nodeName"] = "h100-1"
    await gateway.create(PODS, second, NS)
    failed = await eventually(gateway, "squeezed", lambda p: p["status"].get("phase") != "Pending")
    reason = f"OutOf{vocab.GPU_RESOURCE}"
    why = (
        f"Node didn't have enough resource: {vocab.GPU_RESOURCE}, "
        "requested: 1, used: 8, capacity: 8"
    )
    assert (failed["status"]["phase"], failed["status"]["reason"]) == ("Failed", reason)
    assert failed["status"]["message"] == f"Pod was rejected: {why}"
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        listed = await gateway.list_all(EVENTS, NS)
        told = [e for e in listed.items if e["involvedObject"]["name"] == "squeezed"]
        if told:
            break
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    assert [(e["type"], e["reason"], e["message"]) for e in told] == [("Warning", reason, why)]


async def test_a_pod_a_user_marks_as_a_mirror_pod_is_deleted_never_run(gateway: Gateway) -> None:
    """Rule: a pod carrying ``kubernetes.io/config.mirror`` stands for a static pod of the
    node's manifest directory; the sandbox's nodes have none, so the kubelet deletes it
    as an orphan (as a real kubelet does) instead of running it."""
    fake = gpu_pod("fake-mirror", 8, [])
    fake["spec"]["nodeName"] = "h100-1"
    fake["metadata"]["annotations"] = {vocab.MIRROR_POD_ANNOTATION: "x"}
    await gateway.create(PODS, fake, NS)
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            got = await gateway.get(PODS, "fake-mirror", NS)
        except NotFound:
            break
        assert got.get("status", {}).get("phase") != "Running"
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)


async def test_an_ephemeral_container_is_reported_running(gateway: Gateway) -> None:
    """Rule: a debug container added to a running pod (``pods/ephemeralcontainers``) is
    reported running in ``ephemeralContainerStatuses`` (what ``kubectl debug -it`` waits for)."""
    body = gpu_pod("debugged", 0, [reservation_toleration()])
    await gateway.create(PODS, body, NS)
    await eventually(gateway, "debugged", lambda p: p["status"].get("phase") == "Running")
    debugger = {"name": "debugger", "image": "busybox:1.36"}
    await gateway.patch(
        PODS,
        "debugged",
        {"spec": {"ephemeralContainers": [debugger]}},
        NS,
        "strategic",
        subresource="ephemeralcontainers",
    )
    pod = await eventually(
        gateway, "debugged", lambda p: bool(p["status"].get("ephemeralContainerStatuses"))
    )
    (status,) = pod["status"]["ephemeralContainerStatuses"]
    assert (status["name"], list(status["state"])) == ("debugger", ["running"])
