"""LIST pagination, selectors and WATCH streams (facts §3.3–3.4, §4.3; checklist 24–30, 40)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import kubernetes.client
import kubernetes.watch
import pytest

from tests.kube.conftest import Running

CM = "/api/v1/namespaces/{ns}/configmaps"


def _cm(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "data": {}}


def _lines(api: httpx.Client, path: str, **params: str) -> list[dict[str, Any]]:
    with api.stream("GET", path, params={"watch": "true", **params}) as response:
        assert response.status_code == 200
        raw = response.read().decode()
    assert "\n\n" not in raw, "no blank lines in a watch stream"
    assert not raw.startswith("\n")
    return [json.loads(line) for line in raw.split("\n") if line]


def test_pagination_is_a_consistent_snapshot(api: httpx.Client, ns: str) -> None:
    """Rule: a list is ``{kind: <Kind>List, apiVersion, metadata{resourceVersion, continue},
    items}``; limit/continue pages share one list RV; writes after page 1 (a create, a change,
    a delete) do not show; the last page has no continue token."""
    for i in range(5):
        api.post(CM.format(ns=ns), json=_cm(f"c{i}"))
    first = api.get(CM.format(ns=ns), params={"limit": 2}).json()
    assert (first["kind"], first["apiVersion"]) == ("ConfigMapList", "v1")
    assert isinstance(first["metadata"]["resourceVersion"], str)
    assert len(first["items"]) == 2
    api.post(CM.format(ns=ns), json=_cm("c9"))
    changed = api.patch(
        f"{CM.format(ns=ns)}/c3",
        json={"data": {"k": "after page 1"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert changed.status_code == 200
    api.delete(f"{CM.format(ns=ns)}/c4")
    token = first["metadata"]["continue"]
    items = list(first["items"])
    while token:
        page = api.get(CM.format(ns=ns), params={"limit": 2, "continue": token}).json()
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        items += page["items"]
        token = page["metadata"].get("continue")
    assert [i["metadata"]["name"] for i in items] == [f"c{i}" for i in range(5)]
    list_rv = int(first["metadata"]["resourceVersion"])
    assert all(int(i["metadata"]["resourceVersion"]) <= list_rv for i in items)
    assert items[3].get("data") == {}  # as it was at the list's RV, not as changed since
    whole = api.get(CM.format(ns=ns)).json()
    assert not whole["metadata"].get("continue")
    assert [i["metadata"]["name"] for i in whole["items"]] == ["c0", "c1", "c2", "c3", "c9"]
    assert whole["items"][3]["data"] == {"k": "after page 1"}
    assert int(whole["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])


def test_custom_object_list_shape(api: httpx.Client, ns: str, widgets: str) -> None:
    """Rule: a custom resource list is ``<Kind>List`` in the CR's group/version."""
    body = api.get(widgets.format(ns=ns)).json()
    assert (body["kind"], body["apiVersion"], body["items"]) == (
        "WidgetList",
        "example.com/v1",
        [],
    )
    assert body["metadata"]["resourceVersion"]


def test_expired_continue_token_is_410(kube: Running, api: httpx.Client, ns: str) -> None:
    """Rule: a continue token whose snapshot was compacted → 410 Expired with a fresh token."""
    for i in range(3):
        api.post(CM.format(ns=ns), json=_cm(f"c{i}"))
    token = api.get(CM.format(ns=ns), params={"limit": 1}).json()["metadata"]["continue"]
    kube.call(kube.server.compact_history)
    response = api.get(CM.format(ns=ns), params={"limit": 1, "continue": token})
    assert response.status_code == 410
    assert response.json()["reason"] == "Expired"
    assert response.json()["message"].startswith(
        "The provided continue parameter is too old to display a consistent list result."
    )
    assert response.json()["metadata"]["continue"]


def test_label_selectors(api: httpx.Client, ns: str) -> None:
    """Rule: =, ==, !=, in, notin, exists and !key; comma is AND; bad syntax → 400."""
    api.post(CM.format(ns=ns), json=_cm("a", tier="web", env="prod"))
    api.post(CM.format(ns=ns), json=_cm("b", tier="db"))
    api.post(CM.format(ns=ns), json=_cm("c"))

    def names(selector: str) -> list[str]:
        body = api.get(CM.format(ns=ns), params={"labelSelector": selector}).json()
        return [i["metadata"]["name"] for i in body["items"]]

    assert names("tier=web") == ["a"]
    assert names("tier==db") == ["b"]
    assert names("tier!=web") == ["b", "c"]
    assert names("tier in (web,db)") == ["a", "b"]
    assert names("tier notin (web)") == ["b", "c"]
    assert names("tier") == ["a", "b"]
    assert names("!tier") == ["c"]
    assert names("tier,env=prod") == ["a"]
    assert api.get(CM.format(ns=ns), params={"labelSelector": "tier in web"}).status_code == 400


def test_field_selectors_only_documented_fields(api: httpx.Client, ns: str) -> None:
    """Rule: only the kind's field labels are accepted; others → 400 ``field label not
    supported: <f>``."""
    api.post(
        f"/api/v1/namespaces/{ns}/pods",
        json={"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
    )
    found = api.get(
        f"/api/v1/namespaces/{ns}/pods",
        params={"fieldSelector": "spec.nodeName=,status.phase=Pending"},
    ).json()
    assert [i["metadata"]["name"] for i in found["items"]] == ["p"]
    none = api.get(
        f"/api/v1/namespaces/{ns}/pods", params={"fieldSelector": "status.phase!=Pending"}
    ).json()
    assert none["items"] == []
    response = api.get(f"/api/v1/namespaces/{ns}/pods", params={"fieldSelector": "spec.priority=0"})
    assert response.status_code == 400
    assert response.json()["reason"] == "BadRequest"
    assert response.json()["message"] == "field label not supported: spec.priority"


def test_field_selectors_of_nodes_and_custom_objects(
    api: httpx.Client, ns: str, widgets: str
) -> None:
    """Rule: nodes select on metadata.name and spec.unschedulable, custom objects on
    metadata.name/namespace only; anything else → 400 ``field label not supported: <f>``."""
    cordoned = {"metadata": {"name": f"cordoned-{ns}"}, "spec": {"unschedulable": True}}
    assert api.post("/api/v1/nodes", json=cordoned).status_code == 201
    try:
        listed = api.get("/api/v1/nodes", params={"fieldSelector": "spec.unschedulable=true"})
        assert [n["metadata"]["name"] for n in listed.json()["items"]] == [f"cordoned-{ns}"]
        named = api.get("/api/v1/nodes", params={"fieldSelector": "metadata.name=n1"}).json()
        assert [n["metadata"]["name"] for n in named["items"]] == ["n1"]
        bad = api.get("/api/v1/nodes", params={"fieldSelector": "status.phase=Running"})
        assert (bad.status_code, bad.json()["message"]) == (
            400,
            "field label not supported: status.phase",
        )
    finally:
        api.delete(f"/api/v1/nodes/cordoned-{ns}")
    for name in ("a", "b"):
        widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}}
        api.post(widgets.format(ns=ns), json={**widget, "spec": {"size": 1}})
    picked = api.get(widgets.format(ns=ns), params={"fieldSelector": "metadata.name!=a"}).json()
    assert [w["metadata"]["name"] for w in picked["items"]] == ["b"]
    bad = api.get(widgets.format(ns=ns), params={"fieldSelector": "spec.size=1"})
    assert (bad.status_code, bad.json()["message"]) == (
        400,
        "field label not supported: spec.size",
    )


def test_watch_replays_then_streams_and_times_out(api: httpx.Client, ns: str) -> None:
    """Rule: RV unset replays current objects as ADDED; timeoutSeconds ends the stream; Python's
    ``True`` is a boolean."""
    api.post(CM.format(ns=ns), json=_cm("a"))
    events = _lines(api, CM.format(ns=ns), timeoutSeconds="1", watch="True")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a")]
    assert events[0]["object"]["kind"] == "ConfigMap"


def test_watch_stream_format_and_rv_zero_replay(api: httpx.Client, ns: str) -> None:
    """Rule: a watch answers HTTP 200, ``Content-Type: application/json``, chunked, one
    ``{"type","object"}`` JSON per line; RV "0" replays current objects as ADDED (with kind and
    apiVersion); a specific RV sends only later changes."""
    rv = api.post(CM.format(ns=ns), json=_cm("a")).json()["metadata"]["resourceVersion"]
    api.post(CM.format(ns=ns), json=_cm("b"))
    params = {"watch": "true", "resourceVersion": "0", "timeoutSeconds": "1"}
    with api.stream("GET", CM.format(ns=ns), params=params) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        assert response.headers["transfer-encoding"] == "chunked"
        raw = response.read().decode()
    lines = raw.split("\n")
    assert lines[-1] == ""
    events = [json.loads(line) for line in lines[:-1]]
    assert all(set(e) == {"type", "object"} for e in events)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]
    assert {(e["object"]["kind"], e["object"]["apiVersion"]) for e in events} == {
        ("ConfigMap", "v1")
    }
    later = _lines(api, CM.format(ns=ns), resourceVersion=rv, timeoutSeconds="1")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in later] == [("ADDED", "b")]


@pytest.mark.parametrize("spelling", ["1", "t", "T", "TRUE", "true", "True"])
def test_watch_accepts_go_parse_bool_spellings(api: httpx.Client, ns: str, spelling: str) -> None:
    """Rule: boolean query values accept Go ParseBool spellings (1, t, T, TRUE, true, True for
    true; 0, f, F, FALSE, false, False for false)."""
    api.post(CM.format(ns=ns), json=_cm("a"))
    params = {"watch": spelling, "timeoutSeconds": "5"}
    with api.stream("GET", CM.format(ns=ns), params=params) as response:
        assert response.status_code == 200
        first = json.loads(next(response.iter_lines()))
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "a")
    negative = {"0": "1", "f": "t", "F": "T", "FALSE": "TRUE", "false": "true", "False": "True"}
    no = next(k for k, v in negative.items() if v == spelling)
    listed = api.get(CM.format(ns=ns), params={"watch": no})
    assert listed.json()["kind"] == "ConfigMapList"


def test_watch_rejects_non_boolean_spellings(api: httpx.Client, ns: str) -> None:
    """Rule: a value Go's ParseBool refuses (``yes``) is a 400 BadRequest."""
    response = api.get(CM.format(ns=ns), params={"watch": "yes"})
    assert (response.status_code, response.json()["reason"]) == (400, "BadRequest")


def test_idle_watch_writes_no_blank_or_keep_alive_lines(api: httpx.Client, ns: str) -> None:
    """Rule: a watch stream never carries blank or keep-alive lines (the Python client v33+
    yields ``None`` for them): an idle watch without bookmarks sends no bytes at all."""
    params = {"watch": "true", "timeoutSeconds": "1"}
    with api.stream("GET", CM.format(ns=ns), params=params) as response:
        assert response.status_code == 200
        assert response.read() == b""


def test_watch_from_rv_sees_selector_transitions_and_deletes(api: httpx.Client, ns: str) -> None:
    """Rule: entering the selector → ADDED, leaving → DELETED, deletion → DELETED with the last "
    "state."""
    start = api.post(CM.format(ns=ns), json=_cm("a")).json()["metadata"]["resourceVersion"]
    patch = {"Content-Type": "application/merge-patch+json"}
    api.patch(f"{CM.format(ns=ns)}/a", json={"metadata": {"labels": {"w": "1"}}}, headers=patch)
    api.patch(f"{CM.format(ns=ns)}/a", json={"data": {"k": "v"}}, headers=patch)
    api.patch(f"{CM.format(ns=ns)}/a", json={"metadata": {"labels": {"w": None}}}, headers=patch)
    api.patch(f"{CM.format(ns=ns)}/a", json={"metadata": {"labels": {"w": "1"}}}, headers=patch)
    api.delete(f"{CM.format(ns=ns)}/a")
    events = _lines(
        api, CM.format(ns=ns), resourceVersion=start, labelSelector="w=1", timeoutSeconds="1"
    )
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED", "ADDED", "DELETED"]
    assert events[2]["object"]["metadata"]["labels"] == {"w": "1"}
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(set(versions)), "a selector exit is stamped with the new RV"


def test_watch_from_compacted_rv_gets_one_410_error(
    kube: Running, api: httpx.Client, ns: str
) -> None:
    """Rule: a too-old RV → HTTP 200 and a single ERROR event with a 410 Expired Status."""
    old = api.post(CM.format(ns=ns), json=_cm("a")).json()["metadata"]["resourceVersion"]
    api.post(CM.format(ns=ns), json=_cm("b"))
    kube.call(kube.server.compact_history)
    events = _lines(api, CM.format(ns=ns), resourceVersion=old, timeoutSeconds="5")
    assert len(events) == 1
    error = events[0]
    assert error["type"] == "ERROR"
    assert (error["object"]["code"], error["object"]["reason"]) == (410, "Expired")
    assert error["object"]["message"].startswith(f"too old resource version: {old} (")


def test_bookmarks_only_when_allowed(kube: Running, api: httpx.Client, ns: str) -> None:
    """Rule: BOOKMARK events (RV-only objects of the watched kind) come only with
    allowWatchBookmarks=true."""
    kube.server.bookmark_interval = 0.2
    try:
        with_marks = _lines(api, CM.format(ns=ns), allowWatchBookmarks="true", timeoutSeconds="1")
        without = _lines(api, CM.format(ns=ns), timeoutSeconds="1")
    finally:
        kube.server.bookmark_interval = 5.0
    assert with_marks
    assert all(e["type"] == "BOOKMARK" for e in with_marks)
    assert set(with_marks[0]["object"]["metadata"]) == {"resourceVersion"}
    assert with_marks[0]["object"]["kind"] == "ConfigMap"
    assert without == []


def _python_client(kube: Running) -> kubernetes.client.CoreV1Api:
    cfg = kubernetes.client.Configuration()
    cfg.host = kube.server.url
    cfg.api_key = {"authorization": f"Bearer {kube.server.admin_token}"}
    cfg.proxy = None
    return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(cfg))


def test_python_watch_resumes_after_the_server_closes(
    kube: Running, api: httpx.Client, ns: str
) -> None:
    """Rule: the client's Watch re-issues the call from the last RV when the server ends a "
    "stream."""
    core = _python_client(kube)
    api.post(CM.format(ns=ns), json=_cm("a"))
    watch = kubernetes.watch.Watch()
    seen: list[tuple[str, str]] = []
    stream = watch.stream(core.list_namespaced_config_map, ns, _request_timeout=10)
    for event in stream:
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 1:
            kube.call(kube.server.store.close_watchers)  # the server ends the stream
            api.post(CM.format(ns=ns), json=_cm("b"))
        if len(seen) == 2:
            watch.stop()
    assert seen == [("ADDED", "a"), ("ADDED", "b")]


def test_python_watch_raises_on_repeated_410_and_relist_recovers(
    kube: Running, api: httpx.Client, ns: str
) -> None:
    """Rule: a compacted RV makes Watch raise ApiException(410); relisting gives a usable RV."""
    core = _python_client(kube)
    old = api.post(CM.format(ns=ns), json=_cm("a")).json()["metadata"]["resourceVersion"]
    api.post(CM.format(ns=ns), json=_cm("b"))
    kube.call(kube.server.compact_history)
    watch = kubernetes.watch.Watch()
    with pytest.raises(kubernetes.client.ApiException) as caught:
        for _ in watch.stream(
            core.list_namespaced_config_map, ns, resource_version=old, _request_timeout=10
        ):
            pass
    assert caught.value.status == 410
    listed = core.list_namespaced_config_map(ns)
    assert listed.metadata is not None
    rv = listed.metadata.resource_version
    api.post(CM.format(ns=ns), json=_cm("c"))
    events = list(
        watch.stream(
            core.list_namespaced_config_map,
            ns,
            resource_version=rv,
            timeout_seconds=1,
        )
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "c")]
