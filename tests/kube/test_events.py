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
    response = api.post(CORE.format(ns=ns), json=body)
    assert response.status_code == 422
    assert [(c["reason"], c["field"]) for c in response.json()["details"]["causes"]] == [
        ("FieldValueInvalid", "involvedObject.namespace")
    ]
    assert api.post(CORE.format(ns=ns), json=_classic(ns)).status_code == 201


def test_event_with_event_time_needs_reporting_fields(api: httpx.Client, ns: str) -> None:
    """Rule: with eventTime, reportingComponent/instance, action and reason are required."""
    body = {**_classic(ns), "eventTime": "2026-01-01T00:00:00.000000Z"}
    body.pop("reason")
    response = api.post(CORE.format(ns=ns), json=body)
    assert response.status_code == 422
    causes = response.json()["details"]["causes"]
    required = {c["field"] for c in causes if c["reason"] == "FieldValueRequired"}
    assert {"reportingComponent", "reportingInstance", "action", "reason"} <= required


def _timed(ns: str, name: str = "t") -> dict[str, Any]:
    return {
        **_classic(ns, name),
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingComponent": "example.com/ctl",
        "reportingInstance": "ctl-1",
        "action": "Act",
    }


def test_event_with_event_time_limits_lengths(api: httpx.Client, ns: str) -> None:
    """Rule: with eventTime, action/reason/reportingInstance ≤ 128 and message ≤ 1024
    (FieldValueTooLong); a classic event's message has no limit."""
    assert api.post(CORE.format(ns=ns), json=_timed(ns)).status_code == 201
    for field, limit in (("reason", 128), ("action", 128), ("reportingInstance", 128)):
        at_limit = {**_timed(ns, f"ok-{field.lower()}"), field: "a" * limit}
        assert api.post(CORE.format(ns=ns), json=at_limit).status_code == 201, field
        over = {**_timed(ns, f"x-{field.lower()}"), field: "a" * (limit + 1)}
        response = api.post(CORE.format(ns=ns), json=over)
        assert response.status_code == 422, field
        assert response.json()["details"]["causes"] == [
            {
                "reason": "FieldValueTooLong",
                "message": "Too long: may not be more than 128 bytes",
                "field": field,
            }
        ]
    long_message = {**_timed(ns, "long"), "message": "m" * 1025}
    response = api.post(CORE.format(ns=ns), json=long_message)
    assert response.status_code == 422
    assert response.json()["details"]["causes"][0]["field"] == "message"
    classic = {**_classic(ns, "classic"), "message": "m" * 5000}
    assert api.post(CORE.format(ns=ns), json=classic).status_code == 201


def test_new_api_forbids_deprecated_fields_and_shares_the_store(api: httpx.Client, ns: str) -> None:
    """Rule: events.k8s.io/v1 needs eventTime and type Normal|Warning, forbids deprecated*,
    wants series.count ≥ 2 with lastObservedTime, lets updates change only series; both APIs see
    the same objects."""
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

    def causes(body: dict[str, Any]) -> list[tuple[str, str]]:
        response = api.post(NEW.format(ns=ns), json=body)
        assert response.status_code == 422, response.text
        return [(c["reason"], c["field"]) for c in response.json()["details"]["causes"]]

    assert causes({**new, "deprecatedCount": 2}) == [("FieldValueForbidden", "deprecatedCount")]
    no_time = {k: v for k, v in new.items() if k != "eventTime"}
    assert ("FieldValueRequired", "eventTime") in causes(no_time)
    assert causes({**new, "type": "Odd"}) == [("FieldValueNotSupported", "type")]
    assert causes({**new, "series": {"count": 1}}) == [
        ("FieldValueInvalid", "series.count"),
        ("FieldValueRequired", "series.lastObservedTime"),
    ]
    created = api.post(NEW.format(ns=ns), json=new)
    assert created.status_code == 201
    changed = {**created.json(), "note": "changed"}
    assert api.put(f"{NEW.format(ns=ns)}/n", json=changed).status_code == 422
    series = {"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}
    assert (
        api.put(f"{NEW.format(ns=ns)}/n", json={**created.json(), "series": series}).status_code
        == 200
    )
    core = api.get(f"{CORE.format(ns=ns)}/n").json()
    assert core["message"] == "hello"
    assert core["involvedObject"]["uid"] == "u2"
    assert core["reportingComponent"] == "example.com/ctl"
    api.post(CORE.format(ns=ns), json=_classic(ns, "c"))
    shared = api.get(f"{NEW.format(ns=ns)}/c").json()
    assert shared["note"] == "m"
    assert shared["regarding"]["uid"] == "u1"
    assert shared["deprecatedSource"] == {"component": "kubelet"}


def test_event_field_selectors_are_the_documented_ones(api: httpx.Client, ns: str) -> None:
    """Rule: events select on reason, type, source, reportingComponent, involvedObject.*; other
    fields → 400 ``field label not supported: <f>``."""
    api.post(CORE.format(ns=ns), json=_classic(ns, "a"))
    warning = {**_classic(ns, "b"), "type": "Warning", "reason": "Failed"}
    api.post(CORE.format(ns=ns), json=warning)

    def names(selector: str) -> list[str]:
        body = api.get(CORE.format(ns=ns), params={"fieldSelector": selector}).json()
        return [e["metadata"]["name"] for e in body["items"]]

    assert names("type=Warning") == ["b"]
    assert names("reason!=Failed") == ["a"]
    assert names("source=kubelet,involvedObject.kind=Pod") == ["a", "b"]
    response = api.get(CORE.format(ns=ns), params={"fieldSelector": "message=m"})
    assert response.status_code == 400
    assert response.json()["message"] == "field label not supported: message"


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
