"""userAccess: users may read GPUReservations and the leader Lease (for kubectl gpures),
nothing else."""

from __future__ import annotations

from typing import Any

from shared import vocab
from tests.chart.render import render, values

READER = f"{vocab.PRODUCT_NAME}-reservation-reader"


def users(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d
        for d in docs
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "users"
    ]


def test_by_default_every_authenticated_user_may_read_reservations_and_the_lease_only() -> None:
    role, binding = sorted(users(render(values())), key=lambda d: d["kind"])
    assert (role["kind"], binding["kind"]) == ("Role", "RoleBinding")
    assert role["rules"] == [
        {
            "apiGroups": [vocab.CRD_GROUP],
            "resources": [vocab.CRD_PLURAL],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [vocab.LEADER_LEASE_NAME],
            "verbs": ["get"],
        },
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == READER
    assert [s["name"] for s in binding["subjects"]] == ["system:authenticated"]


def test_subjects_can_be_narrowed_and_access_turned_off() -> None:
    group = {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "gpu-users"}
    docs = render(values(userAccess={"subjects": [group]}))
    (binding,) = [d for d in users(docs) if d["kind"] == "RoleBinding"]
    assert binding["subjects"] == [group]
    assert users(render(values(userAccess={"enabled": False}))) == []
