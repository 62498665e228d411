"""Whether a pod fits a node, and the scheduler's message when it fits none.

No side effects. Filters run in kube-scheduler's order and a node fails on the first
plugin that rejects it (NodeResourcesFit can give several reasons at once):
NodeUnschedulable, TaintToleration, NodeAffinity (nodeSelector + required affinity),
NodeResourcesFit. A node whose Ready condition is not True is treated as carrying the
``node.kubernetes.io/not-ready`` (False) or ``…/unreachable`` (Unknown or missing)
NoSchedule taint, as the node lifecycle controller would add. Sources: kubernetes/
kubernetes ``pkg/scheduler/framework/plugins/{nodeunschedulable,tainttoleration,
nodeaffinity,noderesources}``, ``pkg/scheduler/framework/types.go`` (``FitError``),
kubernetes/component-helpers ``scheduling/corev1`` (toleration and node selector rules).

The taint reason uses the wording that names the taint (``node(s) had untolerated taint
{<key>: <value>}``, up to 1.33); 1.35 hides key and value. Issue 3 asks for the naming form.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sandbox.cluster.quantity import parse_quantity
from sandbox.cluster.requests import Resources
from shared import vocab
from shared.policy.affinity import allows, constraint_of

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NO_EXECUTE = "NoExecute"
_BLOCKING_EFFECTS = (vocab.TAINT_EFFECT_NO_SCHEDULE, NO_EXECUTE)

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
_BASIC_RESOURCES = ("cpu", "memory", "ephemeral-storage")


@dataclass(frozen=True)
class NodeInfo:
    """A node and what the pods already bound to it request."""

    node: dict[str, Any]
    requested: Resources = field(default_factory=dict)
    pod_count: int = 0

    @property
    def name(self) -> str:
        return str((self.node.get("metadata") or {}).get("name", ""))


@dataclass(frozen=True)
class Failure:
    """Why a node was rejected; ``resolvable`` if preemption could in principle help."""

    reasons: tuple[str, ...]
    resolvable: bool


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """The toleration matches the taint (effect, key, operator Equal|Exists, value)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator != "Equal":
        return False
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(
    taints: list[dict[str, Any]], tolerations: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The first NoSchedule/NoExecute taint no toleration matches."""
    for taint in taints:
        if taint.get("effect") not in _BLOCKING_EFFECTS:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def effective_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The node's taints plus the lifecycle taint its Ready condition implies."""
    taints = list((node.get("spec") or {}).get("taints") or [])
    ready = _ready_status(node)
    if ready == "True":
        return taints
    key = NOT_READY_TAINT if ready == "False" else UNREACHABLE_TAINT
    if not any(t.get("key") == key for t in taints):
        taints.append({"key": key, "effect": vocab.TAINT_EFFECT_NO_SCHEDULE})
    return taints


def _ready_status(node: dict[str, Any]) -> str:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status", "Unknown"))
    return "Unknown"


def taint_reason(taint: dict[str, Any]) -> str:
    """``node(s) had untolerated taint {<key>: <value>}``."""
    return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"


def affinity_matches(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """``nodeSelector`` (every label equal) and required node affinity (any term), by
    ``shared.policy.affinity`` (the reconciler's guards use the same rules)."""
    meta = node.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    constraint = constraint_of(pod.get("spec") or {})
    return allows(constraint, labels, str(meta.get("name", "")))


def insufficient(wanted: Resources, info: NodeInfo) -> list[str]:
    """NodeResourcesFit's reasons: ``Too many pods`` and ``Insufficient <resource>``."""
    allocatable = (info.node.get("status") or {}).get("allocatable") or {}
    reasons = []
    if "pods" in allocatable and info.pod_count + 1 > parse_quantity(allocatable["pods"]):
        reasons.append(REASON_TOO_MANY_PODS)
    ordered = [r for r in _BASIC_RESOURCES if r in wanted] + sorted(
        r for r in wanted if r not in _BASIC_RESOURCES and r != "pods"
    )
    for resource in ordered:
        amount = wanted[resource]
        free = parse_quantity(allocatable.get(resource, 0)) - info.requested.get(
            resource, Decimal(0)
        )
        if amount > 0 and amount > free:
            reasons.append(f"Insufficient {resource}")
    return reasons


def node_failure(pod: dict[str, Any], wanted: Resources, info: NodeInfo) -> Failure | None:
    """Why ``pod`` cannot go to ``info.node`` (None: it fits), first failing filter wins."""
    spec = pod.get("spec") or {}
    tolerations = list(spec.get("tolerations") or [])
    if (info.node.get("spec") or {}).get("unschedulable"):
        cordon = {"key": UNSCHEDULABLE_TAINT, "effect": vocab.TAINT_EFFECT_NO_SCHEDULE}
        if not any(tolerates(t, cordon) for t in tolerations):
            return Failure((REASON_UNSCHEDULABLE,), resolvable=False)
    taint = untolerated_taint(effective_taints(info.node), tolerations)
    if taint is not None:
        return Failure((taint_reason(taint),), resolvable=False)
    if not affinity_matches(pod, info.node):
        return Failure((REASON_AFFINITY,), resolvable=False)
    reasons = insufficient(wanted, info)
    return Failure(tuple(reasons), resolvable=True) if reasons else None


def _histogram(reasons: list[str]) -> str:
    counts = Counter(reasons)
    return ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))


def fit_error(node_count: int, failures: list[Failure]) -> str:
    """The FitError text, with the preemption PostFilter's verdict appended.

    The sandbox never preempts: nodes rejected for resources get "No preemption victims
    found for incoming pod", the others "Preemption is not helpful for scheduling".
    """
    if node_count == 0:
        return "no nodes available to schedule pods"
    head = f"0/{node_count} nodes are available"
    filters = _histogram([r for f in failures for r in f.reasons])
    post = _histogram([NO_VICTIMS if f.resolvable else NOT_HELPFUL for f in failures])
    return f"{head}: {filters}. preemption: {head}: {post}."
