"""API conventions every kind shares (facts §2.2, §3.1–3.3, §3.7, §6; checklist 1–3, 16–17, 23, "
"31–33, 36–39)."""

from __future__ import annotations

from typing import Any

import httpx

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
    """Rule: client-sent uid, creationTimestamp and deletion fields are wiped at create."""
    body = _cm()
    body["metadata"].update(
        uid="mine",
        creationTimestamp="2001-01-01T00:00:00Z",
        deletionTimestamp="2001-01-01T00:00:00Z",
    )
    meta = api.post(CM.format(ns=ns), json=body).json()["metadata"]
    assert meta["uid"] != "mine"
    assert meta["creationTimestamp"] != "2001-01-01T00:00:00Z"
    assert "deletionTimestamp" not in meta


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
    """Rule: a create in a missing namespace → 404 ``namespaces "<ns>" not found``."""
    response = api.post(CM.format(ns="nowhere"), json=_cm())
    assert response.status_code == 404
    assert response.json()["message"] == 'namespaces "nowhere" not found'


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
    """Rule: a PUT without RV is allowed for pods, refused (422) for Leases."""
    created = api.post(f"/api/v1/namespaces/{ns}/pods", json=pod()).json()
    del created["metadata"]["resourceVersion"]
    assert api.put(f"/api/v1/namespaces/{ns}/pods/p", json=created).status_code == 200
    lease = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    assert api.post(LEASES.format(ns=ns), json=lease).status_code == 201
    response = api.put(f"{LEASES.format(ns=ns)}/l", json=lease)
    assert response.status_code == 422
    assert (
        'metadata.resourceVersion: Invalid value: "0x0": must be specified for an update'
        in response.json()["message"]
    )


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
    assert api.put(f"{LEASES.format(ns=ns)}/l", json=two).status_code == 409


def test_lease_counters_and_micro_time(api: httpx.Client, ns: str) -> None:
    """Rule: leaseDurationSeconds > 0, leaseTransitions >= 0, MicroTime has six digits."""
    bad = {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}}
    assert api.post(LEASES.format(ns=ns), json=bad).status_code == 422
    wrong_time = {"metadata": {"name": "l"}, "spec": {"renewTime": "2026-01-01T00:00:00Z"}}
    response = api.post(LEASES.format(ns=ns), json=wrong_time)
    assert response.status_code == 400
    good = {"metadata": {"name": "l"}, "spec": {"renewTime": "2026-01-01T00:00:00.000000Z"}}
    assert api.post(LEASES.format(ns=ns), json=good).status_code == 201


def test_time_without_zone_is_bad_request(api: httpx.Client, ns: str) -> None:
    """Rule: metav1.Time must be RFC 3339 with a zone, else 400."""
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"namespace": ns},
        "firstTimestamp": "2026-01-01T00:00:00",
    }
    assert api.post(f"/api/v1/namespaces/{ns}/events", json=event).status_code == 400


def test_label_and_annotation_syntax(api: httpx.Client, ns: str) -> None:
    """Rule: label keys/values and annotation keys are validated; the annotations total ≤ 256 "
    "KiB."""
    bad_label = _cm()
    bad_label["metadata"]["labels"] = {"ok": "not ok!"}
    assert api.post(CM.format(ns=ns), json=bad_label).status_code == 422
    bad_key = _cm()
    bad_key["metadata"]["annotations"] = {"-bad/": "x"}
    assert api.post(CM.format(ns=ns), json=bad_key).status_code == 422
    big = _cm()
    big["metadata"]["annotations"] = {"a": "x" * 262144}
    response = api.post(CM.format(ns=ns), json=big)
    assert response.status_code == 422
    assert "metadata.annotations: Too long" in response.json()["message"]


def test_body_over_three_mebibytes_is_413(api: httpx.Client, ns: str) -> None:
    """Rule: request bodies over 3 MiB → 413."""
    response = api.post(CM.format(ns=ns), json=_cm(big="x" * (3 * 1024 * 1024)))
    assert response.status_code == 413
    assert response.json()["reason"] == "RequestEntityTooLarge"


def test_delete_preconditions(api: httpx.Client, ns: str) -> None:
    """Rule: a DeleteOptions uid/resourceVersion precondition mismatch → 409."""
    created = api.post(CM.format(ns=ns), json=_cm()).json()
    wrong = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "other"}}
    response = api.request("DELETE", f"{CM.format(ns=ns)}/c", json=wrong)
    assert response.status_code == 409
    assert (
        "does not match the UID in record" in response.json()["message"]
        or "UID in precondition" in response.json()["message"]
    )
    right = {"preconditions": {"uid": created["metadata"]["uid"]}}
    answer = api.request("DELETE", f"{CM.format(ns=ns)}/c", json=right).json()
    assert answer["status"] == "Success"
    assert answer["details"]["uid"] == created["metadata"]["uid"]


def test_finalizers_hold_the_object(api: httpx.Client, ns: str) -> None:
    """Rule: an object with finalizers gets deletionTimestamp and stays until they are removed; "
    "no new ones then."""
    body = _cm()
    body["metadata"]["finalizers"] = ["example.com/f"]
    api.post(CM.format(ns=ns), json=body)
    marked = api.delete(f"{CM.format(ns=ns)}/c")
    assert marked.status_code == 200
    current = api.get(f"{CM.format(ns=ns)}/c").json()
    assert current["metadata"]["deletionTimestamp"]
    current["metadata"]["finalizers"] = ["example.com/f", "example.com/g"]
    assert api.put(f"{CM.format(ns=ns)}/c", json=current).status_code == 422
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
