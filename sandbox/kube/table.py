"""Server-side printing: the ``meta.k8s.io/v1`` Table kubectl asks for.

kubectl sends ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` for ``get``;
each kind has its columns (pods: Name, Ready, Status, Restarts, Age, …), custom
resources use their CRD's ``additionalPrinterColumns`` (Age when none). Rows carry a
``PartialObjectMetadata`` (or the object with ``includeObject=Object``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sandbox.kube import jsonpath
from sandbox.kube.meta import parse_time
from sandbox.kube.registry import ResourceType

Obj = dict[str, Any]
Column = tuple[str, str, int, Callable[[Obj, datetime], Any]]


def wants_table(accept: str | None) -> bool:
    """Whether the Accept header asks for a Table."""
    return bool(accept) and "as=Table" in (accept or "")


def human_duration(seconds: float) -> str:
    """apimachinery ``duration.HumanDuration``."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 120:
        return f"{max(s, 0)}s"
    minutes, hours = s // 60, s // 3600
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    return f"{hours // 8760}y"


def _age(obj: Obj, now: datetime, path: str = "creationTimestamp") -> str:
    stamp = (obj.get("metadata") or {}).get(path) if "." not in path else None
    if not stamp:
        return "<unknown>"
    return human_duration((now - parse_time(stamp)).total_seconds())


def _name(obj: Obj, _: datetime) -> str:
    return str(obj["metadata"].get("name", ""))


def _pod_status(pod: Obj, _: datetime) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            return "SchedulingGated"
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return str(waiting["reason"])
    return str(status.get("reason") or status.get("phase") or "")


def _pod_ready(pod: Obj, _: datetime) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def _restarts(pod: Obj, _: datetime) -> int:
    return sum(
        int(c.get("restartCount") or 0)
        for c in (pod.get("status") or {}).get("containerStatuses") or []
    )


def _dig(*path: str, default: str = "<none>") -> Callable[[Obj, datetime], Any]:
    def read(obj: Obj, _: datetime) -> Any:
        values = jsonpath.evaluate(obj, "." + ".".join(path))
        return values[0] if values and values[0] not in ("", None) else default

    return read


def _node_status(node: Obj, _: datetime) -> str:
    ready = next(
        (c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"),
        None,
    )
    text = (
        "Ready" if ready and ready.get("status") == "True" else "NotReady" if ready else "Unknown"
    )
    return text + (",SchedulingDisabled" if (node.get("spec") or {}).get("unschedulable") else "")


def _event_object(event: Obj, _: datetime) -> str:
    involved = event.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


def _event_seen(event: Obj, now: datetime) -> str:
    stamp = (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event["metadata"].get("creationTimestamp")
    )
    return human_duration((now - parse_time(stamp)).total_seconds()) if stamp else "<unknown>"


def _count(obj: Obj, field: str) -> int:
    return int((obj.get("status") or {}).get(field) or 0)


def _ratio(obj: Obj, field: str) -> str:
    return f"{_count(obj, field)}/{int((obj.get('spec') or {}).get('replicas') or 0)}"


def _job_status(job: Obj, _: datetime) -> str:
    """What ``kubectl get jobs`` shows: Complete, Failed, Suspended or Running."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return str(condition["type"])
    return "Suspended" if (job.get("spec") or {}).get("suspend") else "Running"


def _completions(job: Obj, _: datetime) -> str:
    completions = (job.get("spec") or {}).get("completions")
    done = _count(job, "succeeded")
    return f"{done}/{completions}" if completions is not None else f"{done}/1 of 1"


_AGE: Column = ("Age", "string", 0, lambda o, now: _age(o, now))
_NAME: Column = ("Name", "string", 0, _name)
COLUMNS: dict[tuple[str, str], list[Column]] = {
    ("", "pods"): [
        _NAME,
        ("Ready", "string", 0, _pod_ready),
        ("Status", "string", 0, _pod_status),
        ("Restarts", "string", 0, _restarts),
        _AGE,
        ("IP", "string", 1, _dig("status", "podIP")),
        ("Node", "string", 1, _dig("spec", "nodeName")),
        ("Nominated Node", "string", 1, _dig("status", "nominatedNodeName")),
        ("Readiness Gates", "string", 1, lambda o, n: "<none>"),
    ],
    ("", "nodes"): [
        _NAME,
        ("Status", "string", 0, _node_status),
        ("Roles", "string", 0, lambda o, n: "<none>"),
        _AGE,
        ("Version", "string", 0, _dig("status", "nodeInfo", "kubeletVersion", default="")),
    ],
    ("", "namespaces"): [_NAME, ("Status", "string", 0, _dig("status", "phase", default="")), _AGE],
    ("", "events"): [
        ("Last Seen", "string", 0, _event_seen),
        ("Type", "string", 0, _dig("type", default="")),
        ("Reason", "string", 0, _dig("reason", default="")),
        ("Object", "string", 0, _event_object),
        ("Message", "string", 0, _dig("message", default="")),
    ],
    ("", "configmaps"): [
        _NAME,
        (
            "Data",
            "integer",
            0,
            lambda o, n: len(o.get("data") or {}) + len(o.get("binaryData") or {}),
        ),
        _AGE,
    ],
    ("", "secrets"): [
        _NAME,
        ("Type", "string", 0, _dig("type", default="")),
        ("Data", "integer", 0, lambda o, n: len(o.get("data") or {})),
        _AGE,
    ],
    ("apps", "deployments"): [
        _NAME,
        ("Ready", "string", 0, lambda o, n: _ratio(o, "readyReplicas")),
        ("Up-to-date", "integer", 0, lambda o, n: _count(o, "updatedReplicas")),
        ("Available", "integer", 0, lambda o, n: _count(o, "availableReplicas")),
        _AGE,
    ],
    ("apps", "replicasets"): [
        _NAME,
        ("Desired", "integer", 0, lambda o, n: int((o.get("spec") or {}).get("replicas") or 0)),
        ("Current", "integer", 0, lambda o, n: _count(o, "replicas")),
        ("Ready", "integer", 0, lambda o, n: _count(o, "readyReplicas")),
        _AGE,
    ],
    ("batch", "jobs"): [
        _NAME,
        ("Status", "string", 0, _job_status),
        ("Completions", "string", 0, _completions),
        _AGE,
    ],
    ("coordination.k8s.io", "leases"): [
        _NAME,
        ("Holder", "string", 0, _dig("spec", "holderIdentity", default="")),
        _AGE,
    ],
}


def _custom_columns(rtype: ResourceType) -> list[Column]:
    specs = (rtype.crd_version or {}).get("additionalPrinterColumns") or []
    if not specs:
        return [_NAME, _AGE]
    columns: list[Column] = [_NAME]
    for spec in specs:
        columns.append(
            (
                spec["name"],
                spec.get("type", "string"),
                int(spec.get("priority") or 0),
                _printer(spec),
            )
        )
    return columns


def _printer(spec: Obj) -> Callable[[Obj, datetime], Any]:
    def read(obj: Obj, now: datetime) -> Any:
        values = jsonpath.evaluate(obj, spec["jsonPath"])
        if not values:
            return None
        value = values[0]
        if spec.get("type") == "date" and isinstance(value, str):
            return human_duration((now - parse_time(value)).total_seconds())
        if isinstance(value, dict | list):
            return json.dumps(value)
        return value

    return read


def columns_for(rtype: ResourceType) -> list[Column]:
    """The table columns of a resource type."""
    if rtype.is_custom:
        return _custom_columns(rtype)
    return COLUMNS.get(
        rtype.store_key,
        [_NAME, ("Created At", "date", 0, _dig("metadata", "creationTimestamp", default=""))],
    )


def table(
    rtype: ResourceType, objects: list[Obj], now: datetime, include: str, headers: bool = True
) -> Obj:
    """A ``Table`` of ``objects`` (already shown through ``rtype``)."""
    columns = columns_for(rtype)
    body: Obj = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {}}
    if headers:
        body["columnDefinitions"] = [
            {
                "name": n,
                "type": "string" if t == "date" else t,
                "format": "name" if n == "Name" else "",
                "description": n,
                "priority": p,
            }
            for n, t, p, _ in columns
        ]
    else:
        body["columnDefinitions"] = None
    body["rows"] = [
        {"cells": [read(o, now) for _, _, _, read in columns], "object": _row_object(o, include)}
        for o in objects
    ]
    return body


def _row_object(obj: Obj, include: str) -> Obj:
    if include == "Object":
        return obj
    if include == "None":
        return {}
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }
