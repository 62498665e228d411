"""The status of a pod the sandbox runs as processes, as a kubelet writes it. No side
effects.

``ContainerView`` is what the runtime knows of one container; ``pod_status`` builds the
pod's status from the views: phase (Pending until every container has been created,
Succeeded/Failed once every container has finished for good under ``Never`` or
``OnFailure``, Running otherwise), the conditions (Ready and ContainersReady follow the
containers' readiness, with the kubelet's ``ContainersNotReady`` reason and message),
and ``containerStatuses`` with ``state``, ``lastState``, ``ready``, ``started`` and
``restartCount``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sandbox.cluster.podstatus import HOST_IP
from sandbox.cluster.scheduler import pod_scheduled

Obj = dict[str, Any]

# The kubelet's waiting and terminated reasons, and the Event reasons it records.
CONTAINER_CREATING = "ContainerCreating"
CRASH_LOOP = "CrashLoopBackOff"
CONFIG_ERROR = "CreateContainerConfigError"
COMPLETED = "Completed"
ERROR = "Error"
CONTAINERS_NOT_READY = "ContainersNotReady"
POD_COMPLETED = "PodCompleted"


@dataclass
class ContainerView:
    """One container: its spec, state and counters."""

    spec: Obj
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": CONTAINER_CREATING}})
    last_state: Obj = field(default_factory=dict)
    restart_count: int = 0
    ready: bool = False
    #: Whether a process of it ever ran.
    created: bool = False
    #: Finished for good (the restart policy brings it back no more).
    done: bool = False
    container_id: str = ""

    @property
    def name(self) -> str:
        return str(self.spec.get("name") or "")


def phase(views: Sequence[ContainerView]) -> str:
    """Pending, Running, Succeeded or Failed."""
    if any(not v.created for v in views):
        return "Pending"
    if views and all(v.done for v in views):
        codes = [((v.state.get("terminated") or {}).get("exitCode")) for v in views]
        return "Succeeded" if all(code == 0 for code in codes) else "Failed"
    return "Running"


def _condition(kind: str, ok: bool, since: str, reason: str = "", message: str = "") -> Obj:
    condition: Obj = {
        "type": kind,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": since,
    }
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def conditions(
    pod: Obj, views: Sequence[ContainerView], now: str, since: dict[str, tuple[bool, str]]
) -> list[Obj]:
    """The pod's conditions; ``since`` (type → (status, time)) keeps transition times and
    is updated in place."""
    current = phase(views)
    unready = [v.name for v in views if not v.ready]
    ready = not unready and current == "Running"
    wanted = {
        "PodReadyToStartContainers": current in ("Pending", "Running"),
        "Initialized": True,
        "Ready": ready,
        "ContainersReady": ready,
    }
    out = []
    for kind, ok in wanted.items():
        if since.get(kind, (None, ""))[0] != ok:
            since[kind] = (ok, now)
        reason = message = ""
        if kind in ("Ready", "ContainersReady") and not ok:
            reason = POD_COMPLETED if current in ("Succeeded", "Failed") else CONTAINERS_NOT_READY
            if reason == CONTAINERS_NOT_READY:
                message = f"containers with unready status: [{' '.join(unready)}]"
        out.append(_condition(kind, ok, since[kind][1], reason, message))
    scheduled = pod_scheduled(pod) or _condition("PodScheduled", True, now)
    return [*out, scheduled]


def container_status(view: ContainerView) -> Obj:
    """One entry of ``containerStatuses``."""
    return {
        "name": view.name,
        "image": view.spec.get("image", ""),
        "imageID": "",
        **({"containerID": view.container_id} if view.container_id else {}),
        "ready": view.ready,
        "started": "running" in view.state,
        "restartCount": view.restart_count,
        "state": view.state,
        "lastState": view.last_state,
    }


def pod_status(
    pod: Obj,
    views: Sequence[ContainerView],
    ip: str,
    now: str,
    started: str,
    since: dict[str, tuple[bool, str]],
) -> Obj:
    """The whole status a kubelet would write for the pod now."""
    return {
        "phase": phase(views),
        "conditions": conditions(pod, views, now, since),
        "containerStatuses": [container_status(v) for v in views],
        "hostIP": HOST_IP,
        "hostIPs": [{"ip": HOST_IP}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": started,
    }


def terminated(code: int, started: str, finished: str, message: str, cid: str) -> Obj:
    """A ``terminated`` state (signals as 128 + the signal, as runtimes report them)."""
    exit_code = 128 - code if code < 0 else code
    state: Obj = {
        "exitCode": exit_code,
        "reason": COMPLETED if exit_code == 0 else ERROR,
        "startedAt": started,
        "finishedAt": finished,
        "containerID": cid,
    }
    if message:
        state["message"] = message
    return {"terminated": state}
