"""API conventions every kind shares (facts §2.2, §3.1–3.3, §3.7, §6; checklist 1–3, 16–17, 23, "
"31–33, 36–39)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from shared import vocab
from tests.kube.conftest import pod

CM = "/api/v1/namespaces/{ns}/configmaps"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"


def _cm(name: str = "c", **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_resource_versions_come_from_one_increasing_counter(api: httpx.Client, ns: str) -> None:
    """Rule: one global counter; every write bumps it; serialized as a string."""
    first = api.post(CM.format(ns=ns), json=_cm("a")).json()["metadata"]["resourceVersion"]
    second = api.post(f"/api/v1/namespaces/{ns}/secrets", json={"metadata": {"name": "s"}}).json()[
        "metadata"
    ]["resourceVersion"]
    third = api.put(f"{CM.format(ns=ns)}/a", json=_cm("a", k="v")).json()["metadata"][
        "resourceVersion"
    ]
    assert isinstance(first, str)
    assert int(first) < int(second) < int(third)


def test_create_wipes_system_fields(api: httpx.Client, ns: str) -> None:
    """Rule: client-sent uid, creationTimestamp, deletionTimestamp and deletionGracePeriodSeconds
    are wiped at create (the server sets its own uid and creationTimestamp)."""
    body = _cm()
    body["metadata"].update(
        uid="mine",
        creationTimestamp="2001-01-01T00:00:00Z",
        deletionTimestamp="2001-01-01T00:00:00Z",
        deletionGracePeriodSeconds=5,
    )
    response = api.post(CM.format(ns=ns), json=body)
    assert response.status_code == 201, response.text
    meta = response.json()["metadata"]
    assert meta["uid"] not in ("", "mine")
    assert meta["creationTimestamp"] != "2001-01-01T00:00:00Z"
    assert "deletionTimestamp" not in meta
    assert "deletionGracePeriodSeconds" not in meta


def test_generate_name(api: httpx.Client, ns: str) -> None:
    """Rule: generateName[:58] + 5 characters of bcdfghjklmnpqrstvwxz2456789."""
    base = "x" * 70
    body = {"metadata": {"generateName": base}, "data": {}}
    name = api.post(CM.format(ns=ns), json=body).json()["metadata"]["name"]
    assert name[:58] == base[:58]
    assert len(name) == 63
    assert set(name[58:]) <= set("bcdfghjklmnpqrstvwxz2456789")


def test_taken_name_is_already_exists(api: httpx.Client, ns: str) -> None:
    """Rule: an existing explicit name → 409 AlreadyExists with the Status body."""
    api.post(CM.format(ns=ns), json=_cm())
    response = api.post(CM.format(ns=ns), json=_cm())
    assert response.status_code == 409
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'configmaps "c" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "c", "kind": "configmaps"},
        "code": 409,
    }


def test_not_found_status(api: httpx.Client, ns: str) -> None:
    """Rule: 404 Status ``pods "x" not found`` with details name/kind."""
    body = api.get(f"/api/v1/namespaces/{ns}/pods/x").json()
    assert (body["code"], body["reason"], body["message"]) == (
        404,
        "NotFound",
        'pods "x" not found',
    )
    assert body["details"] == {"name": "x", "kind": "pods"}


def test_create_in_missing_namespace(api: httpx.Client) -> None:
    """Rule: a create in a missing namespace → 404 NotFound ``namespaces "<ns>" not found``."""
    response = api.post(CM.format(ns="nowhere"), json=_cm())
    assert response.status_code == 404
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'namespaces "nowhere" not found',
        "reason": "NotFound",
        "details": {"name": "nowhere", "kind": "namespaces"},
        "code": 404,
    }


def test_namespace_carries_its_name_label(api: httpx.Client, ns: str) -> None:
    """Rule: every namespace is labelled kubernetes.io/metadata.name=<name>, even after edits."""
    namespace = api.get(f"/api/v1/namespaces/{ns}").json()
    assert namespace["metadata"]["labels"][vocab.NAMESPACE_NAME_LABEL] == ns
    namespace["metadata"]["labels"] = {}
    updated = api.put(f"/api/v1/namespaces/{ns}", json=namespace).json()
    assert updated["metadata"]["labels"][vocab.NAMESPACE_NAME_LABEL] == ns


def test_stale_put_is_conflict(api: httpx.Client, ns: str) -> None:
    """Rule: PUT with a stale resourceVersion → 409 with the exact message."""
    created = api.post(CM.format(ns=ns), json=_cm()).json()
    api.put(f"{CM.format(ns=ns)}/c", json=_cm(k="1"))
    response = api.put(f"{CM.format(ns=ns)}/c", json=created)
    assert response.status_code == 409
    assert response.json()["message"] == (
        'Operation cannot be fulfilled on configmaps "c": the object has been modified; please '
        "apply your changes to the latest version and try again"
    )
    assert response.json()["details"] == {"name": "c", "kind": "configmaps"}


def test_unconditional_put_allowed_for_pods_not_for_leases(api: httpx.Client, ns: str) -> None:
    """Rule: a PUT without resourceVersion is allowed for pods, refused for Leases with 422
    ``metadata.resourceVersion: Invalid value: 0: must be specified for an update`` (facts §3.1
    wording; upstream's formatter may print the uint64 as ``0x0``)."""
    created = api.post(f"/api/v1/namespaces/{ns}/pods", json=pod()).json()
    del created["metadata"]["resourceVersion"]
    created["metadata"]["labels"] = {"put": "unconditional"}
    answer = api.put(f"/api/v1/namespaces/{ns}/pods/p", json=created)
    assert answer.status_code == 200
    assert answer.json()["metadata"]["labels"] == {"put": "unconditional"}
    lease = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    assert api.post(LEASES.format(ns=ns), json=lease).status_code == 201
    response = api.put(f"{LEASES.format(ns=ns)}/l", json=lease)
    assert response.status_code == 422
    body = response.json()
    assert body["reason"] == "Invalid"
    assert body["message"] == (
        'Lease.coordination.k8s.io "l" is invalid: metadata.resourceVersion: Invalid value: 0: '
        "must be specified for an update"
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 0: must be specified for an update",
            "field": "metadata.resourceVersion",
        }
    ]


def test_unconditional_put_allowed_for_nodes_and_events(api: httpx.Client, ns: str) -> None:
    """Rule: nodes and core events accept a PUT without resourceVersion (last write wins);
    a core Event PUT may create; a PUT to a missing node → 404."""
    node = {"metadata": {"name": f"put-{ns}", "labels": {"a": "1"}}}
    assert api.post("/api/v1/nodes", json=node).status_code == 201
    node["metadata"]["labels"] = {"a": "2"}
    updated = api.put(f"/api/v1/nodes/put-{ns}", json=node)
    assert updated.status_code == 200
    assert updated.json()["metadata"]["labels"] == {"a": "2"}
    missing = api.put("/api/v1/nodes/nowhere", json={"metadata": {"name": "nowhere"}})
    assert (missing.status_code, missing.json()["message"]) == (404, 'nodes "nowhere" not found')
    event = {"metadata": {"name": "e"}, "involvedObject": {"namespace": ns}, "message": "one"}
    assert api.put(f"/api/v1/namespaces/{ns}/events/e", json=event).status_code == 201
    event["message"] = "two"
    again = api.put(f"/api/v1/namespaces/{ns}/events/e", json=event)
    assert again.status_code == 200
    assert again.json()["message"] == "two"
    api.delete(f"/api/v1/nodes/put-{ns}")


def test_lease_put_creates_and_races_conflict(api: httpx.Client, ns: str) -> None:
    """Rule: PUT may create a Lease; two updates from one RV → one success, one 409."""
    lease = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    created = api.put(f"{LEASES.format(ns=ns)}/l", json=lease)
    assert created.status_code == 201
    rv = created.json()["metadata"]["resourceVersion"]
    one = {
        **lease,
        "metadata": {"name": "l", "resourceVersion": rv},
        "spec": {"holderIdentity": "b"},
    }
    two = {
        **lease,
        "metadata": {"name": "l", "resourceVersion": rv},
        "spec": {"holderIdentity": "c"},
    }
    assert api.put(f"{LEASES.format(ns=ns)}/l", json=one).status_code == 200
    lost = api.put(f"{LEASES.format(ns=ns)}/l", json=two)
    assert (lost.status_code, lost.json()["reason"]) == (409, "Conflict")
    assert lost.json()["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "l": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    assert api.get(f"{LEASES.format(ns=ns)}/l").json()["spec"]["holderIdentity"] == "b"


def test_lease_post_of_existing_name_is_already_exists(api: httpx.Client, ns: str) -> None:
    """Rule: POST of an existing Lease name → 409 AlreadyExists (qualified resource name)."""
    lease = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}}
    assert api.post(LEASES.format(ns=ns), json=lease).status_code == 201
    response = api.post(LEASES.format(ns=ns), json=lease)
    assert response.status_code == 409
    body = response.json()
    assert (body["reason"], body["message"]) == (
        "AlreadyExists",
        'leases.coordination.k8s.io "l" already exists',
    )
    assert body["details"] == {"name": "l", "group": "coordination.k8s.io", "kind": "leases"}


def test_lease_counters_and_micro_time(api: httpx.Client, ns: str) -> None:
    """Rule: leaseDurationSeconds > 0 and leaseTransitions >= 0 (422 naming both fields);
    MicroTime has six fractional digits."""
    bad = {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}}
    response = api.post(LEASES.format(ns=ns), json=bad)
    assert response.status_code == 422
    causes = response.json()["details"]["causes"]
    assert [(c["reason"], c["field"]) for c in causes] == [
        ("FieldValueInvalid", "spec.leaseDurationSeconds"),
        ("FieldValueInvalid", "spec.leaseTransitions"),
    ]
    fine = {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 1, "leaseTransitions": 0}}
    assert api.post(LEASES.format(ns=ns), json=fine).status_code == 201
    wrong_time = {"metadata": {"name": "m"}, "spec": {"renewTime": "2026-01-01T00:00:00Z"}}
    response = api.post(LEASES.format(ns=ns), json=wrong_time)
    assert response.status_code == 400
    good = {"metadata": {"name": "m"}, "spec": {"renewTime": "2026-01-01T00:00:00.000000Z"}}
    assert api.post(LEASES.format(ns=ns), json=good).status_code == 201


@pytest.mark.parametrize(
    ("stamp", "code"),
    [
        pytest.param("2026-01-01T00:00:00.123456Z", 201, id="six-digits-utc"),
        pytest.param("2026-01-01T00:00:00.123456+02:00", 201, id="six-digits-offset"),
        pytest.param("2026-01-01T00:00:00Z", 400, id="no-fraction"),
        pytest.param("2026-01-01T00:00:00.123Z", 400, id="three-digits"),
        pytest.param("2026-01-01T00:00:00.123456789Z", 400, id="nine-digits"),
        pytest.param("2026-01-01T00:00:00.123456", 400, id="no-zone"),
    ],
)
def test_micro_time_needs_exactly_six_fractional_digits(
    api: httpx.Client, ns: str, stamp: str, code: int
) -> None:
    """Rule: MicroTime (Lease acquireTime/renewTime, Event eventTime) parses with exactly six
    fractional digits and a zone; anything else → 400 BadRequest."""
    lease = {"metadata": {"name": "l"}, "spec": {"acquireTime": stamp}}
    response = api.post(LEASES.format(ns=ns), json=lease)
    assert response.status_code == code, response.text
    if code == 400:
        assert response.json()["reason"] == "BadRequest"
        assert response.json()["message"].startswith(f'spec.acquireTime: parsing time "{stamp}"')


@pytest.mark.parametrize(
    ("stamp", "code"),
    [
        pytest.param("2026-01-01T00:00:00Z", 201, id="utc"),
        pytest.param("2026-01-01T00:00:00-05:00", 201, id="offset"),
        pytest.param("2026-01-01T00:00:00", 400, id="no-zone"),
        pytest.param("2026-01-01 00:00:00Z", 400, id="not-rfc3339"),
    ],
)
def test_time_without_zone_is_bad_request(
    api: httpx.Client, ns: str, stamp: str, code: int
) -> None:
    """Rule: metav1.Time must be RFC 3339 with a zone (``Z`` or ``±hh:mm``), else 400."""
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"namespace": ns},
        "firstTimestamp": stamp,
    }
    response = api.post(f"/api/v1/namespaces/{ns}/events", json=event)
    assert response.status_code == code, response.text
    if code == 400:
        assert response.json()["reason"] == "BadRequest"


def test_label_and_annotation_syntax(api: httpx.Client, ns: str) -> None:
    """Rule: label keys/values and annotation keys are validated (422 FieldValueInvalid on
    metadata.labels / metadata.annotations); the annotations total (keys + values) may be
    256 KiB but not more (FieldValueTooLong)."""
    bad_label = _cm()
    bad_label["metadata"]["labels"] = {"ok": "not ok!"}
    response = api.post(CM.format(ns=ns), json=bad_label)
    assert response.status_code == 422
    assert [(c["reason"], c["field"]) for c in response.json()["details"]["causes"]] == [
        ("FieldValueInvalid", "metadata.labels")
    ]
    bad_key = _cm()
    bad_key["metadata"]["annotations"] = {"-bad/": "x"}
    response = api.post(CM.format(ns=ns), json=bad_key)
    assert response.status_code == 422
    assert [(c["reason"], c["field"]) for c in response.json()["details"]["causes"]] == [
        ("FieldValueInvalid", "metadata.annotations")
    ]
    upper = _cm("upper")
    upper["metadata"]["annotations"] = {"Example.com/Key": "v"}
    assert api.post(CM.format(ns=ns), json=upper).status_code == 201
    exact = _cm("exact")
    exact["metadata"]["annotations"] = {"a": "x" * (262144 - 1)}
    assert api.post(CM.format(ns=ns), json=exact).status_code == 201
    big = _cm()
    big["metadata"]["annotations"] = {"a": "x" * 262144}
    response = api.post(CM.format(ns=ns), json=big)
    assert response.status_code == 422
    assert "metadata.annotations: Too long" in response.json()["message"]
    assert response.json()["details"]["causes"][0]["reason"] == "FieldValueTooLong"


def test_labels_and_annotations_are_always_mutable(api: httpx.Client, ns: str) -> None:
    """Rule: labels and annotations may change at any time, also on a bound (running) pod."""
    api.post(f"/api/v1/namespaces/{ns}/pods", json=pod())
    binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}
    assert api.post(f"/api/v1/namespaces/{ns}/pods/p/binding", json=binding).status_code == 201
    merge = {"Content-Type": "application/merge-patch+json"}
    meta: dict[str, dict[str, str | None]] = {
        "labels": {"a": "1"},
        "annotations": {"example.com/x": "y"},
    }
    response = api.patch(f"/api/v1/namespaces/{ns}/pods/p", json={"metadata": meta}, headers=merge)
    assert response.status_code == 200, response.text
    meta = {"labels": {"a": None, "b": "2"}, "annotations": {"example.com/x": None}}
    response = api.patch(f"/api/v1/namespaces/{ns}/pods/p", json={"metadata": meta}, headers=merge)
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["labels"] == {"b": "2"}
    assert not response.json()["metadata"].get("annotations")


def test_invalid_message_qualifies_kinds_of_named_groups(api: httpx.Client, ns: str) -> None:
    """Rule: the 422 message names a kind as ``Kind.group`` outside the core group
    (``MutatingWebhookConfiguration.admissionregistration.k8s.io "x" is invalid: ...``) and as
    plain ``Kind`` in the core group."""
    configs = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    response = api.post(configs, json={"metadata": {"name": "Bad_Name"}, "webhooks": []})
    assert response.status_code == 422
    body = response.json()
    assert body["message"].startswith(
        'MutatingWebhookConfiguration.admissionregistration.k8s.io "Bad_Name" is invalid: '
        "metadata.name: Invalid value: "
    )
    assert body["details"]["group"] == "admissionregistration.k8s.io"
    assert body["details"]["kind"] == "MutatingWebhookConfiguration"
    core = api.post(CM.format(ns=ns), json=_cm("Bad_Name"))
    assert core.json()["message"].startswith('ConfigMap "Bad_Name" is invalid: metadata.name: ')
    assert "group" not in core.json()["details"]


def test_body_over_three_mebibytes_is_413(api: httpx.Client, ns: str) -> None:
    """Rule: request bodies over 3 MiB → 413 ``Request entity too large: limit is 3145728``."""
    response = api.post(CM.format(ns=ns), json=_cm(big="x" * (3 * 1024 * 1024)))
    assert response.status_code == 413
    assert response.json()["reason"] == "RequestEntityTooLarge"
    assert response.json()["message"] == "Request entity too large: limit is 3145728"
    under = api.post(CM.format(ns=ns), json=_cm(big="x" * (1024 * 1024)))
    assert under.status_code == 201


def test_delete_preconditions(api: httpx.Client, ns: str) -> None:
    """Rule: a DeleteOptions uid/resourceVersion precondition mismatch → 409 Conflict with the
    apiserver's wording; a matching one deletes."""
    created = api.post(CM.format(ns=ns), json=_cm()).json()
    uid, rv = created["metadata"]["uid"], created["metadata"]["resourceVersion"]
    wrong = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "other"}}
    response = api.request("DELETE", f"{CM.format(ns=ns)}/c", json=wrong)
    assert response.status_code == 409
    assert response.json()["reason"] == "Conflict"
    assert response.json()["message"] == (
        f'Operation cannot be fulfilled on configmaps "c": the UID in the precondition (other) '
        f"does not match the UID in record ({uid}). The object might have been deleted and then "
        "recreated"
    )
    stale = {"preconditions": {"resourceVersion": "1"}}
    response = api.request("DELETE", f"{CM.format(ns=ns)}/c", json=stale)
    assert response.status_code == 409
    assert response.json()["message"] == (
        'Operation cannot be fulfilled on configmaps "c": the ResourceVersion in the precondition '
        f"(1) does not match the ResourceVersion in record ({rv}). The object might have been "
        "modified"
    )
    right = {"preconditions": {"uid": uid, "resourceVersion": rv}}
    answer = api.request("DELETE", f"{CM.format(ns=ns)}/c", json=right).json()
    assert answer["status"] == "Success"
    assert answer["details"]["uid"] == uid


def test_delete_options_body_wins_over_query(api: httpx.Client, ns: str) -> None:
    """Rule: when DELETE carries a DeleteOptions body, query parameters are ignored."""
    pods = f"/api/v1/namespaces/{ns}/pods"
    api.post(pods, json=pod())
    binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}
    assert api.post(f"{pods}/p/binding", json=binding).status_code == 201
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 20}
    response = api.request("DELETE", f"{pods}/p", params={"gracePeriodSeconds": "0"}, json=body)
    assert response.status_code == 200
    assert response.json()["metadata"]["deletionGracePeriodSeconds"] == 20
    assert api.get(f"{pods}/p").status_code == 200
    api.post(CM.format(ns=ns), json=_cm())
    options = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
    dry = api.request("DELETE", f"{CM.format(ns=ns)}/c", params={"dryRun": "All"}, json=options)
    assert dry.status_code == 200
    assert api.get(f"{CM.format(ns=ns)}/c").status_code == 404
    api.request("DELETE", f"{pods}/p", params={"gracePeriodSeconds": "0"})
    assert api.get(f"{pods}/p").status_code == 404


def test_dry_run_writes_nothing(api: httpx.Client, ns: str) -> None:
    """Rule: ``dryRun=All`` runs create/update/patch/delete through validation and answers as if
    done, but stores nothing."""
    dry = {"dryRun": "All"}
    created = api.post(CM.format(ns=ns), json=_cm("d", k="v"), params=dry)
    assert created.status_code == 201
    assert created.json()["data"] == {"k": "v"}
    assert api.get(f"{CM.format(ns=ns)}/d").status_code == 404
    invalid = api.post(CM.format(ns=ns), json=_cm("Bad_Name"), params=dry)
    assert invalid.status_code == 422
    stored = api.post(CM.format(ns=ns), json=_cm(k="1")).json()
    stored["data"] = {"k": "2"}
    assert api.put(f"{CM.format(ns=ns)}/c", json=stored, params=dry).json()["data"] == {"k": "2"}
    merge = {"Content-Type": "application/merge-patch+json"}
    patched = api.patch(
        f"{CM.format(ns=ns)}/c", json={"data": {"k": "3"}}, headers=merge, params=dry
    )
    assert patched.json()["data"] == {"k": "3"}
    assert api.delete(f"{CM.format(ns=ns)}/c", params=dry).status_code == 200
    current = api.get(f"{CM.format(ns=ns)}/c").json()
    assert current["data"] == {"k": "1"}
    assert current["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]


def test_finalizers_hold_the_object(api: httpx.Client, ns: str) -> None:
    """Rule: an object with finalizers gets deletionTimestamp and stays until they are removed;
    no new finalizers once it is being deleted (422); removing the last one deletes it."""
    body = _cm()
    body["metadata"]["finalizers"] = ["example.com/f"]
    api.post(CM.format(ns=ns), json=body)
    marked = api.delete(f"{CM.format(ns=ns)}/c")
    assert marked.status_code == 200
    current = api.get(f"{CM.format(ns=ns)}/c").json()
    assert current["metadata"]["deletionTimestamp"]
    assert current["metadata"]["finalizers"] == ["example.com/f"]
    current["metadata"]["finalizers"] = ["example.com/f", "example.com/g"]
    refused = api.put(f"{CM.format(ns=ns)}/c", json=current)
    assert refused.status_code == 422
    assert refused.json()["details"]["causes"][0]["field"] == "metadata.finalizers"
    current["metadata"]["finalizers"] = []
    assert api.put(f"{CM.format(ns=ns)}/c", json=current).status_code == 200
    assert api.get(f"{CM.format(ns=ns)}/c").status_code == 404


def test_no_op_update_keeps_the_resource_version(api: httpx.Client, ns: str) -> None:
    """Rule: an update that changes nothing writes nothing (same RV)."""
    created = api.post(CM.format(ns=ns), json=_cm(k="v")).json()
    again = api.put(f"{CM.format(ns=ns)}/c", json=created).json()
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_namespace_mismatch_is_bad_request(api: httpx.Client, ns: str) -> None:
    """Rule: metadata.namespace conflicting with the URL → 400."""
    body = _cm()
    body["metadata"]["namespace"] = "elsewhere"
    assert api.post(CM.format(ns=ns), json=body).status_code == 400


def test_deleting_a_namespace_removes_its_objects(api: httpx.Client, ns: str) -> None:
    """Deleting a namespace removes what it holds (the namespace controller's job)."""
    api.post(CM.format(ns=ns), json=_cm())
    assert api.delete(f"/api/v1/namespaces/{ns}").json()["status"]["phase"] == "Terminating"
    assert api.get(f"{CM.format(ns=ns)}/c").status_code == 404


def _big_pod(name: str, size: int) -> dict[str, Any]:
    container = {
        "name": "c",
        "image": "busybox:1.36",
        "env": [{"name": "BIG", "value": "x" * size}],
    }
    return {"metadata": {"name": name}, "spec": {"containers": [container]}}


def test_an_object_over_etcds_limit_is_refused_unstored(api: httpx.Client, ns: str) -> None:
    """Rule: an object whose stored encoding passes etcd's default request limit (1.5 MiB =
    1572864 bytes) is refused after admission with the apiserver's answer to etcd's error —
    500, no reason, ``etcdserver: request is too large`` — and nothing is stored; a body of
    2 MiB is under the 3 MiB request cap, so it is this limit, not the 413, that refuses it."""
    pods = f"/api/v1/namespaces/{ns}/pods"
    response = api.post(pods, json=_big_pod("huge", 1600 * 1024))
    assert response.status_code == 500
    assert response.json()["message"] == "etcdserver: request is too large"
    assert "reason" not in response.json()
    assert api.get(f"{pods}/huge").status_code == 404
    dry = api.post(pods, params={"dryRun": "All"}, json=_big_pod("huge", 1600 * 1024))
    assert dry.status_code == 201  # a dry run reaches no etcd
    assert api.post(pods, json=_big_pod("fits", 1400 * 1024)).status_code == 201


def test_an_update_over_etcds_limit_leaves_the_object_as_it_was(api: httpx.Client, ns: str) -> None:
    """Rule: an update that would pass 1.5 MiB gets the same 500 and changes nothing."""
    made = api.post(CM.format(ns=ns), json=_cm(small="x")).json()
    grown = api.patch(
        f"{CM.format(ns=ns)}/{made['metadata']['name']}",
        json={"data": {"a": "y" * (800 * 1024), "b": "z" * (800 * 1024)}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert grown.status_code == 500
    assert grown.json()["message"] == "etcdserver: request is too large"
    after = api.get(f"{CM.format(ns=ns)}/{made['metadata']['name']}").json()
    assert after["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]


def test_a_body_of_exactly_three_mebibytes_is_read(api: httpx.Client, ns: str) -> None:
    """Rule: the 3 MiB cap is inclusive — 3145728 bytes are read (then refused by the etcd
    limit), one byte more is the 413."""
    base = json.dumps(_big_pod("edge", 0)).encode()
    pad = 3 * 1024 * 1024 - len(base)
    body = json.dumps(_big_pod("edge", pad)).encode()
    assert len(body) == 3 * 1024 * 1024
    headers = {"Content-Type": "application/json"}
    exact = api.post(f"/api/v1/namespaces/{ns}/pods", content=body, headers=headers)
    assert exact.status_code == 500
    over = api.post(f"/api/v1/namespaces/{ns}/pods", content=body + b" ", headers=headers)
    assert over.status_code == 413


def test_a_lone_surrogate_is_stored_as_the_replacement_character(
    api: httpx.Client, ns: str
) -> None:
    """Rule: a ``\\ud800`` escape with no partner decodes to U+FFFD, as Go's JSON decoder
    reads it: the object is created and answered (no UTF-8 can carry the surrogate itself,
    so keeping it made the answer a 500 after the object was stored)."""
    body = b'{"metadata": {"name": "sur"}, "data": {"k": "a\\ud800b"}}'
    made = api.post(CM.format(ns=ns), content=body, headers={"Content-Type": "application/json"})
    assert made.status_code == 201
    assert made.json()["data"]["k"] == "a\ufffdb"
    assert api.get(f"{CM.format(ns=ns)}/sur").json()["data"]["k"] == "a\ufffdb"
