"""Sandbox users (``sandbox.users``): a kubeconfig per user whose token is theirs, with a
namespace editor's rights in their own namespace and nothing a user must not have."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sandbox import users
from sandbox.kube.component import KubeComponent
from sandbox.runner import SandboxContext, next_steps, write_users
from sandbox.scenario import load_scenario
from shared import vocab
from tests.kube.conftest import Running, pod
from tests.kube.test_kubectl import CRD, Kubectl

GPURES = f"/apis/{vocab.CRD_GROUP}/{vocab.CRD_VERSION}"


def _token(path: Path) -> str:
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    token: str = config["users"][0]["user"]["token"]
    return token


@pytest.fixture(scope="module")
def alice(kube: Running, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("users") / "alice.kubeconfig"
    admin = kube.client()
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    made = admin.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
    assert made.status_code in (201, 409)
    for _ in range(100):
        if admin.get(f"{GPURES}/namespaces/alice/{vocab.CRD_PLURAL}").status_code == 200:
            break
    admin.close()
    written = kube.call(lambda: users.user_kubeconfig(kube.server, "alice", path))
    assert written == path
    return path


@pytest.fixture
def as_alice(kube: Running, alice: Path) -> Any:
    with kube.client(_token(alice)) as client:
        yield client


def test_the_kubeconfig_is_alices_own(alice: Path) -> None:
    """Rule: the file is private, names alice and her namespace, and carries no admin token."""
    config = yaml.safe_load(alice.read_text(encoding="utf-8"))
    assert alice.stat().st_mode & 0o777 == 0o600
    context = config["contexts"][0]["context"]
    assert (context["user"], context["namespace"]) == ("alice", "alice")


def test_alice_edits_her_namespace(as_alice: httpx.Client) -> None:
    """Rule: a namespace editor creates, patches, lists and deletes pods, writes
    ConfigMaps and Secrets, and reads Events there."""
    base = "/api/v1/namespaces/alice"
    assert as_alice.post(f"{base}/pods", json=pod("mine")).status_code == 201
    assert as_alice.get(f"{base}/pods").status_code == 200
    patched = as_alice.patch(
        f"{base}/pods/mine",
        json={"metadata": {"labels": {"x": "1"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert patched.status_code == 200
    assert as_alice.post(f"{base}/configmaps", json={"metadata": {"name": "c"}}).status_code == 201
    assert as_alice.get(f"{base}/events").status_code == 200
    assert as_alice.get(f"{base}/pods/mine/status").status_code == 200
    assert as_alice.delete(f"{base}/pods/mine").status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/v1/namespaces/default/pods", pod("elsewhere")),
        ("PATCH", "/api/v1/namespaces/alice/pods/held/status", {"status": {"phase": "Running"}}),
        ("POST", "/api/v1/namespaces/alice/pods/held/binding", {"target": {"name": "n1"}}),
        ("GET", "/api/v1/nodes", None),
        ("PATCH", "/api/v1/nodes/n1", {"metadata": {"labels": {"x": "1"}}}),
        ("POST", f"{GPURES}/namespaces/alice/{vocab.CRD_PLURAL}", {"metadata": {"name": "r"}}),
        ("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/alice/rolebindings", {}),
    ],
)
def test_what_alice_may_not_do_is_403(
    kube: Running,
    as_alice: httpx.Client,
    method: str,
    path: str,
    body: dict[str, Any] | None,
) -> None:
    """Rule: other namespaces, pods/status, pods/binding, nodes, GPUReservation writes and
    RBAC are refused with the real 403 naming alice."""
    with kube.client() as admin:
        admin.post("/api/v1/namespaces/alice/pods", json=pod("held"))
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
    answer = as_alice.request(
        method, path, content=json.dumps(body) if body is not None else None, headers=headers
    )
    assert answer.status_code == 403, answer.text
    assert 'User "alice" cannot' in answer.json()["message"]


def test_the_grant_is_idempotent_and_needs_the_namespace(kube: Running, tmp_path: Path) -> None:
    """Rule: writing a kubeconfig again keeps one RoleBinding; a user with no namespace is
    refused by name."""
    kube.call(lambda: users.user_kubeconfig(kube.server, "alice", tmp_path / "again"))
    bindings = kube.call(
        lambda: kube.server.store.list("rbac.authorization.k8s.io", "rolebindings", "alice")
    )
    assert [b["metadata"]["name"] for b in bindings] == ["edit"]
    with pytest.raises(LookupError, match="mallory"):
        kube.call(lambda: users.user_kubeconfig(kube.server, "mallory", tmp_path / "m"))


@pytest.mark.kubectl
def test_kubectl_as_alice(alice: Path) -> None:
    """Rule: real kubectl with alice's kubeconfig works in her namespace and is refused
    elsewhere."""
    kubectl = Kubectl(alice)
    assert "pod/k created" in kubectl("run", "k", "--image=busybox:1.36")
    refused = kubectl("get", "nodes", check=False)
    assert 'User "alice" cannot list resource "nodes"' in refused


def test_sandbox_up_writes_every_users_kubeconfig(tmp_path: Path) -> None:
    """Rule: ``up`` (``runner.write_users``, after the components started) writes
    ``<state-dir>/users/<name>.kubeconfig`` for each user of the scenario (its namespaces
    less system and controller ones), each token authenticating as that user with an
    editor's rights in their namespace only, and prints where; a sandbox started
    in-process grants users nothing by itself."""
    scenario = load_scenario()
    ctx = SandboxContext(state_dir=tmp_path, scenario=scenario)

    async def run() -> tuple[list[int], list[Path]]:
        component = KubeComponent()
        await component.start(ctx)
        try:
            before = list(
                ctx.handles["kube"].store.list("rbac.authorization.k8s.io", "rolebindings")
            )
            assert before == []
            written = write_users(ctx)
            codes = []
            async with httpx.AsyncClient(base_url=ctx.endpoints["kube"]) as client:
                for user in ("alice", "carol"):
                    token = _token(tmp_path / "users" / f"{user}.kubeconfig")
                    headers = {"Authorization": f"Bearer {token}"}
                    own = await client.get(f"/api/v1/namespaces/{user}/pods", headers=headers)
                    other = await client.get("/api/v1/namespaces/bob/pods", headers=headers)
                    codes += [own.status_code, other.status_code]
            return codes, written
        finally:
            await component.stop()

    codes, written = asyncio.run(run())
    assert codes == [200, 403, 200, 403]
    expected = [tmp_path / "users" / f"{u}.kubeconfig" for u in ("alice", "bob", "carol", "dave")]
    assert written == expected
    assert sorted((tmp_path / "users").iterdir()) == expected
    assert str(expected[0].resolve()) in next_steps(ctx)
