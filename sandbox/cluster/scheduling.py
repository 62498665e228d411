"""The scheduler's decisions over a snapshot of pods and nodes (the functional core).

No side effects. A pod is schedulable when it is Pending, unbound, not terminating,
ungated and addressed to the default scheduler. It goes to the feasible node with the
most free GPUs, then the most free CPU, then the first by name (kube-scheduler scores
with LeastAllocated and more; the sandbox only needs a stable, sensible choice).
Pods are considered by priority, then age; each placement is charged to the snapshot
so one pass never overfills a node. Pods of one *shape* (what the filters read:
tolerations, node selector, affinity, requests) get one evaluation while nothing has
been placed since: a burst of identical pods costs one fit check per pass, not one per
pod (the verdicts are the same ones). A ``Reads`` keeps each pod's requests and shape
per resourceVersion across passes (a pass runs after every change; parsing 200 pending
pods' quantities and shapes again each time was a third of the emulators' CPU in a
200-pod burst).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from sandbox.cluster.fit import Failure, NodeInfo, fit_error, node_failure
from sandbox.cluster.quantity import parse_quantity
from sandbox.cluster.requests import Resources, pod_requests
from shared import vocab

DEFAULT_SCHEDULER = "default-scheduler"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class Placement:
    """The verdict for one pod: a node, or the fit error message."""

    pod: dict[str, Any]
    node: str | None
    message: str = ""


def needs_scheduling(pod: dict[str, Any]) -> bool:
    """Pending, unbound, not terminating, no scheduling gates, default scheduler."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    return (
        phase == "Pending"
        and not spec.get("nodeName")
        and not meta.get("deletionTimestamp")
        and not spec.get("schedulingGates")
        and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
    )


def occupies_node(pod: dict[str, Any]) -> bool:
    """Bound and not finished: its requests count against the node."""
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in TERMINAL_PHASES


class Reads:
    """Each pod's requests and shape, kept per pod version: its spec only changes with
    its resourceVersion (a pod without uid or resourceVersion is read afresh)."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[str, Resources, str]] = {}

    def of(self, pod: dict[str, Any]) -> tuple[Resources, str]:
        """``(pod_requests(pod), shape(pod))``; the requests are shared: do not modify."""
        meta = pod.get("metadata") or {}
        uid, version = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        kept = self._kept.get(uid)
        if kept is not None and kept[0] == version and version:
            return kept[1], kept[2]
        wanted = pod_requests(pod)
        read = (wanted, shape(pod, wanted))
        if uid and version:
            self._kept[uid] = (version, *read)
        return read

    def keep(self, uids: set[str]) -> None:
        """Forget pods not in ``uids`` (gone)."""
        for uid in self._kept.keys() - uids:
            del self._kept[uid]


def node_infos(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], reads: Reads | None = None
) -> dict[str, NodeInfo]:
    """Every node with what its bound, unfinished pods request."""
    reads = reads or Reads()
    by_name = {str(n["metadata"]["name"]): n for n in nodes}
    requested: dict[str, Resources] = {name: {} for name in by_name}
    counts = dict.fromkeys(by_name, 0)
    for pod in pods:
        name = (pod.get("spec") or {}).get("nodeName")
        if name in requested and occupies_node(pod):
            total = requested[name]
            for resource, amount in reads.of(pod)[0].items():
                total[resource] = total.get(resource, Decimal(0)) + amount
            counts[name] += 1
    return {name: NodeInfo(n, requested[name], counts[name]) for name, n in by_name.items()}


def charge(info: NodeInfo, wanted: Resources) -> NodeInfo:
    """``info`` with one more pod requesting ``wanted``."""
    requested = dict(info.requested)
    for resource, amount in wanted.items():
        requested[resource] = requested.get(resource, Decimal(0)) + amount
    return replace(info, requested=requested, pod_count=info.pod_count + 1)


def _free(info: NodeInfo, resource: str) -> Decimal:
    allocatable = (info.node.get("status") or {}).get("allocatable") or {}
    return parse_quantity(allocatable.get(resource, 0)) - info.requested.get(resource, Decimal(0))


def _preference(info: NodeInfo) -> tuple[Decimal, Decimal, str]:
    return (-_free(info, vocab.GPU_RESOURCE), -_free(info, "cpu"), info.name)


def place(
    pod: dict[str, Any], infos: dict[str, NodeInfo], wanted: Resources | None = None
) -> Placement:
    """Where ``pod`` goes given ``infos`` (every node filtered, like kube-scheduler);
    ``wanted``: its requests when known."""
    wanted = pod_requests(pod) if wanted is None else wanted
    failures: list[Failure] = []
    feasible: list[NodeInfo] = []
    for info in infos.values():
        failure = node_failure(pod, wanted, info)
        if failure is None:
            feasible.append(info)
        else:
            failures.append(failure)
    if not feasible:
        return Placement(pod, None, fit_error(len(infos), failures))
    return Placement(pod, min(feasible, key=_preference).name)


def _order(pod: dict[str, Any]) -> tuple[int, str, str]:
    meta = pod.get("metadata") or {}
    priority = int((pod.get("spec") or {}).get("priority") or 0)
    return (-priority, str(meta.get("creationTimestamp") or ""), str(meta.get("name", "")))


def shape(pod: dict[str, Any], wanted: Resources | None = None) -> str:
    """What the filters read of ``pod`` (``wanted``: its requests when known), as a key
    (pods of one shape fit alike)."""
    spec = pod.get("spec") or {}
    read = {k: spec.get(k) for k in ("tolerations", "nodeSelector", "affinity")}
    wanted = pod_requests(pod) if wanted is None else wanted
    requests = sorted((k, str(v)) for k, v in wanted.items())
    return json.dumps([read, requests], sort_keys=True, default=str)


def schedule(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], reads: Reads | None = None
) -> list[Placement]:
    """One scheduling pass: a placement for every pod that needs one, in queue order
    (``reads``: requests and shapes kept from earlier passes)."""
    reads = reads or Reads()
    infos = node_infos(nodes, pods, reads)
    placements = []
    #: Verdicts of unplaceable shapes, valid until the next placement charges a node.
    refused: dict[str, Placement] = {}
    for pod in sorted(filter(needs_scheduling, pods), key=_order):
        wanted, key = reads.of(pod)
        known = refused.get(key)
        placement = replace(known, pod=pod) if known is not None else place(pod, infos, wanted)
        if placement.node is not None:
            infos[placement.node] = charge(infos[placement.node], wanted)
            refused.clear()
        else:
            refused[key] = placement
        placements.append(placement)
    return placements
