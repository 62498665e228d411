"""Nodes (facts §7; checklist 37): quantities, taints, cordon, the Ready condition."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shared import vocab

NODES = "/api/v1/nodes"


@pytest.fixture
def name(api: httpx.Client) -> Iterator[str]:
    """A fresh node name, deleted after the test."""
    node = f"node-{uuid.uuid4().hex[:8]}"
    yield node
    api.delete(f"{NODES}/{node}")


def _node(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec}


def test_seeded_node_has_quantity_strings_and_a_full_ready_condition(api: httpx.Client) -> None:
    """Rule: capacity/allocatable are maps of quantity strings; the Ready condition carries type,
    status, reason, message, lastHeartbeatTime and lastTransitionTime."""
    node = api.get(f"{NODES}/n1").json()
    for part in ("capacity", "allocatable"):
        quantities = node["status"][part]
        assert quantities[vocab.GPU_RESOURCE] == "4"
        assert all(isinstance(v, str) for v in quantities.values())
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert ready["reason"] == "KubeletReady"
    assert ready["message"]
    assert ready["lastHeartbeatTime"].endswith("Z")
    assert ready["lastTransitionTime"].endswith("Z")


@pytest.mark.parametrize(
    ("taint", "cause"),
    [
        pytest.param({"key": "a", "effect": "Sometimes"}, "FieldValueNotSupported", id="effect"),
        pytest.param({"key": "a"}, "FieldValueRequired", id="no-effect"),
        pytest.param(
            {"key": "bad key!", "effect": vocab.TAINT_EFFECT_NO_SCHEDULE},
            "FieldValueInvalid",
            id="key",
        ),
        pytest.param(
            {"key": "a", "value": "not ok!", "effect": vocab.TAINT_EFFECT_NO_SCHEDULE},
            "FieldValueInvalid",
            id="value",
        ),
    ],
)
def test_taints_are_validated(
    api: httpx.Client, name: str, taint: dict[str, str], cause: str
) -> None:
    """Rule: a taint needs a label-syntax key and value and an effect of NoSchedule,
    PreferNoSchedule or NoExecute → else 422 on ``spec.taints[i].<field>``."""
    response = api.post(NODES, json=_node(name, taints=[taint]))
    assert response.status_code == 422
    body = response.json()
    assert body["message"].startswith(f'Node "{name}" is invalid: spec.taints[0].')
    [found] = body["details"]["causes"]
    assert found["reason"] == cause
    assert found["field"].startswith("spec.taints[0].")


def test_every_effect_is_accepted(api: httpx.Client, name: str) -> None:
    """Rule: the three taint effects are valid, with or without a value."""
    taints = [
        {"key": "a", "value": "1", "effect": vocab.TAINT_EFFECT_NO_SCHEDULE},
        {"key": "b", "effect": "PreferNoSchedule"},
        {"key": "c", "effect": "NoExecute"},
    ]
    response = api.post(NODES, json=_node(name, taints=taints))
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["taints"] == taints


def test_quantities_must_parse(api: httpx.Client, name: str) -> None:
    """Rule: capacity/allocatable values must be quantities (422 otherwise)."""
    body = _node(name)
    body["status"] = {"allocatable": {"cpu": "lots"}}
    response = api.post(NODES, json=body)
    assert response.status_code == 422
    assert response.json()["details"]["causes"][0]["field"] == "status.allocatable[cpu]"
    body["status"] = {"allocatable": {"cpu": "500m", "memory": "16Gi", vocab.GPU_RESOURCE: "8"}}
    assert api.post(NODES, json=body).status_code == 201


def test_cordon_and_status_only_through_status(api: httpx.Client, name: str) -> None:
    """Rule: ``spec.unschedulable`` is an ordinary spec field (kubectl cordon patches it); status
    may be set at create but a main-resource write keeps the stored status, ``/status`` writes
    it."""
    body = _node(name)
    body["status"] = {"allocatable": {vocab.GPU_RESOURCE: "8"}}
    assert api.post(NODES, json=body).status_code == 201
    merge = {"Content-Type": "application/strategic-merge-patch+json"}
    cordoned = api.patch(
        f"{NODES}/{name}",
        json={"spec": {"unschedulable": True}, "status": {"allocatable": {"cpu": "1"}}},
        headers=merge,
    ).json()
    assert cordoned["spec"]["unschedulable"] is True
    assert cordoned["status"]["allocatable"] == {vocab.GPU_RESOURCE: "8"}
    written = api.patch(
        f"{NODES}/{name}/status",
        json={
            "status": {"allocatable": {vocab.GPU_RESOURCE: "4"}},
            "spec": {"unschedulable": False},
        },
        headers=merge,
    ).json()
    assert written["status"]["allocatable"] == {vocab.GPU_RESOURCE: "4"}
    assert written["spec"]["unschedulable"] is True
