"""``pods/ephemeralcontainers``: the subresource ``kubectl debug`` writes through — only
``spec.ephemeralContainers`` may change there, append only, each container validated."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox.kube.admission_api import AdmissionAttributes, AdmissionResult
from tests.kube.conftest import Running, pod
from tests.kube.test_kubectl import Kubectl

SMP = {"Content-Type": "application/strategic-merge-patch+json"}
MERGE = {"Content-Type": "application/merge-patch+json"}


def _pods(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


def _debugger(name: str = "debugger", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36", "stdin": True, "tty": True, **fields}


def _add(api: httpx.Client, ns: str, *containers: dict[str, Any]) -> httpx.Response:
    body = {"spec": {"ephemeralContainers": list(containers)}}
    return api.patch(f"{_pods(ns)}/p/ephemeralcontainers", json=body, headers=SMP)


@pytest.fixture
def running_pod(api: httpx.Client, ns: str) -> str:
    assert api.post(_pods(ns), json=pod()).status_code == 201
    return ns


def test_discovery_lists_the_subresource(api: httpx.Client) -> None:
    """Rule: ``pods/ephemeralcontainers`` is served with get, patch and update, kind Pod."""
    resources = api.get("/api/v1").json()["resources"]
    entry = next(r for r in resources if r["name"] == "pods/ephemeralcontainers")
    assert (entry["kind"], sorted(entry["verbs"])) == ("Pod", ["get", "patch", "update"])


def test_get_shows_the_pod(api: httpx.Client, running_pod: str) -> None:
    """Rule: GET of the subresource answers the Pod."""
    shown = api.get(f"{_pods(running_pod)}/p/ephemeralcontainers")
    assert shown.status_code == 200
    assert (shown.json()["kind"], shown.json()["metadata"]["name"]) == ("Pod", "p")


def test_a_patch_adds_a_container_and_nothing_else(api: httpx.Client, running_pod: str) -> None:
    """Rule: the subresource keeps only ``spec.ephemeralContainers`` of the write (a label or
    another spec change in the same patch is dropped); the container gets the defaults."""
    body = {
        "metadata": {"labels": {"sneaky": "yes"}},
        "spec": {"ephemeralContainers": [_debugger()], "activeDeadlineSeconds": 5},
    }
    answer = api.patch(f"{_pods(running_pod)}/p/ephemeralcontainers", json=body, headers=SMP)
    assert answer.status_code == 200, answer.text
    stored = api.get(f"{_pods(running_pod)}/p").json()
    assert "sneaky" not in (stored["metadata"].get("labels") or {})
    assert "activeDeadlineSeconds" not in stored["spec"]
    (added,) = stored["spec"]["ephemeralContainers"]
    assert added["name"] == "debugger"
    assert added["terminationMessagePolicy"] == "File"
    second = _add(api, running_pod, _debugger("second"))
    assert second.status_code == 200
    names = [c["name"] for c in second.json()["spec"]["ephemeralContainers"]]
    assert names == ["debugger", "second"]


def test_existing_containers_may_not_change_or_go(api: httpx.Client, running_pod: str) -> None:
    """Rule: append only — changing or removing an existing ephemeral container is 422."""
    assert _add(api, running_pod, _debugger()).status_code == 200
    url = f"{_pods(running_pod)}/p/ephemeralcontainers"
    changed = api.patch(
        url, json={"spec": {"ephemeralContainers": [_debugger(image="alpine")]}}, headers=MERGE
    )
    assert changed.status_code == 422
    assert (
        'existing ephemeral containers "debugger" may not be changed' in changed.json()["message"]
    )
    removed = api.patch(url, json={"spec": {"ephemeralContainers": None}}, headers=MERGE)
    assert removed.status_code == 422
    assert (
        'existing ephemeral containers "debugger" may not be removed' in removed.json()["message"]
    )


@pytest.mark.parametrize(
    ("container", "cause"),
    [
        (_debugger("c"), 'spec.ephemeralContainers[0].name: Duplicate value: "c"'),
        ({"name": "x"}, "spec.ephemeralContainers[0].image: Required value"),
        ({"name": "Bad_Name", "image": "i"}, "spec.ephemeralContainers[0].name: Invalid value"),
        (
            _debugger(resources={"limits": {"cpu": "1"}}),
            "spec.ephemeralContainers[0].resources: Forbidden: cannot be set for an Ephemeral "
            "Container",
        ),
        (
            _debugger(ports=[{"containerPort": 80}]),
            "spec.ephemeralContainers[0].ports: Forbidden",
        ),
        (
            _debugger(targetContainerName="nope"),
            'spec.ephemeralContainers[0].targetContainerName: Not found: "nope"',
        ),
    ],
)
def test_an_invalid_container_is_refused(
    api: httpx.Client, running_pod: str, container: dict[str, Any], cause: str
) -> None:
    """Rule: a name unique among all the pod's containers, an image, an existing target,
    none of ports/resources/probes/lifecycle → otherwise 422 naming the field."""
    refused = _add(api, running_pod, container)
    assert refused.status_code == 422
    assert cause in refused.json()["message"]


def test_not_through_the_pod_nor_at_create(api: httpx.Client, running_pod: str) -> None:
    """Rule: the main resource cannot add ephemeral containers (a forbidden pod update), and
    a pod cannot be created with them."""
    body = {"spec": {"ephemeralContainers": [_debugger()]}}
    through_pod = api.patch(f"{_pods(running_pod)}/p", json=body, headers=SMP)
    assert through_pod.status_code == 422
    created = api.post(_pods(running_pod), json=pod("q", ephemeralContainers=[_debugger()]))
    assert created.status_code == 422
    assert (
        "spec.ephemeralContainers: Forbidden: cannot be set on create" in created.json()["message"]
    )


def test_rbac_names_the_subresource(kube: Running, api: httpx.Client, running_pod: str) -> None:
    """Rule: writing ephemeral containers needs ``patch`` on ``pods/ephemeralcontainers``;
    ``patch`` on ``pods`` is not enough."""
    role = {
        "metadata": {"name": "pod-patcher"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}],
    }
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{running_pod}"
    assert api.post(f"{rbac}/roles", json=role).status_code == 201
    binding = {
        "metadata": {"name": "pod-patcher"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-patcher"},
        "subjects": [{"kind": "User", "name": "eve"}],
    }
    assert api.post(f"{rbac}/rolebindings", json=binding).status_code == 201
    with kube.client(kube.server.mint_token("eve")) as eve:
        refused = _add(eve, running_pod, _debugger())
    assert refused.status_code == 403
    assert 'cannot patch resource "pods/ephemeralcontainers"' in refused.json()["message"]


@pytest.mark.kubectl
def test_kubectl_debug_adds_a_debug_container(
    kube: Running, api: httpx.Client, running_pod: str, tmp_path: Path
) -> None:
    """Rule: ``kubectl debug <pod> --image=…`` (no attach) works against the emulator: the
    ephemeral container is added through the subresource."""
    config = tmp_path / "kubeconfig"
    config.write_text(kube.server.kubeconfig(), encoding="utf-8")
    kubectl = Kubectl(config)
    name = f"dbg-{uuid.uuid4().hex[:4]}"
    kubectl("debug", "p", "-n", running_pod, "--image=busybox:1.36", f"--container={name}")
    shown = json.loads(kubectl("get", "pod", "p", "-n", running_pod, "-o", "json"))
    assert [c["name"] for c in shown["spec"]["ephemeralContainers"]] == [name]


class _Seen:
    """Admission that records what it is asked."""

    def __init__(self) -> None:
        self.calls: list[AdmissionAttributes] = []

    async def admit(self, attrs: AdmissionAttributes) -> AdmissionResult:
        self.calls.append(attrs)
        return AdmissionResult(attrs.object, [])


def test_a_put_appends_and_admission_sees_the_subresource(
    kube: Running, api: httpx.Client, running_pod: str
) -> None:
    """Rule: PUT of the Pod to the subresource works like a patch (resourceVersion
    checked); mutating admission sees an UPDATE of kind Pod with subresource
    ``ephemeralcontainers``."""
    url = f"{_pods(running_pod)}/p/ephemeralcontainers"
    current = api.get(url).json()
    current["spec"]["ephemeralContainers"] = [_debugger()]
    seen = _Seen()
    kube.server.mutating_admission.append(seen)
    try:
        put = api.put(url, json=current)
    finally:
        kube.server.mutating_admission.remove(seen)
    assert put.status_code == 200, put.text
    assert [c["name"] for c in put.json()["spec"]["ephemeralContainers"]] == ["debugger"]
    (call,) = seen.calls
    assert (call.operation, call.kind, call.subresource) == ("UPDATE", "Pod", "ephemeralcontainers")
    stale = api.put(url, json=current)
    assert stale.status_code == 409
