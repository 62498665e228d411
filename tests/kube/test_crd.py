"""CRDs and custom objects (facts §3.6, §8; checklist 20–22, 33)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.kube.conftest import crd

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def _widget(name: str = "w", **spec: object) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": 1, **spec},
    }


def test_unknown_fields_are_pruned_with_a_warning(api: httpx.Client, ns: str, widgets: str) -> None:
    """Rule: undeclared fields are dropped with a ``Warning: 299 - "unknown field \\"<path>\\""``
    header (quotes escaped as in any Warning header); preserve-unknown-fields keeps them;
    defaults apply."""
    response = api.post(widgets.format(ns=ns), json=_widget(extra=1, free={"any": {"thing": 1}}))
    assert response.status_code == 201
    spec = response.json()["spec"]
    assert "extra" not in spec
    assert spec["free"] == {"any": {"thing": 1}}
    assert spec["color"] == "red"
    assert response.headers.get_list("warning") == ['299 - "unknown field \\"spec.extra\\""']


def test_strict_field_validation_refuses_unknown_fields(
    api: httpx.Client, ns: str, widgets: str
) -> None:
    """Rule: fieldValidation=Strict turns an unknown field into an error."""
    response = api.post(
        widgets.format(ns=ns), json=_widget(extra=1), params={"fieldValidation": "Strict"}
    )
    assert response.status_code == 400
    assert 'unknown field "spec.extra"' in response.json()["message"]


def test_schema_violations_are_422_with_causes(api: httpx.Client, ns: str, widgets: str) -> None:
    """Rule: type, enum, minimum and required violations → 422 with one cause per field."""
    body = _widget(size="big", color="green")
    response = api.post(widgets.format(ns=ns), json=body)
    assert response.status_code == 422
    status = response.json()
    assert status["message"].startswith('Widget.example.com "w" is invalid: [')
    fields = {c["field"] for c in status["details"]["causes"]}
    assert fields == {"spec.size", "spec.color"}
    assert status["details"]["group"] == "example.com"
    assert status["details"]["kind"] == "Widget"
    missing = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "m"},
        "spec": {},
    }
    assert api.post(widgets.format(ns=ns), json=missing).status_code == 422


def test_status_only_through_the_subresource(api: httpx.Client, ns: str, widgets: str) -> None:
    """Rule: status is dropped at create and kept on main writes; /status writes only status."""
    created = api.post(widgets.format(ns=ns), json={**_widget(), "status": {"used": 5}}).json()
    assert "status" not in created
    path = f"{widgets.format(ns=ns)}/w"
    merge = {"Content-Type": "application/merge-patch+json"}
    main = api.patch(path, json={"status": {"used": 1}}, headers=merge).json()
    assert "status" not in main
    status = api.patch(
        f"{path}/status", json={"status": {"used": 2}, "spec": {"size": 9}}, headers=merge
    ).json()
    assert status["status"] == {"used": 2}
    assert status["spec"]["size"] == 1
    assert status["metadata"]["generation"] == 1


def test_generation_counts_spec_changes(api: httpx.Client, ns: str, widgets: str) -> None:
    """Rule: generation starts at 1, ignores client values and metadata/status changes, bumps on "
    "spec."""
    body = _widget()
    body["metadata"]["generation"] = 7
    assert api.post(widgets.format(ns=ns), json=body).json()["metadata"]["generation"] == 1
    path = f"{widgets.format(ns=ns)}/w"
    merge = {"Content-Type": "application/merge-patch+json"}
    assert (
        api.patch(path, json={"metadata": {"labels": {"a": "b"}}}, headers=merge).json()[
            "metadata"
        ]["generation"]
        == 1
    )
    assert (
        api.patch(path, json={"spec": {"size": 3}}, headers=merge).json()["metadata"]["generation"]
        == 2
    )


def test_custom_object_put_needs_resource_version(api: httpx.Client, ns: str, widgets: str) -> None:
    """Rule: PUT of a custom object without resourceVersion → 422 on metadata.resourceVersion;
    to /status too."""
    api.post(widgets.format(ns=ns), json=_widget())
    path = f"{widgets.format(ns=ns)}/w"
    response = api.put(path, json=_widget(size=2))
    assert response.status_code == 422
    assert response.json()["message"].startswith('Widget.example.com "w" is invalid: ')
    assert response.json()["details"]["causes"][0]["field"] == "metadata.resourceVersion"
    assert api.put(f"{path}/status", json={**_widget(), "status": {"used": 1}}).status_code == 422


def test_status_put_replaces_status_with_conflict_rule(
    api: httpx.Client, ns: str, widgets: str
) -> None:
    """Rule: a PUT to /status with a stale resourceVersion → 409; one without a ``status`` key
    removes the status; spec changes sent there are discarded."""
    created = api.post(widgets.format(ns=ns), json=_widget()).json()
    path = f"{widgets.format(ns=ns)}/w"
    first = {**created, "status": {"used": 2}}
    written = api.put(f"{path}/status", json=first)
    assert written.status_code == 200
    assert written.json()["status"] == {"used": 2}
    stale = api.put(f"{path}/status", json={**created, "status": {"used": 3}})
    assert stale.status_code == 409
    assert stale.json()["message"] == (
        'Operation cannot be fulfilled on widgets.example.com "w": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    current = written.json()
    current.pop("status")
    current["spec"] = {"size": 7}
    cleared = api.put(f"{path}/status", json=current).json()
    assert "status" not in cleared
    assert cleared["spec"]["size"] == 1


def test_delete_answers_success_status(api: httpx.Client, ns: str, widgets: str) -> None:
    """Rule: deleting a custom object answers a Success Status with name/group/kind/uid."""
    uid = api.post(widgets.format(ns=ns), json=_widget()).json()["metadata"]["uid"]
    body = api.delete(f"{widgets.format(ns=ns)}/w").json()
    assert body["status"] == "Success"
    assert body["details"] == {"name": "w", "group": "example.com", "kind": "widgets", "uid": uid}
    missing = api.get(f"{widgets.format(ns=ns)}/w").json()
    assert (missing["code"], missing["reason"]) == (404, "NotFound")
    assert missing["message"] == 'widgets.example.com "w" not found'
    assert missing["details"] == {"name": "w", "group": "example.com", "kind": "widgets"}


def test_table_uses_printer_columns(api: httpx.Client, ns: str, widgets: str) -> None:
    """kubectl's Table request gets the CRD's printer columns."""
    api.post(widgets.format(ns=ns), json=_widget(size=4))
    table = api.get(widgets.format(ns=ns), headers={"Accept": TABLE}).json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Size"]
    assert table["rows"][0]["cells"] == ["w", 4]


def test_crd_validation_and_discovery(api: httpx.Client, widgets: str) -> None:
    """Rule: a CRD's name is <plural>.<group> and its schema is structural; served types appear "
    "in discovery."""
    bad = crd()
    bad["metadata"]["name"] = "wrong.example.com"
    response = api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=bad)
    assert response.status_code == 422
    resources = api.get("/apis/example.com/v1").json()["resources"]
    names = {r["name"]: r for r in resources}
    assert names["widgets"]["shortNames"] == ["wd"]
    assert "widgets/status" in names
