"""Finding things in rendered manifests."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
COMPONENT = "app.kubernetes.io/component"


def of_kind(docs: list[Obj], kind: str) -> list[Obj]:
    """Every object of ``kind``."""
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[Obj], kind: str, component: str | None = None) -> Obj:
    """The single object of ``kind`` (of ``component``)."""
    found = [
        d
        for d in of_kind(docs, kind)
        if component is None or d["metadata"].get("labels", {}).get(COMPONENT) == component
    ]
    assert len(found) == 1, f"{len(found)} {kind} objects for {component}"
    return found[0]


def named(docs: list[Obj], kind: str, name: str) -> Obj:
    """The object of ``kind`` called ``name``."""
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name}"
    return found[0]


def pod_spec(workload: Obj) -> Obj:
    """The pod template spec of a Deployment or Job."""
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def workloads(docs: list[Obj]) -> list[Obj]:
    """Every Deployment and Job."""
    return [d for d in docs if d.get("kind") in ("Deployment", "Job")]


def container(workload: Obj) -> Obj:
    """The one container of a workload."""
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1
    first: Obj = containers[0]
    return first


def env(workload: Obj) -> dict[str, Any]:
    """Environment of the workload's container: name → value, or its ``valueFrom``."""
    return {
        e["name"]: e.get("value", e.get("valueFrom")) for e in container(workload).get("env", [])
    }
