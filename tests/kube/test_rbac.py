"""Authentication and RBAC (403 Status in the real message format)."""

from __future__ import annotations

import httpx

from tests.kube.conftest import POD_RULES, Running, grant, pod


def test_missing_or_bad_token_is_401(kube: Running) -> None:
    """Rule: requests without valid credentials are Unauthorized."""
    with httpx.Client(base_url=kube.server.url) as anonymous:
        assert anonymous.get("/api/v1/nodes").status_code == 401
    with kube.client("nonsense") as wrong:
        assert wrong.get("/api/v1/nodes").status_code == 401


def test_forbidden_message_format(kube: Running, ns: str) -> None:
    """Rule: a denied request gets 403 with ``... is forbidden: User "u" cannot <verb> resource "
    "...``."""
    with kube.client(kube.server.mint_token("jane", ["devs"])) as jane:
        response = jane.get(f"/api/v1/namespaces/{ns}/pods/x")
        listing = jane.get("/api/v1/nodes")
    assert response.status_code == 403
    assert response.json()["message"] == (
        'pods "x" is forbidden: User "jane" cannot get resource "pods" in API group "" in the '
        f'namespace "{ns}"'
    )
    assert response.json()["reason"] == "Forbidden"
    assert listing.json()["message"] == (
        'nodes is forbidden: User "jane" cannot list resource "nodes" in API group "" at the '
        "cluster scope"
    )


def test_service_account_role_binding_subresources_and_names(
    kube: Running, api: httpx.Client, ns: str
) -> None:
    """Rule: rules match verbs, resources with subresources and resourceNames; SA subjects match "
    "SA tokens."""
    grant(api, ns, "bot", POD_RULES, {"kind": "ServiceAccount", "name": "bot", "namespace": ns})
    api.post(f"/api/v1/namespaces/{ns}/pods", json=pod("q"))
    merge = {"Content-Type": "application/merge-patch+json"}
    with kube.client(kube.server.service_account_token(ns, "bot")) as bot:
        assert bot.post(f"/api/v1/namespaces/{ns}/pods", json=pod()).status_code == 201
        assert bot.get(f"/api/v1/namespaces/{ns}/pods/p").status_code == 200
        assert (
            bot.patch(
                f"/api/v1/namespaces/{ns}/pods/p/status", json={"status": {}}, headers=merge
            ).status_code
            == 200
        )
        denied = bot.patch(
            f"/api/v1/namespaces/{ns}/pods/q/status", json={"status": {}}, headers=merge
        )
        assert denied.status_code == 403
        assert 'cannot patch resource "pods/status"' in denied.json()["message"]
        assert (
            bot.patch(f"/api/v1/namespaces/{ns}/pods/p", json={}, headers=merge).status_code == 403
        )
        assert bot.get(f"/api/v1/namespaces/{ns}/pods").status_code == 403
        assert bot.get("/api/v1/namespaces/alice/pods/p").status_code == 403


def test_cluster_role_binding_to_group(kube: Running, api: httpx.Client) -> None:
    """Rule: a ClusterRoleBinding to a group grants cluster-wide."""
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]
    grant(api, "", "node-reader", rules, {"kind": "Group", "name": "readers"})
    with kube.client(kube.server.mint_token("rita", ["readers"])) as rita:
        assert rita.get("/api/v1/nodes").status_code == 200
        assert rita.get("/api/v1/nodes/n1").status_code == 403
