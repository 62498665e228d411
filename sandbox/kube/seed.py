"""Seeding the cluster from a scenario's ``namespaces`` and ``nodes`` sections.

``namespaces``: a list of names. ``nodes``: a list of mappings with ``name``,
``labels``, ``taints`` (``"key=value:Effect"`` or ``"key:Effect"``), ``allocatable``
(resource → quantity), ``ready`` (default true) and ``unschedulable`` (alias
``cordoned``). Every problem is reported with its place (``nodes[2].taints[0]``) as a
``ValueError``. Objects are created through the API path, so they are validated like
any client's.
"""

from __future__ import annotations

import re
from typing import Any

from sandbox.kube.admission_api import UserInfo
from sandbox.kube.auth import ADMIN_USER, MASTERS
from sandbox.kube.cluster import Call, Cluster
from sandbox.kube.errors import ApiError
from sandbox.kube.meta import format_time
from sandbox.kube.writes import create
from shared import vocab

Obj = dict[str, Any]

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_NODE_KEYS = frozenset(
    {"name", "labels", "taints", "allocatable", "ready", "unschedulable", "cordoned"}
)
_TAINT = re.compile(r"^([^=:\s]+)(?:=([^:\s]*))?:(\S+)$")
_ADMIN = UserInfo(ADMIN_USER, "", (MASTERS,))


def _fail(where: str, problem: str) -> ValueError:
    return ValueError(f"scenario {where}: {problem}")


def parse_taint(text: Any, where: str) -> Obj:
    """``key=value:Effect`` → a taint object."""
    match = _TAINT.match(text) if isinstance(text, str) else None
    if match is None:
        raise _fail(where, f"{text!r} is not a taint of the form key=value:Effect or key:Effect")
    key, value, effect = match.groups()
    taint: Obj = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return taint


def _string_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(where, "must be a mapping")
    return {str(k): str(v) for k, v in value.items()}


def _flag(value: Any, where: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _fail(where, f"must be true or false, got {value!r}")
    return value


def node_object(spec: Any, index: int) -> Obj:
    """The Node a scenario entry describes."""
    where = f"nodes[{index}]"
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise _fail(where, "must be a mapping with a name")
    unknown = sorted(set(spec) - _NODE_KEYS)
    if unknown:
        raise _fail(where, f"unknown key(s) {unknown}; known: {sorted(_NODE_KEYS)}")
    name = spec["name"]
    taints = spec.get("taints") or []
    if not isinstance(taints, list):
        raise _fail(f"{where}.taints", "must be a list")
    parsed = [parse_taint(t, f"{where}.taints[{i}]") for i, t in enumerate(taints)]
    ready = _flag(spec.get("ready"), f"{where}.ready", True)
    cordoned = _flag(
        spec.get("unschedulable", spec.get("cordoned")), f"{where}.unschedulable", False
    )
    allocatable = _string_map(spec.get("allocatable"), f"{where}.allocatable")
    allocatable.setdefault("pods", "110")
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }
    labels.update(_string_map(spec.get("labels"), f"{where}.labels"))
    parsed += _lifecycle_taints(ready, cordoned)
    node_spec: Obj = {"taints": parsed} if parsed else {}
    if cordoned:
        node_spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": node_spec,
        "status": _node_status(name, index, allocatable, ready),
    }


def _lifecycle_taints(ready: bool, cordoned: bool) -> list[Obj]:
    """The taints the node lifecycle controller would add."""
    taints: list[Obj] = []
    if not ready:
        taints += [
            {"key": "node.kubernetes.io/not-ready", "effect": e}
            for e in (vocab.TAINT_EFFECT_NO_SCHEDULE, "NoExecute")
        ]
    if cordoned:
        taints.append(
            {"key": "node.kubernetes.io/unschedulable", "effect": vocab.TAINT_EFFECT_NO_SCHEDULE}
        )
    return taints


def _node_status(name: str, index: int, allocatable: dict[str, str], ready: bool) -> Obj:
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status"
        if ready
        else "Kubelet stopped posting node status.",
    }
    return {
        "capacity": dict(allocatable),
        "allocatable": dict(allocatable),
        "conditions": [condition],
        "addresses": [
            {"type": "InternalIP", "address": f"10.0.{index // 250}.{index % 250 + 1}"},
            {"type": "Hostname", "address": name},
        ],
        "nodeInfo": {
            "kubeletVersion": "v1.32.0-sandbox",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def namespace_names(section: Any) -> list[str]:
    """The ``namespaces`` section: a list of names."""
    if section is None:
        return []
    if not isinstance(section, list) or not all(isinstance(n, str) for n in section):
        raise _fail("namespaces", "must be a list of namespace names")
    return list(section)


async def seed(cluster: Cluster, scenario: dict[str, Any]) -> None:
    """Create the system namespaces, the scenario's namespaces and its nodes."""
    nodes_section = scenario.get("nodes") or []
    if not isinstance(nodes_section, list):
        raise _fail("nodes", "must be a list")
    nodes = [node_object(n, i) for i, n in enumerate(nodes_section)]
    stamp = format_time(cluster.now())
    for node in nodes:
        for condition in node["status"]["conditions"]:
            condition.setdefault("lastHeartbeatTime", stamp)
            condition.setdefault("lastTransitionTime", stamp)
    wanted = list(dict.fromkeys([*SYSTEM_NAMESPACES, *namespace_names(scenario.get("namespaces"))]))
    for name in wanted:
        await _create(
            cluster,
            "namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
            f"namespaces: {name!r}",
        )
    for index, node in enumerate(nodes):
        await _create(cluster, "nodes", node, f"nodes[{index}]")


async def _create(cluster: Cluster, plural: str, body: Obj, where: str) -> None:
    rtype = cluster.registry.find("", "v1", plural)
    assert rtype is not None
    if cluster.store.get("", plural, "", body["metadata"]["name"]) is not None:
        return
    call = Call(rtype, cluster.strategy(rtype), _ADMIN)
    try:
        await create(cluster, call, body)
    except ApiError as exc:
        raise _fail(where, str(exc.status.get("message"))) from exc
