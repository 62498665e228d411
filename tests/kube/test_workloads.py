"""apps/v1 Deployments and ReplicaSets, batch/v1 Jobs as the apiserver serves them:
defaults, validation, the Scale subresource, strategic merge on the template, and
deletion propagation (the controllers: tests/cluster/test_workload_controllers.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox.kube.deletes import JOB_ORPHAN_WARNING
from tests.kube.conftest import Running
from tests.kube.test_kubectl import Kubectl

APPS = "/apis/apps/v1/namespaces/{ns}"
BATCH = "/apis/batch/v1/namespaces/{ns}"
SMP = {"Content-Type": "application/strategic-merge-patch+json"}
MERGE = {"Content-Type": "application/merge-patch+json"}


def template(restart: str = "Always", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels or {"app": "web"}},
        "spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "busybox:1.36"}]},
    }


def deployment(name: str = "web", replicas: int | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template(), **spec},
    }
    if replicas is not None:
        body["spec"]["replicas"] = replicas
    return body


def job(name: str = "batch", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": template("Never"), **spec},
    }


def test_discovery_serves_the_three_kinds(api: httpx.Client) -> None:
    """Rule: apps/v1 lists deployments and replicasets with status and scale (Scale of
    autoscaling/v1, what kubectl scale's client resolves); batch/v1 lists jobs."""
    apps = {r["name"]: r for r in api.get("/apis/apps/v1").json()["resources"]}
    assert {"deployments", "deployments/scale", "deployments/status", "replicasets"} <= set(apps)
    scale = apps["replicasets/scale"]
    assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")
    assert apps["deployments"]["shortNames"] == ["deploy"]
    batch = {r["name"] for r in api.get("/apis/batch/v1").json()["resources"]}
    assert {"jobs", "jobs/status"} <= batch


def test_a_deployment_is_defaulted(api: httpx.Client, ns: str) -> None:
    """Rule: replicas 1, RollingUpdate 25 %/25 %, revision history 10, progress deadline 600,
    generation 1, the template's pod spec defaulted as a pod's."""
    made = api.post(f"{APPS.format(ns=ns)}/deployments", json=deployment())
    assert made.status_code == 201, made.text
    spec = made.json()["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }
    assert (spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"]) == (10, 600)
    assert spec["template"]["spec"]["dnsPolicy"] == "ClusterFirst"
    assert made.json()["metadata"]["generation"] == 1


@pytest.mark.parametrize(
    ("change", "cause"),
    [
        ({"selector": None}, "spec.selector: Required value"),
        (
            {"selector": {"matchLabels": {"app": "other"}}},
            "spec.template.metadata.labels: Invalid value",
        ),
        ({"replicas": -1}, "spec.replicas: Invalid value: -1"),
        (
            {"template": template("Never")},
            'spec.template.spec.restartPolicy: Unsupported value: "Never"',
        ),
        (
            {"template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}},
            "spec.template.spec.containers: Required value",
        ),
    ],
)
def test_an_invalid_deployment_is_422(
    api: httpx.Client, ns: str, change: dict[str, Any], cause: str
) -> None:
    """Rule: selector required and matching the template, replicas ≥ 0, restartPolicy
    Always, the template's pod spec valid."""
    body = deployment()
    body["spec"].update(change)
    refused = api.post(f"{APPS.format(ns=ns)}/deployments", json=body)
    assert refused.status_code == 422
    assert cause in refused.json()["message"]


def test_the_selector_is_immutable(api: httpx.Client, ns: str) -> None:
    """Rule: spec.selector of a Deployment cannot change."""
    api.post(f"{APPS.format(ns=ns)}/deployments", json=deployment())
    change = {"spec": {"selector": {"matchLabels": {"app": "web", "x": "y"}}}}
    refused = api.patch(f"{APPS.format(ns=ns)}/deployments/web", json=change, headers=MERGE)
    assert refused.status_code == 422
    assert "spec.selector: Invalid value" in refused.json()["message"]


def test_a_template_patch_merges_containers_by_name(api: httpx.Client, ns: str) -> None:
    """Rule: strategic merge on ``spec.template.spec.containers`` merges by name (what
    ``kubectl set image`` and ``rollout restart``'s annotation patch rely on) and bumps the
    generation."""
    api.post(f"{APPS.format(ns=ns)}/deployments", json=deployment())
    patch = {
        "spec": {
            "template": {
                "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]},
            }
        }
    }
    answer = api.patch(f"{APPS.format(ns=ns)}/deployments/web", json=patch, headers=SMP)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    (container,) = body["spec"]["template"]["spec"]["containers"]
    assert (container["name"], container["image"]) == ("c", "busybox:1.37")
    assert container["terminationMessagePolicy"] == "File"
    assert body["metadata"]["generation"] == 2


def test_the_scale_subresource(api: httpx.Client, ns: str) -> None:
    """Rule: GET ``/scale`` is an autoscaling/v1 Scale (spec.replicas, status.replicas,
    status.selector as a string); a merge patch or a PUT changes spec.replicas only; a
    negative count is 422; a stale resourceVersion 409."""
    base = f"{APPS.format(ns=ns)}/deployments/web"
    api.post(f"{APPS.format(ns=ns)}/deployments", json=deployment(replicas=2))
    scale = api.get(f"{base}/scale").json()
    assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"]["selector"] == "app=web"
    patched = api.patch(f"{base}/scale", json={"spec": {"replicas": 5}}, headers=MERGE)
    assert (patched.status_code, patched.json()["spec"]["replicas"]) == (200, 5)
    assert api.get(base).json()["spec"]["replicas"] == 5
    put = dict(patched.json(), spec={"replicas": 0})
    assert api.put(f"{base}/scale", json=put).json()["spec"]["replicas"] == 0
    negative = api.patch(f"{base}/scale", json={"spec": {"replicas": -1}}, headers=MERGE)
    assert negative.status_code == 422
    stale = api.put(f"{base}/scale", json=put)
    assert stale.status_code == 409


def test_a_job_gets_its_selector_and_labels(api: httpx.Client, ns: str) -> None:
    """Rule: completions and parallelism 1, backoffLimit 6; the selector is generated from
    the uid and the template carries the four controller labels."""
    made = api.post(f"{BATCH.format(ns=ns)}/jobs", json=job())
    assert made.status_code == 201, made.text
    body = made.json()
    uid, spec = body["metadata"]["uid"], body["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    labels = spec["template"]["metadata"]["labels"]
    assert labels["batch.kubernetes.io/job-name"] == labels["job-name"] == "batch"
    assert labels["controller-uid"] == uid


def test_a_job_refuses_restart_always_and_template_changes(api: httpx.Client, ns: str) -> None:
    """Rule: a Job's pods restart Never or OnFailure; its template is immutable."""
    always = job("always")
    always["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    refused = api.post(f"{BATCH.format(ns=ns)}/jobs", json=always)
    assert refused.status_code == 422
    assert 'restartPolicy: Unsupported value: "Always"' in refused.json()["message"]
    api.post(f"{BATCH.format(ns=ns)}/jobs", json=job())
    change = {"spec": {"template": {"spec": {"activeDeadlineSeconds": 5}}}}
    changed = api.patch(f"{BATCH.format(ns=ns)}/jobs/batch", json=change, headers=SMP)
    assert changed.status_code == 422
    assert "spec.template: Invalid value" in changed.json()["message"]


def test_deleting_a_job_orphans_by_default_with_a_warning(api: httpx.Client, ns: str) -> None:
    """Rule: a batch/v1 Job deleted without a propagation policy orphans its pods: the
    ``orphan`` finalizer (the garbage collector removes it) and the apiserver's warning."""
    api.post(f"{BATCH.format(ns=ns)}/jobs", json=job())
    gone = api.delete(f"{BATCH.format(ns=ns)}/jobs/batch")
    assert gone.status_code == 200
    assert gone.headers.get_list("warning") == [f'299 - "{JOB_ORPHAN_WARNING}"']
    kept = api.get(f"{BATCH.format(ns=ns)}/jobs/batch").json()
    assert kept["metadata"]["finalizers"] == ["orphan"]
    assert kept["metadata"]["deletionTimestamp"]


@pytest.mark.parametrize(
    ("policy", "finalizers"),
    [("Background", None), ("Foreground", ["foregroundDeletion"]), ("Orphan", ["orphan"])],
)
def test_propagation_policies(
    api: httpx.Client, ns: str, policy: str, finalizers: list[str] | None
) -> None:
    """Rule: Background removes the object now; Foreground and Orphan keep it, terminating,
    with the finalizer the garbage collector acts on."""
    api.post(f"{APPS.format(ns=ns)}/deployments", json=deployment())
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy}
    gone = api.request("DELETE", f"{APPS.format(ns=ns)}/deployments/web", json=body)
    assert gone.status_code == 200
    assert not gone.headers.get_list("warning")
    after = api.get(f"{APPS.format(ns=ns)}/deployments/web")
    if finalizers is None:
        assert after.status_code == 404
    else:
        assert after.json()["metadata"]["finalizers"] == finalizers


def test_an_unknown_propagation_policy_is_422(api: httpx.Client, ns: str) -> None:
    api.post(f"{APPS.format(ns=ns)}/deployments", json=deployment())
    refused = api.delete(
        f"{APPS.format(ns=ns)}/deployments/web", params={"propagationPolicy": "Sometimes"}
    )
    assert refused.status_code == 422
    assert "propagationPolicy: Unsupported value" in refused.json()["message"]


@pytest.mark.kubectl
def test_kubectl_creates_scales_and_restarts_a_deployment(
    kube: Running, api: httpx.Client, ns: str, tmp_path: Path
) -> None:
    """Rule: real kubectl's ``create -f`` of a Deployment and a Job, ``scale`` (the Scale
    subresource, found through discovery), ``rollout restart`` (a strategic merge of a
    template annotation), ``get`` and ``delete`` work against the emulator."""
    config = tmp_path / "kubeconfig"
    config.write_text(kube.server.kubeconfig(), encoding="utf-8")
    kubectl = Kubectl(config)
    kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(deployment()))
    assert "scaled" in kubectl("scale", "deployment/web", "--replicas=3", "-n", ns)
    assert "restarted" in kubectl("rollout", "restart", "deployment/web", "-n", ns)
    shown = api.get(f"{APPS.format(ns=ns)}/deployments/web").json()
    assert shown["spec"]["replicas"] == 3
    annotations = shown["spec"]["template"]["metadata"]["annotations"]
    assert "kubectl.kubernetes.io/restartedAt" in annotations
    kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(job("once")))
    assert api.get(f"{BATCH.format(ns=ns)}/jobs/once").status_code == 200
    assert "web" in kubectl("get", "deployments", "-n", ns)
    assert "deleted" in kubectl("delete", "deployment", "web", "-n", ns)


def test_tables_show_what_kubectl_get_shows(api: httpx.Client, ns: str) -> None:
    """Rule: ``kubectl get deployments|replicasets|jobs`` columns: Ready x/y, Up-to-date,
    Available; Desired, Current, Ready; Status, Completions."""
    table = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    api.post(f"{APPS.format(ns=ns)}/deployments", json=deployment(replicas=2))
    api.post(f"{BATCH.format(ns=ns)}/jobs", json=job())
    shown = api.get(f"{APPS.format(ns=ns)}/deployments", headers=table).json()
    names = [c["name"] for c in shown["columnDefinitions"]]
    assert names == ["Name", "Ready", "Up-to-date", "Available", "Age"]
    assert shown["rows"][0]["cells"][:4] == ["web", "0/2", 0, 0]
    jobs = api.get(f"{BATCH.format(ns=ns)}/jobs", headers=table).json()
    assert [c["name"] for c in jobs["columnDefinitions"]][:3] == ["Name", "Status", "Completions"]
    assert jobs["rows"][0]["cells"][:3] == ["batch", "Running", "0/1"]
