"""The self reviews (``sandbox.kube.selfreviews``): ``kubectl auth can-i``, ``can-i
--list`` and ``whoami`` answered from the RBAC in the store, with the apiserver's
validation, for JSON and kubectl's protobuf bodies."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox import users
from sandbox.kube import protobuf
from tests.kube.conftest import POD_RULES, Running, grant
from tests.kube.test_kubectl import Kubectl

ACCESS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
RULES = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def access(**attributes: Any) -> dict[str, Any]:
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview"} | {
        "spec": attributes
    }


def allowed(client: httpx.Client, body: dict[str, Any]) -> bool:
    got = client.post(ACCESS, json=body)
    assert got.status_code == 201, got.text
    assert got.json()["kind"] == "SelfSubjectAccessReview"
    verdict: bool = got.json()["status"]["allowed"]
    return verdict


@pytest.fixture
def jane(kube: Running, api: httpx.Client, ns: str) -> Any:
    grant(api, ns, "jane", POD_RULES, {"kind": "User", "name": "jane"})
    with kube.client(kube.server.mint_token("jane", ["devs"])) as client:
        yield client


def test_access_reviews_answer_what_the_authorizer_decides(jane: httpx.Client, ns: str) -> None:
    """Rule: the answer is the authorizer's decision for the caller — verbs, namespaces,
    subresources and resource names as RBAC matches them; the self reviews themselves and
    the discovery paths are every user's; other paths are not."""
    res = {"namespace": ns, "resource": "pods"}
    assert allowed(jane, access(resourceAttributes=res | {"verb": "create"}))
    assert not allowed(jane, access(resourceAttributes=res | {"verb": "delete"}))
    assert not allowed(jane, access(resourceAttributes=res | {"verb": "create", "namespace": "x"}))
    status = res | {"verb": "patch", "subresource": "status"}
    assert allowed(jane, access(resourceAttributes=status | {"name": "p"}))
    assert not allowed(jane, access(resourceAttributes=status | {"name": "q"}))
    review = {"verb": "create", "group": "authorization.k8s.io"}
    assert allowed(
        jane, access(resourceAttributes=review | {"resource": "selfsubjectaccessreviews"})
    )
    assert allowed(jane, access(nonResourceAttributes={"path": "/version", "verb": "get"}))
    assert allowed(jane, access(nonResourceAttributes={"path": "/apis/apps/v1", "verb": "get"}))
    assert not allowed(jane, access(nonResourceAttributes={"path": "/metrics", "verb": "get"}))
    assert not allowed(jane, access(nonResourceAttributes={"path": "/version", "verb": "post"}))


def test_the_administrator_may_do_anything(api: httpx.Client) -> None:
    """Rule: ``system:masters`` is allowed every resource and path, and its rules say so."""
    assert allowed(api, access(resourceAttributes={"verb": "delete", "resource": "nodes"}))
    assert allowed(api, access(nonResourceAttributes={"path": "/metrics", "verb": "get"}))
    got = api.post(RULES, json={"spec": {"namespace": "default"}}).json()["status"]
    assert {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]} in got["resourceRules"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"path": "/"}},
            "spec.nonResourceAttributes: Invalid value: ",
        ),
        ({}, "spec.resourceAttributes: Invalid value: null: exactly one of"),
    ],
)
def test_an_access_review_names_exactly_one_kind_of_attributes(
    jane: httpx.Client, spec: dict[str, Any], message: str
) -> None:
    """Rule: both attribute kinds, or neither, is the apiserver's 422 Invalid."""
    got = jane.post(ACCESS, json=access(**spec))
    assert got.status_code == 422, got.text
    assert got.json()["reason"] == "Invalid"
    assert 'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: ' in got.json()["message"]
    assert message in got.json()["message"]


@pytest.mark.parametrize(
    "body",
    [
        [1, 2],
        {"kind": "Pod", "spec": {"resourceAttributes": {"verb": "get"}}},
        access(resourceAttributes={"verb": 3, "resource": "pods"}),
        access(resourceAttributes=["get", "pods"]),
        access(nonResourceAttributes={"path": "/version", "verb": True}),
        {"spec": "everything"},
    ],
)
def test_a_malformed_review_is_a_400(jane: httpx.Client, body: Any) -> None:
    """Rule: a body that is not a SelfSubjectAccessReview's shape is a 400 naming why."""
    got = jane.post(ACCESS, content=json.dumps(body), headers={"content-type": "application/json"})
    assert got.status_code == 400, got.text
    assert got.json()["reason"] == "BadRequest"


def test_reviews_are_created_not_read(jane: httpx.Client) -> None:
    """Rule: a review is only ever created (no GET, no list)."""
    assert jane.get(ACCESS).status_code == 405
    assert jane.post(ACCESS + "/x", json=access()).status_code == 404


def test_rules_review_lists_the_callers_rules_in_a_namespace(jane: httpx.Client, ns: str) -> None:
    """Rule: the rules review lists every rule bound to the caller there (and the ones
    every user has), split into resource and path rules; another namespace lists none of
    the namespace's."""
    here = jane.post(RULES, json={"spec": {"namespace": ns}}).json()["status"]
    assert {"verbs": ["get", "create"], "apiGroups": [""], "resources": ["pods"]} in here[
        "resourceRules"
    ]
    elsewhere = jane.post(RULES, json={"spec": {"namespace": "kube-system"}}).json()["status"]
    assert all("pods" not in r["resources"] for r in elsewhere["resourceRules"])
    assert any("/version" in r["nonResourceURLs"] for r in elsewhere["nonResourceRules"])
    assert here["incomplete"] is False


def test_whoami_says_who_the_token_is(jane: httpx.Client) -> None:
    """Rule: the SelfSubjectReview names the caller's user and groups."""
    got = jane.post(WHOAMI, json={"apiVersion": "authentication.k8s.io/v1"})
    assert got.status_code == 201, got.text
    info = got.json()["status"]["userInfo"]
    assert info["username"] == "jane"
    assert info["groups"] == ["devs", "system:authenticated"]


def test_discovery_lists_the_review_groups(api: httpx.Client) -> None:
    """Rule: ``/apis`` and the groups' documents list the reviews, create only."""
    names = [g["name"] for g in api.get("/apis").json()["groups"]]
    assert "authorization.k8s.io" in names
    assert "authentication.k8s.io" in names
    listed = api.get("/apis/authorization.k8s.io/v1").json()["resources"]
    assert {r["name"]: r["verbs"] for r in listed} == {
        "selfsubjectaccessreviews": ["create"],
        "selfsubjectrulesreviews": ["create"],
    }
    assert api.get("/apis/authorization.k8s.io").json()["preferredVersion"]["version"] == "v1"


def _field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_kubectls_protobuf_access_review_is_read() -> None:
    """Rule: a protobuf SelfSubjectAccessReview (kubectl's typed client) decodes to the
    JSON shape."""
    attributes = _field(2, b"create") + _field(5, b"pods") + _field(1, b"alice")
    raw = _field(2, _field(1, attributes))
    envelope = _field(
        1, _field(1, b"authorization.k8s.io/v1") + _field(2, b"SelfSubjectAccessReview")
    )
    body = protobuf.MAGIC + envelope + _field(2, raw)
    assert protobuf.decode(body) == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {"verb": "create", "resource": "pods", "namespace": "alice"}
        },
    }


@pytest.mark.kubectl
def test_kubectl_auth_as_a_namespace_editor(kube: Running, tmp_path: Path) -> None:
    """Rule: real ``kubectl auth can-i`` (exit 0 for yes, 1 for no), ``can-i --list`` and
    ``whoami`` work for a namespace editor (a sandbox user)."""
    alice = kube.call(lambda: users.user_kubeconfig(kube.server, "alice", tmp_path / "alice"))
    kubectl = Kubectl(alice)
    assert kubectl("auth", "can-i", "create", "pods", "-n", "alice").strip() == "yes"
    args = ["auth", "can-i", "create", "pods", "--subresource=binding", "-n", "alice"]
    refused = subprocess.run(
        ["kubectl", f"--kubeconfig={alice}", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (refused.returncode, refused.stdout.strip()) == (1, "no"), refused.stderr
    assert "system:authenticated" in kubectl("auth", "whoami")
    assert "pods/eviction" in kubectl("auth", "can-i", "--list", "-n", "alice")
