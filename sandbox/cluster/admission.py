"""The kubelet's admission of a pod bound to its node (the functional core). No side
effects.

A pod reaches a kubelet either through the scheduler's binding or because its creator
set ``spec.nodeName`` — then no scheduler ever looked at it. Either way the kubelet
admits it before starting it, against the pods it admitted before (kubelet
``lifecycle.predicateAdmitHandler`` → ``generalFilter`` → the scheduler's
``AdmissionCheck``):

1. resources (NodeResourcesFit): the pod count first (``Too many pods``), then cpu,
   memory, ephemeral-storage, then extended resources by name. An extended resource
   the node does not list in ``allocatable`` at all is dropped from the pod's requests
   first (``removeMissingExtendedResources``: cluster-level resources are unknown to
   nodes), so only a node that lists ``nvidia.com/gpu`` refuses a GPU pod;
2. node affinity and ``nodeSelector`` (NodeAffinity);
3. taints, **NoExecute only** (TaintToleration): a NoSchedule taint is the scheduler's
   business, so a pod pinned by ``nodeName`` runs on a NoSchedule-tainted node. An
   unschedulable (cordoned) node admits it too.

The first failure rejects the pod: phase ``Failed``, ``reason`` ``OutOf<resource>``
(``OutOfcpu``, ``OutOfnvidia.com/gpu``, ``OutOfpods``) or the plugin's name
(``NodeAffinity``, ``TaintToleration``), and message ``Pod was rejected: <why>`` where
``<why>`` is ``Node didn't have enough resource: <r>, requested: <n>, used: <n>,
capacity: <n>`` (cpu in millicores) or ``Predicate <plugin> failed: <reason>``; the
kubelet also records a Warning Event with that reason and ``<why>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from sandbox.cluster.fit import REASON_AFFINITY, affinity_matches, tolerates
from sandbox.cluster.quantity import parse_quantity
from sandbox.cluster.requests import Resources

#: ``tainttoleration.ErrReasonNotMatch``.
REASON_TAINTS = "node(s) had taints that the pod didn't tolerate"
_BASIC = ("cpu", "memory", "ephemeral-storage")
_NO_EXECUTE = "NoExecute"


@dataclass(frozen=True)
class Rejection:
    """Why the kubelet refuses a pod: the status/Event reason and the Event message."""

    reason: str
    message: str

    @property
    def status_message(self) -> str:
        """The pod's ``status.message``."""
        return f"Pod was rejected: {self.message}"


def _whole(resource: str, amount: Decimal) -> int:
    """How ``InsufficientResourceError`` prints an amount: cpu in millicores, the rest
    as integers (rounded up, as a quantity's ``Value()`` is)."""
    scaled = amount * 1000 if resource == "cpu" else amount
    return int(scaled.to_integral_value(rounding=ROUND_CEILING))


def _out_of(resource: str, requested: Decimal, used: Decimal, capacity: Decimal) -> Rejection:
    why = (
        f"Node didn't have enough resource: {resource}, requested: {_whole(resource, requested)}, "
        f"used: {_whole(resource, used)}, capacity: {_whole(resource, capacity)}"
    )
    return Rejection(f"OutOf{resource}", why)


def _predicate(plugin: str, reason: str) -> Rejection:
    return Rejection(plugin, f"Predicate {plugin} failed: {reason}")


def admit(
    pod: dict[str, Any], wanted: Resources, node: dict[str, Any], used: Resources, pods: int
) -> Rejection | None:
    """The kubelet's verdict on ``pod`` (requesting ``wanted``) on ``node``, where the
    pods it admitted before request ``used`` and number ``pods``; None: admitted."""
    allocatable = {
        name: parse_quantity(value)
        for name, value in ((node.get("status") or {}).get("allocatable") or {}).items()
    }
    if "pods" in allocatable and pods + 1 > allocatable["pods"]:
        return _out_of("pods", Decimal(1), Decimal(pods), allocatable["pods"])
    known = {
        name: amount
        for name, amount in wanted.items()
        if name in _BASIC or (name in allocatable and name != "pods")
    }
    order = [r for r in _BASIC if r in known] + sorted(r for r in known if r not in _BASIC)
    for resource in order:
        amount = known[resource]
        capacity = allocatable.get(resource, Decimal(0))
        taken = used.get(resource, Decimal(0))
        if amount > 0 and amount > capacity - taken:
            return _out_of(resource, amount, taken, capacity)
    if not affinity_matches(pod, node):
        return _predicate("NodeAffinity", REASON_AFFINITY)
    tolerations = list((pod.get("spec") or {}).get("tolerations") or [])
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") == _NO_EXECUTE and not any(tolerates(t, taint) for t in tolerations):
            return _predicate("TaintToleration", REASON_TAINTS)
    return None
