"""PATCH flavours and their failure codes (facts §3.1, §3.5; checklist 18–19, 39)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.kube.conftest import pod

CM = "/api/v1/namespaces/{ns}/configmaps"


def _setup(api: httpx.Client, ns: str) -> dict[str, Any]:
    created: dict[str, Any] = api.post(
        CM.format(ns=ns), json={"metadata": {"name": "c"}, "data": {"a": "1"}}
    ).json()
    return created


def _patch(api: httpx.Client, path: str, body: object, content_type: str) -> httpx.Response:
    return api.patch(
        path, content=__import__("json").dumps(body), headers={"Content-Type": content_type}
    )


def test_json_patch_test_failure_is_422(api: httpx.Client, ns: str) -> None:
    """Rule: a failed JSON Patch ``test`` → 422 Invalid (a field-level compare-and-swap)."""
    _setup(api, ns)
    ops = [
        {"op": "test", "path": "/data/a", "value": "2"},
        {"op": "replace", "path": "/data/a", "value": "3"},
    ]
    response = _patch(api, f"{CM.format(ns=ns)}/c", ops, "application/json-patch+json")
    assert response.status_code == 422
    assert response.json()["reason"] == "Invalid"
    assert api.get(f"{CM.format(ns=ns)}/c").json()["data"] == {"a": "1"}


def test_json_patch_on_missing_path_is_422(api: httpx.Client, ns: str) -> None:
    """Rule: an operation that does not apply (missing parent) → 422."""
    _setup(api, ns)
    ops = [{"op": "add", "path": "/metadata/annotations/x", "value": "1"}]
    assert (
        _patch(api, f"{CM.format(ns=ns)}/c", ops, "application/json-patch+json").status_code == 422
    )


def test_patch_with_stale_resource_version_conflicts(api: httpx.Client, ns: str) -> None:
    """Rule: a patch setting metadata.resourceVersion is a precondition → 409 when stale; "
    "without it no conflict."""
    created = _setup(api, ns)
    api.patch(
        f"{CM.format(ns=ns)}/c",
        json={"data": {"b": "2"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    stale = {
        "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
        "data": {"c": "3"},
    }
    response = _patch(api, f"{CM.format(ns=ns)}/c", stale, "application/merge-patch+json")
    assert response.status_code == 409
    assert (
        _patch(
            api, f"{CM.format(ns=ns)}/c", {"data": {"c": "3"}}, "application/merge-patch+json"
        ).status_code
        == 200
    )


def test_merge_patch_null_deletes(api: httpx.Client, ns: str) -> None:
    """Rule: RFC 7386: null deletes a key."""
    _setup(api, ns)
    body = _patch(
        api,
        f"{CM.format(ns=ns)}/c",
        {"data": {"a": None, "b": "2"}},
        "application/merge-patch+json",
    ).json()
    assert body["data"] == {"b": "2"}


def test_charset_suffix_is_ignored(api: httpx.Client, ns: str) -> None:
    """Rule: ``; charset=utf-8`` on the Content-Type is accepted."""
    _setup(api, ns)
    response = _patch(
        api,
        f"{CM.format(ns=ns)}/c",
        {"data": {"b": "2"}},
        "application/merge-patch+json; charset=utf-8",
    )
    assert response.status_code == 200


def test_strategic_merge_replaces_tolerations_and_merges_containers(
    api: httpx.Client, ns: str
) -> None:
    """Rule: strategic merge: tolerations are atomic, containers merge by name."""
    api.post(f"/api/v1/namespaces/{ns}/pods", json=pod())
    patch = {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}
    body = _patch(
        api, f"/api/v1/namespaces/{ns}/pods/p", patch, "application/strategic-merge-patch+json"
    ).json()
    assert body["spec"]["containers"][0]["image"] == "busybox:2"
    assert body["spec"]["containers"][0]["terminationMessagePath"] == "/dev/termination-log"
    existing = body["spec"]["tolerations"]
    added = {"key": "k", "operator": "Exists", "effect": "NoExecute"}
    body = _patch(
        api,
        f"/api/v1/namespaces/{ns}/pods/p",
        {"spec": {"tolerations": [*existing, added]}},
        "application/strategic-merge-patch+json",
    ).json()
    assert body["spec"]["tolerations"] == [*existing, added]


def test_custom_resources_refuse_strategic_merge(api: httpx.Client, ns: str, widgets: str) -> None:
    """Rule: custom resources do not accept strategic merge patch → 415."""
    api.post(
        widgets.format(ns=ns),
        json={
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"size": 1},
        },
    )
    response = _patch(
        api,
        f"{widgets.format(ns=ns)}/w",
        {"spec": {"size": 2}},
        "application/strategic-merge-patch+json",
    )
    assert response.status_code == 415
    assert response.json()["reason"] == "UnsupportedMediaType"


def test_json_patch_with_too_many_operations(api: httpx.Client, ns: str) -> None:
    """Rule: a JSON Patch with more than 10000 operations → 413."""
    _setup(api, ns)
    ops = [{"op": "test", "path": "/data/a", "value": "1"}] * 10001
    assert (
        _patch(api, f"{CM.format(ns=ns)}/c", ops, "application/json-patch+json").status_code == 413
    )


def test_apply_patch_requires_field_manager(api: httpx.Client, ns: str) -> None:
    """Rule: apply-patch+yaml needs ``fieldManager`` (422 without); with it a missing object is "
    "created."""
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied}\ndata: {a: '1'}\n"
    path = f"{CM.format(ns=ns)}/applied"
    headers = {"Content-Type": "application/apply-patch+yaml"}
    assert api.patch(path, content=manifest, headers=headers).status_code == 422
    created = api.patch(path, content=manifest, headers=headers, params={"fieldManager": "me"})
    assert created.status_code == 201


def test_unknown_patch_type_is_415(api: httpx.Client, ns: str) -> None:
    """Rule: an unknown PATCH content type → 415."""
    _setup(api, ns)
    assert _patch(api, f"{CM.format(ns=ns)}/c", {}, "text/plain").status_code == 415
