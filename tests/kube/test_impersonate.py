"""Impersonation (``sandbox.kube.impersonate``): ``kubectl --as`` acts as another user
only for a caller allowed to impersonate them, and then with exactly their rights."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from sandbox import users
from tests.kube.conftest import Running, grant
from tests.kube.test_kubectl import Kubectl

WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def who(client: httpx.Client, **headers: str) -> dict[str, object]:
    got = client.post(WHOAMI, json={}, headers=headers)
    assert got.status_code == 201, got.text
    info: dict[str, object] = got.json()["status"]["userInfo"]
    return info


def test_the_administrator_acts_as_a_user_with_the_users_rights(api: httpx.Client, ns: str) -> None:
    """Rule: an impersonated request runs as the user named — their groups plus
    ``system:authenticated``, their RBAC — not as the caller."""
    grant(
        api,
        ns,
        "reader",
        [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        {"kind": "User", "name": "jane"},
    )
    as_jane = {"Impersonate-User": "jane", "Impersonate-Group": "devs"}
    assert who(api, **as_jane) == {"username": "jane", "groups": ["devs", "system:authenticated"]}
    assert api.get(f"/api/v1/namespaces/{ns}/pods", headers=as_jane).status_code == 200
    refused = api.get("/api/v1/nodes", headers=as_jane)
    assert refused.status_code == 403
    assert 'User "jane" cannot list resource "nodes"' in refused.json()["message"]


def test_a_service_account_gets_its_fixed_groups(api: httpx.Client) -> None:
    """Rule: a service account asked for without groups is in its namespace's groups."""
    info = who(api, **{"Impersonate-User": "system:serviceaccount:ops:bot"})
    assert info["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:ops",
        "system:authenticated",
    ]
    unauthenticated = {"Impersonate-User": "x", "Impersonate-Group": "system:unauthenticated"}
    assert who(api, **unauthenticated)["groups"] == ["system:unauthenticated"]


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (
            {"Impersonate-User": "alice"},
            'users "alice" is forbidden: User "carol" cannot impersonate resource "users" '
            'in API group "" at the cluster scope',
        ),
        (
            {"Impersonate-User": "system:serviceaccount:ops:bot"},
            'serviceaccounts "bot" is forbidden: User "carol" cannot impersonate resource '
            '"serviceaccounts" in API group "" in the namespace "ops"',
        ),
    ],
)
def test_impersonating_without_the_right_is_forbidden(
    kube: Running, headers: dict[str, str], message: str
) -> None:
    """Rule: the user or service account asked for needs ``impersonate`` on it (acting
    as oneself too); the refusal is the 403, and nothing runs."""
    with kube.client(kube.server.mint_token("carol")) as carol:
        got = carol.post(WHOAMI, json={}, headers=headers)
    assert got.status_code == 403
    assert got.json()["message"] == message


def test_a_granted_impersonation_is_allowed(kube: Running, api: httpx.Client) -> None:
    """Rule: a ClusterRole with ``impersonate`` on a user's name lets its holder act as
    that user, and no one else; each group asked for needs the right too."""
    rules = [
        {
            "apiGroups": [""],
            "resources": ["users"],
            "verbs": ["impersonate"],
            "resourceNames": ["alice"],
        }
    ]
    grant(api, "", "as-alice", rules, {"kind": "User", "name": "helpdesk"})
    with kube.client(kube.server.mint_token("helpdesk")) as helpdesk:
        assert who(helpdesk, **{"Impersonate-User": "alice"})["username"] == "alice"
        other = helpdesk.post(WHOAMI, json={}, headers={"Impersonate-User": "bob"})
        masters = {"Impersonate-User": "alice", "Impersonate-Group": "system:masters"}
        escalated = helpdesk.get("/api/v1/nodes", headers=masters)
    assert other.status_code == 403
    assert escalated.status_code == 403
    assert escalated.json()["message"] == (
        'groups "system:masters" is forbidden: User "helpdesk" cannot impersonate resource '
        '"groups" in API group "" at the cluster scope'
    )


@pytest.mark.parametrize(
    "headers",
    [{"Impersonate-Group": "devs"}, {"Impersonate-Uid": "1"}, {"Impersonate-Extra-x": "y"}],
)
def test_impersonating_without_a_user_is_refused(
    api: httpx.Client, headers: dict[str, str]
) -> None:
    """Rule: groups, a uid or extras without ``Impersonate-User`` is the apiserver's 500."""
    got = api.get("/api/v1/nodes", headers=headers)
    assert got.status_code == 500
    assert "without impersonating a user" in got.json()["message"]


@pytest.mark.kubectl
def test_kubectl_as_a_service_account(kube: Running, tmp_path: Path) -> None:
    """Rule: ``kubectl --as`` works for the administrator and is refused to a user."""
    config = tmp_path / "admin"
    config.write_text(kube.server.kubeconfig(), encoding="utf-8")
    admin = Kubectl(config)
    sa = "--as=system:serviceaccount:default:nobody"
    assert "system:serviceaccounts:default" in admin("auth", "whoami", sa)
    assert admin("auth", "can-i", "list", "pods", "-n", "default", sa, check=False).strip() == "no"
    alice = kube.call(lambda: users.user_kubeconfig(kube.server, "alice", tmp_path / "alice"))
    refused = Kubectl(alice)("get", "pods", "-n", "alice", "--as=bob", check=False)
    assert 'User "alice" cannot impersonate resource "users"' in refused
