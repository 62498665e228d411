"""Deployments, ReplicaSets and Jobs run by the emulated kube-controller-manager over
HTTP (``sandbox.cluster.controllers``), with the scheduler and kubelet placing their pods."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sandbox.cluster.workloads import DEPLOYMENTS, JOBS, POD_TEMPLATE_HASH, REPLICASETS, REVISION
from shared import vocab
from shared.errors import NotFound
from shared.gateway import Gateway
from shared.resources import NODES, PODS
from tests.cluster.builders import node
from tests.cluster.running import cluster_gateway

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

NS = "team-w"


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with cluster_gateway(tmp_path, NS) as client:
        await client.create(NODES, node("cpu-1", gpus=0, cpu="64"))
        yield client


async def until(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    """Poll ``check`` until it returns something truthy (a generous liveness bound)."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        found = await check()
        if found:
            return found
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.05)


def template(**annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "web"}, "annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }


def deployment(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": template(),
        },
    }


async def pods_of(gateway: Gateway, selector: str = "app=web") -> list[dict[str, Any]]:
    listed = await gateway.list_all(PODS, NS, label_selector=selector)
    return [p for p in listed.items if not p["metadata"].get("deletionTimestamp")]


async def running(gateway: Gateway, count: int, selector: str = "app=web") -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        pods = await pods_of(gateway, selector)
        phases = [p["status"].get("phase") for p in pods]
        return pods if phases == ["Running"] * count else None

    found: list[dict[str, Any]] = await until(check, f"{count} running pods of {selector}")
    return found


async def test_a_deployment_runs_its_pods_through_a_replicaset(gateway: Gateway) -> None:
    """Rule: the Deployment gets a ReplicaSet ``<deployment>-<pod-template-hash>`` (the
    hash on its labels, selector and template), controlled by the Deployment; its pods are
    ``<rs>-xxxxx``, controlled by the ReplicaSet with blockOwnerDeletion; the status the
    rollout waits for follows."""
    await gateway.create(DEPLOYMENTS, deployment(3), NS)
    pods = await running(gateway, 3)
    (rs,) = (await gateway.list_all(REPLICASETS, NS)).items
    digest = rs["metadata"]["labels"][POD_TEMPLATE_HASH]
    assert rs["metadata"]["name"] == f"web-{digest}"
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", POD_TEMPLATE_HASH: digest}
    (owner,) = rs["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Deployment", "web", True)
    assert rs["metadata"]["annotations"][REVISION] == "1"
    for pod in pods:
        assert pod["metadata"]["name"].startswith(f"web-{digest}-")
        assert pod["metadata"]["generateName"] == f"web-{digest}-"
        (ref,) = pod["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"]) == ("ReplicaSet", rs["metadata"]["uid"])
        assert ref["controller"] is True
        assert ref["blockOwnerDeletion"] is True
        assert pod["metadata"]["labels"][POD_TEMPLATE_HASH] == digest

    async def rolled_out() -> dict[str, Any] | None:
        found = await gateway.get(DEPLOYMENTS, "web", NS)
        status = found.get("status") or {}
        done = (status.get("updatedReplicas"), status.get("availableReplicas")) == (3, 3)
        return found if done and status.get("observedGeneration") == 1 else None

    rolled = await until(rolled_out, "deployment status")
    conditions = {c["type"]: c for c in rolled["status"]["conditions"]}
    assert conditions["Available"]["status"] == "True"
    assert conditions["Progressing"]["reason"] == "NewReplicaSetAvailable"


async def test_scaling_through_the_scale_subresource(gateway: Gateway) -> None:
    """Rule: ``kubectl scale``'s patch of ``/scale`` changes the pods: up creates, down
    deletes (the newest first), to the count."""
    await gateway.create(DEPLOYMENTS, deployment(1), NS)
    await running(gateway, 1)
    await gateway.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 4}}, NS, "merge", "scale")
    await running(gateway, 4)
    await gateway.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 2}}, NS, "merge", "scale")
    await running(gateway, 2)


async def test_a_template_change_rolls_to_a_new_replicaset(gateway: Gateway) -> None:
    """Rule: ``kubectl rollout restart`` (a template annotation) makes a new ReplicaSet
    (revision 2) running every replica; the old one is scaled to 0 and its pods go."""
    await gateway.create(DEPLOYMENTS, deployment(2), NS)
    first = {p["metadata"]["uid"] for p in await running(gateway, 2)}
    restart = {"spec": {"template": {"metadata": {"annotations": {"restartedAt": "now"}}}}}
    await gateway.patch(DEPLOYMENTS, "web", restart, NS, "strategic")

    async def rolled() -> list[dict[str, Any]] | None:
        pods = await pods_of(gateway)
        fresh = [p for p in pods if p["metadata"]["uid"] not in first]
        ok = len(pods) == 2 and len(fresh) == 2
        return pods if ok and all(p["status"].get("phase") == "Running" for p in pods) else None

    await until(rolled, "the new replica set's pods only")
    sets = {
        rs["metadata"]["annotations"][REVISION]: rs
        for rs in (await gateway.list_all(REPLICASETS, NS)).items
    }
    assert (sets["1"]["spec"]["replicas"], sets["2"]["spec"]["replicas"]) == (0, 2)
    shown = await gateway.get(DEPLOYMENTS, "web", NS)
    assert shown["metadata"]["annotations"][REVISION] == "2"


async def test_deleting_a_deployment_collects_its_replicasets_and_pods(gateway: Gateway) -> None:
    """Rule: deleting the owner in the background (the default for apps/v1) removes it at
    once; the garbage collector then deletes its ReplicaSet, whose pods follow (deleted,
    so terminating for their grace period)."""
    await gateway.create(DEPLOYMENTS, deployment(2), NS)
    await running(gateway, 2)
    await gateway.delete(DEPLOYMENTS, "web", NS)

    async def collected() -> bool:
        sets = (await gateway.list_all(REPLICASETS, NS)).items
        return not sets and not await pods_of(gateway)  # running pods terminate gracefully

    assert await until(collected, "replica set and pods collected")


def job(name: str, parallelism: int, completions: int | None, **annotations: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox:1.36"}],
            },
        },
    }
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


async def test_a_job_runs_pods_until_its_completions_succeed(gateway: Gateway) -> None:
    """Rule: pods ``<job>-xxxxx`` are created, at most ``parallelism`` at a time, until
    ``completions`` have Succeeded; then the Job is Complete and no more are created."""
    finishing = {vocab.SANDBOX_RUN_SECONDS: "0"}
    await gateway.create(JOBS, job("count", 1, 3, **finishing), NS)

    async def complete() -> dict[str, Any] | None:
        found = await gateway.get(JOBS, "count", NS)
        conditions = {c["type"] for c in (found.get("status") or {}).get("conditions") or []}
        return found if "Complete" in conditions else None

    done = await until(complete, "job complete")
    assert (done["status"]["succeeded"], done["status"]["active"]) == (3, 0)
    assert done["status"]["completionTime"]
    pods = (await gateway.list_all(PODS, NS, label_selector="job-name=count")).items
    assert len(pods) == 3
    assert all(p["metadata"]["name"].startswith("count-") for p in pods)
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "Job" for p in pods)


async def test_a_job_keeps_parallelism_pods_that_never_finish(gateway: Gateway) -> None:
    """Rule: pods that never finish hold the Job at ``parallelism`` active pods; no more
    are created."""
    await gateway.create(JOBS, job("long", 2, 5), NS)
    await running(gateway, 2, "job-name=long")

    async def counted() -> dict[str, Any] | None:
        found = await gateway.get(JOBS, "long", NS)
        return found if (found.get("status") or {}).get("active") == 2 else None

    await until(counted, "job status active 2")
    assert len(await pods_of(gateway, "job-name=long")) == 2


async def test_deleting_a_job_by_default_orphans_its_pods(gateway: Gateway) -> None:
    """Rule: a batch/v1 Job deleted without a policy goes once the garbage collector has
    removed its ownerReference from every pod; the pods stay, ownerless."""
    await gateway.create(JOBS, job("left", 1, 1), NS)
    await running(gateway, 1, "job-name=left")
    await gateway.delete(JOBS, "left", NS)

    async def gone() -> bool:
        try:
            await gateway.get(JOBS, "left", NS)
        except NotFound:
            return True
        return False

    assert await until(gone, "job removed after orphaning")
    (pod,) = await pods_of(gateway, "job-name=left")
    assert not pod["metadata"].get("ownerReferences")


async def test_a_foreground_delete_waits_for_the_dependents(gateway: Gateway) -> None:
    """Rule: a Deployment deleted in the foreground stays (terminating, finalizer
    ``foregroundDeletion``) until the collector has deleted its ReplicaSet, then goes."""
    await gateway.create(DEPLOYMENTS, deployment(1), NS)
    await running(gateway, 1)
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"}
    await gateway.request("DELETE", DEPLOYMENTS.path(NS, "web"), None, body)

    async def gone() -> bool:
        try:
            await gateway.get(DEPLOYMENTS, "web", NS)
        except NotFound:
            return not (await gateway.list_all(REPLICASETS, NS)).items
        return False

    assert await until(gone, "deployment and its replica set gone")


async def test_pods_of_an_unknown_owner_kind_are_left_alone(gateway: Gateway) -> None:
    """Rule: the collector resolves Deployments, ReplicaSets and Jobs only; a pod owned by
    a kind the emulator does not serve keeps running."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "stateful-0",
            "labels": {"app": "db"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "gone"}
            ],
        },
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }
    await gateway.create(PODS, pod, NS)
    await running(gateway, 1, "app=db")
    await gateway.create(DEPLOYMENTS, deployment(1), NS)  # a pass of the collector runs
    await running(gateway, 1)
    assert [p["metadata"]["name"] for p in await pods_of(gateway, "app=db")] == ["stateful-0"]


async def test_a_job_whose_pods_the_kubelet_refuses_fails_past_its_backoff_limit(
    gateway: Gateway,
) -> None:
    """Rule: each pod the kubelet refuses (here pinned by nodeName to a node without the
    cpu it asks) is Failed and counts against ``backoffLimit``; past it the Job is Failed
    with ``BackoffLimitExceeded`` and makes no more pods."""
    body = job("doomed", 1, 1)
    body["spec"]["backoffLimit"] = 1
    pod_spec = body["spec"]["template"]["spec"]
    pod_spec["nodeName"] = "cpu-1"
    pod_spec["containers"][0]["resources"] = {"requests": {"cpu": "100"}}
    await gateway.create(JOBS, body, NS)

    async def failed() -> dict[str, Any] | None:
        found = await gateway.get(JOBS, "doomed", NS)
        conditions = {c["type"]: c for c in (found.get("status") or {}).get("conditions") or []}
        return found if "Failed" in conditions else None

    done = await until(failed, "job failed")
    reasons = {c["type"]: c["reason"] for c in done["status"]["conditions"]}
    assert reasons["Failed"] == "BackoffLimitExceeded"
    assert done["status"]["failed"] == 2
    pods = (await gateway.list_all(PODS, NS, label_selector="job-name=doomed")).items
    assert len(pods) == 2
    assert {p["status"]["reason"] for p in pods} == {"OutOfcpu"}
