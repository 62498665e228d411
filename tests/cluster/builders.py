"""Builders for nodes and pods in scheduler tests."""

from __future__ import annotations

from typing import Any

from shared import vocab


def node(
    name: str,
    gpus: int = 8,
    cpu: str = "64",
    memory: str = "512Gi",
    taints: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    ready: str | None = "True",
    unschedulable: bool = False,
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, vocab.GPU_RESOURCE: str(gpus), "pods": "110"}
    status: dict[str, Any] = {"allocatable": allocatable, "capacity": dict(allocatable)}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready}]
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": status,
    }


def reservation_taint(gpu_class: str = "h100") -> dict[str, Any]:
    return {
        "key": vocab.RESERVATION_TAINT_KEY,
        "value": gpu_class,
        "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
    }


def reservation_toleration(gpu_class: str = "h100") -> dict[str, Any]:
    return {
        "key": vocab.RESERVATION_TAINT_KEY,
        "operator": "Equal",
        "value": gpu_class,
        "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
    }


def pod(
    name: str = "p",
    gpus: int = 0,
    cpu: str | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    node_name: str | None = None,
    phase: str = "Pending",
    **spec: Any,
) -> dict[str, Any]:
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if gpus:
        limits[vocab.GPU_RESOURCE] = str(gpus)
    if cpu:
        requests["cpu"] = cpu
    container = {
        "name": "main",
        "image": "busybox",
        "resources": {"limits": limits, "requests": requests},
    }
    body: dict[str, Any] = {"containers": [container], "tolerations": tolerations or [], **spec}
    if node_name:
        body["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": body,
        "status": {"phase": phase},
    }
