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
    """Rule: limit/continue pages share one list RV; writes after page 1 do not show."""
    for i in range(5):
        api.post(CM.format(ns=ns), json=_cm(f"c{i}"))
    first = api.get(CM.format(ns=ns), params={"limit": 2}).json()
    assert first["kind"] == "ConfigMapList"
    assert len(first["items"]) == 2
    api.post(CM.format(ns=ns), json=_cm("c9"))
    token = first["metadata"]["continue"]
    names = [i["metadata"]["name"] for i in first["items"]]
    while token:
        page = api.get(CM.format(ns=ns), params={"limit": 2, "continue": token}).json()
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        names += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue")
    assert names == [f"c{i}" for i in range(5)]


def test_expired_continue_token_is_410(kube: Running, api: httpx.Client, ns: str) -> None:
    """Rule: a continue token whose snapshot was compacted → 410 Expired with a fresh token."""
    for i in range(3):
        api.post(CM.format(ns=ns), json=_cm(f"c{i}"))
    token = api.get(CM.format(ns=ns), params={"limit": 1}).json()["metadata"]["continue"]
    kube.call(kube.server.compact_history)
    response = api.get(CM.format(ns=ns), params={"limit": 1, "continue": token})
    assert response.status_code == 410
    assert response.json()["reason"] == "Expired"
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
    """Rule: only the kind's field labels are accepted; others → 400 ``field label not "
    "supported``."""
    api.post(
        f"/api/v1/namespaces/{ns}/pods",
        json={"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
    )
    found = api.get(
        f"/api/v1/namespaces/{ns}/pods",
        params={"fieldSelector": "spec.nodeName=,status.phase=Pending"},
    ).json()
    assert [i["metadata"]["name"] for i in found["items"]] == ["p"]
    response = api.get(f"/api/v1/namespaces/{ns}/pods", params={"fieldSelector": "spec.priority=0"})
    assert response.status_code == 400
    assert response.json()["message"] == "field label not supported: spec.priority"


def test_watch_replays_then_streams_and_times_out(api: httpx.Client, ns: str) -> None:
    """Rule: RV unset replays current objects as ADDED; timeoutSeconds ends the stream; Python's "
    "``True`` is a boolean."""
    api.post(CM.format(ns=ns), json=_cm("a"))
    events = _lines(api, CM.format(ns=ns), timeoutSeconds="1", watch="True")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a")]
    assert events[0]["object"]["kind"] == "ConfigMap"


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
    """Rule: BOOKMARK events (RV-only objects) come only with allowWatchBookmarks=true."""
    kube.server.bookmark_interval = 0.2
    try:
        with_marks = _lines(api, CM.format(ns=ns), allowWatchBookmarks="true", timeoutSeconds="1")
        without = _lines(api, CM.format(ns=ns), timeoutSeconds="1")
    finally:
        kube.server.bookmark_interval = 5.0
    assert with_marks
    assert all(e["type"] == "BOOKMARK" for e in with_marks)
    assert set(with_marks[0]["object"]["metadata"]) == {"resourceVersion"}
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
