"""Events: validation, the two API views, describe's field selectors (facts §5; checklist 34–35)."""

from __future__ import annotations

from typing import Any

import httpx

CORE = "/api/v1/namespaces/{ns}/events"
NEW = "/apis/events.k8s.io/v1/namespaces/{ns}/events"


def _classic(ns: str, name: str = "e", uid: str = "u1") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns, "uid": uid},
        "reason": "Started",
        "message": "m",
        "type": "Normal",
        "source": {"component": "kubelet"},
    }


def test_classic_event_namespace_must_match(api: httpx.Client, ns: str) -> None:
    """Rule: a classic event's namespace must equal involvedObject.namespace."""
    body = _classic(ns)
    body["involvedObject"]["namespace"] = "other"
    assert api.post(CORE.format(ns=ns), json=body).status_code == 422
    assert api.post(CORE.format(ns=ns), json=_classic(ns)).status_code == 201


def test_event_with_event_time_needs_reporting_fields(api: httpx.Client, ns: str) -> None:
    """Rule: with eventTime, reportingComponent/instance, action and reason are required."""
    body = {**_classic(ns), "eventTime": "2026-01-01T00:00:00.000000Z"}
    response = api.post(CORE.format(ns=ns), json=body)
    assert response.status_code == 422
    fields = {c["field"] for c in response.json()["details"]["causes"]}
    assert {"reportingComponent", "reportingInstance", "action"} <= fields


def test_new_api_forbids_deprecated_fields_and_shares_the_store(api: httpx.Client, ns: str) -> None:
    """Rule: events.k8s.io/v1 needs eventTime, forbids deprecated*; both APIs see the same "
    "objects."""
    new = {
        "metadata": {"name": "n"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "example.com/ctl",
        "reportingInstance": "ctl-1",
        "action": "Act",
        "reason": "Done",
        "note": "hello",
        "type": "Normal",
        "regarding": {"kind": "Pod", "name": "p", "namespace": ns, "uid": "u2"},
    }
    assert api.post(NEW.format(ns=ns), json={**new, "deprecatedCount": 2}).status_code == 422
    assert api.post(NEW.format(ns=ns), json=new).status_code == 201
    core = api.get(f"{CORE.format(ns=ns)}/n").json()
    assert core["message"] == "hello"
    assert core["involvedObject"]["uid"] == "u2"
    api.post(CORE.format(ns=ns), json=_classic(ns, "c"))
    assert api.get(f"{NEW.format(ns=ns)}/c").json()["note"] == "m"


def test_describe_field_selector(api: httpx.Client, ns: str) -> None:
    """Rule: the involvedObject.* selectors kubectl describe sends select by uid."""
    api.post(CORE.format(ns=ns), json=_classic(ns, "a", "u1"))
    api.post(CORE.format(ns=ns), json=_classic(ns, "b", "other"))
    selector = (
        f"involvedObject.name=p,involvedObject.namespace={ns},"
        "involvedObject.kind=Pod,involvedObject.uid=u1"
    )
    found = api.get(CORE.format(ns=ns), params={"fieldSelector": selector}).json()
    assert [e["metadata"]["name"] for e in found["items"]] == ["a"]
    new = api.get(NEW.format(ns=ns), params={"fieldSelector": "regarding.uid=other"}).json()
    assert [e["metadata"]["name"] for e in new["items"]] == ["b"]
