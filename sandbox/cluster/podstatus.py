"""The pod statuses the sandbox kubelet writes: running, finished. No side effects."""

from __future__ import annotations

from typing import Any

from sandbox.cluster.scheduler import pod_scheduled

HOST_IP = "127.0.0.1"


def _condition(kind: str, status: str, now: str, reason: str = "") -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    if reason:
        condition["reason"] = reason
    return condition


def pod_ip(index: int) -> str:
    """The ``index``-th pod address: 127.1.0.2, 127.1.0.3, … (never 127.0.0.1)."""
    return f"127.1.{(index // 250) % 250}.{index % 250 + 2}"


def running_status(pod: dict[str, Any], now: str, ip: str) -> dict[str, Any]:
    """Every container started and ready; conditions as a kubelet reports them."""
    scheduled = pod_scheduled(pod) or _condition("PodScheduled", "True", now)
    conditions = [
        _condition("PodReadyToStartContainers", "True", now),
        _condition("Initialized", "True", now),
        _condition("Ready", "True", now),
        _condition("ContainersReady", "True", now),
        scheduled,
    ]
    statuses = [
        {
            "name": c.get("name", ""),
            "image": c.get("image", ""),
            "imageID": "",
            "containerID": f"sandbox://{c.get('name', '')}",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": now}},
        }
        for c in (pod.get("spec") or {}).get("containers") or []
    ]
    return {
        "phase": "Running",
        "conditions": conditions,
        "containerStatuses": statuses,
        "hostIP": HOST_IP,
        "hostIPs": [{"ip": HOST_IP}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
    }


def succeeded_status(pod: dict[str, Any], now: str) -> dict[str, Any]:
    """Every container exited 0: phase Succeeded, Ready False (PodCompleted)."""
    status = dict(pod.get("status") or {})
    kept = [
        c
        for c in status.get("conditions") or []
        if c.get("type") not in ("Ready", "ContainersReady", "PodReadyToStartContainers")
    ]
    status["conditions"] = [
        *kept,
        _condition("PodReadyToStartContainers", "False", now),
        _condition("Ready", "False", now, "PodCompleted"),
        _condition("ContainersReady", "False", now, "PodCompleted"),
    ]
    status["containerStatuses"] = [
        _terminated(s, now) for s in status.get("containerStatuses") or []
    ]
    status["phase"] = "Succeeded"
    return status


def _terminated(container: dict[str, Any], now: str) -> dict[str, Any]:
    started = ((container.get("state") or {}).get("running") or {}).get("startedAt", now)
    state = {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": now}
    return {**container, "ready": False, "started": False, "state": {"terminated": state}}


def rejected_status(pod: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """What a kubelet writes for a pod its admission refused (``rejectPod``): phase
    Failed with the reason and message; the conditions and QoS class kept."""
    status = dict(pod.get("status") or {})
    status.update(phase="Failed", reason=reason, message=message)
    return status


def missing_ephemeral(pod: dict[str, Any]) -> list[str]:
    """Names of ephemeral containers the pod's status does not report yet."""
    reported = {
        s.get("name") for s in (pod.get("status") or {}).get("ephemeralContainerStatuses") or []
    }
    return [
        str(c.get("name"))
        for c in (pod.get("spec") or {}).get("ephemeralContainers") or []
        if c.get("name") not in reported
    ]


def with_ephemeral_running(pod: dict[str, Any], now: str) -> dict[str, Any]:
    """The status with every ephemeral container reported running (they never become
    ready: ephemeral containers have no probes)."""
    status = dict(pod.get("status") or {})
    reported = list(status.get("ephemeralContainerStatuses") or [])
    images = {
        c.get("name"): c.get("image", "") for c in pod["spec"].get("ephemeralContainers") or []
    }
    for name in missing_ephemeral(pod):
        reported.append(
            {
                "name": name,
                "image": images.get(name, ""),
                "imageID": "",
                "containerID": f"sandbox://{name}",
                "ready": False,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
        )
    status["ephemeralContainerStatuses"] = reported
    return status
