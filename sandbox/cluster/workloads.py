"""What the workload controllers decide, as pure functions (no side effects).

The pod-template hash, the pods a ReplicaSet or Job creates from its template
(``controller.GetPodFromTemplate``: template labels, annotations and finalizers,
``generateName: <owner>-``, an ownerReference with ``controller`` and
``blockOwnerDeletion``), which pods an owner controls, which to delete first when
scaling down, and the slow-start batches creations go in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from shared import vocab
from shared.resources import Resource

Obj = dict[str, Any]

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
JOBS = Resource("batch", "v1", "jobs", "Job")
#: The label the Deployment controller puts on its ReplicaSets and their pods.
POD_TEMPLATE_HASH = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
#: ``rand.SafeEncodeString``'s alphabet (no vowels, no look-alikes).
_SAFE = "bcdfghjklmnpqrstvwxz2456789"
#: Most pods one sync of a ReplicaSet or Job creates or deletes (``BurstReplicas``).
BURST_REPLICAS = 500
TERMINAL = frozenset({"Succeeded", "Failed"})


def template_hash(template: Obj, collision_count: int = 0) -> str:
    """The ``pod-template-hash`` of a pod template: FNV-1a (32 bits) of the template,
    the collision count mixed in, written as its decimal digits mapped through the
    safe alphabet — the form of ``controller.ComputeHash`` (which hashes Go's dump of
    the struct; the value here hashes canonical JSON, so it differs from a real
    cluster's for the same template)."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += str(collision_count).encode()
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[int(d)] for d in str(value))


def owner_reference(owner: Obj, res: Resource) -> Obj:
    """The controller ownerReference a controller puts on what it creates."""
    meta = owner["metadata"]
    return {
        "apiVersion": res.api_version,
        "kind": res.kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_uid(obj: Obj) -> str | None:
    """The uid of the object's controller (the ownerReference with ``controller: true``)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def pod_from_template(owner: Obj, res: Resource) -> Obj:
    """The pod a ReplicaSet or Job creates: its template with ``generateName``
    ``<owner>-`` and the controller reference."""
    template = (owner.get("spec") or {}).get("template") or {}
    meta = template.get("metadata") or {}
    pod_meta: Obj = {
        "generateName": f"{owner['metadata']['name']}-",
        "namespace": owner["metadata"]["namespace"],
        "ownerReferences": [owner_reference(owner, res)],
    }
    for key in ("labels", "annotations", "finalizers"):
        if meta.get(key):
            pod_meta[key] = json.loads(json.dumps(meta[key]))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod_meta,
        "spec": json.loads(json.dumps(template.get("spec") or {})),
    }


def is_active(pod: Obj) -> bool:
    """Neither finished nor being deleted (``controller.FilterActivePods``)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in TERMINAL and not (pod.get("metadata") or {}).get("deletionTimestamp")


def is_ready(pod: Obj) -> bool:
    """Its Ready condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def deletion_order(pod: Obj) -> tuple[int, int, int, int, str]:
    """Which pods go first when scaling down (``controller.ActivePodsWithRanks``
    ordering, the parts the sandbox has): unassigned before assigned, Pending before
    Running, not ready before ready, the lowest ``pod-deletion-cost`` (default 0) first,
    then the newest first."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(str(status.get("phase")), 0)
    created = str(meta.get("creationTimestamp") or "")
    newest_first = "".join(chr(0x10FFFF - ord(c)) for c in created)
    assigned = 1 if spec.get("nodeName") else 0
    ready = 1 if is_ready(pod) else 0
    return (assigned, phase_rank, ready, deletion_cost(pod), newest_first)


def deletion_cost(pod: Obj) -> int:
    """The pod's ``controller.kubernetes.io/pod-deletion-cost``, read as the controller
    reads it (``strconv.ParseInt(value, 10, 32)``): 0 when absent or not an int32."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(vocab.POD_DELETION_COST)
    if not isinstance(raw, str) or not re.fullmatch(r"[+-]?[0-9]+", raw):
        return 0
    cost = int(raw)
    return cost if -(2**31) <= cost < 2**31 else 0


def slow_start(count: int, initial: int = 1) -> Iterator[int]:
    """Batch sizes for ``count`` creations: 1, 2, 4, … (``slowStartBatch``), so a
    template the API refuses costs one call, not ``count``."""
    done, size = 0, initial
    while done < count:
        batch = min(size, count - done)
        yield batch
        done += batch
        size *= 2


def without_hash(template: Obj) -> Obj:
    """A ReplicaSet's template without the ``pod-template-hash`` label (to compare it
    with its Deployment's: ``EqualIgnoreHash``)."""
    copy: Obj = json.loads(json.dumps(template))
    labels = (copy.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(POD_TEMPLATE_HASH, None)
        if not labels:
            copy["metadata"].pop("labels")
    return copy


def same_template(deployment_template: Obj, rs_template: Obj) -> bool:
    """Whether the ReplicaSet runs the Deployment's current template."""
    wanted = json.loads(json.dumps(deployment_template))
    if not (wanted.get("metadata") or {}).get("labels"):
        wanted.setdefault("metadata", {}).pop("labels", None)
    return bool(without_hash(rs_template) == wanted)
