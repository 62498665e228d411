"""A pod's node constraint: ``nodeSelector`` and required node affinity.

The rules are kube-scheduler's NodeAffinity filter (kubernetes/component-helpers
``scheduling/corev1/nodeaffinity``): every ``nodeSelector`` label must be equal, and
when ``requiredDuringSchedulingIgnoredDuringExecution`` is set at least one of its
``nodeSelectorTerms`` must hold — a term holds when all its ``matchExpressions`` (on
labels) and ``matchFields`` (only ``metadata.name``) hold; a term with neither holds
for no node. Operators: In, NotIn, Exists, DoesNotExist, Gt, Lt (integers).

The sandbox's scheduler and the reconciler's on-demand guards (``NoMatchingNode``,
``WaitingForNode``, guard 3's exemption) use this one implementation. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

NAME_FIELD = "metadata.name"


@dataclass(frozen=True)
class NodeConstraint:
    """A pod's node constraint in a hashable form (terms kept as canonical JSON)."""

    selector: tuple[tuple[str, str], ...] = ()
    #: The required terms as JSON (``""``: no required affinity).
    required: str = ""

    @property
    def narrows(self) -> bool:
        """Whether the pod constrains its nodes at all."""
        return bool(self.selector or self.required)

    def terms(self) -> list[Any]:
        return list(json.loads(self.required)) if self.required else []

    def describe(self) -> str:
        """The constraint as a user wrote it, compactly (for an Event, before quoting)."""
        parts = [f"nodeSelector {k}={v}" for k, v in self.selector]
        if self.required:
            parts.append(f"required node affinity {self.required}")
        return "; ".join(parts)


def constraint_of(spec: Mapping[str, Any]) -> NodeConstraint:
    """The constraint of a pod ``spec`` (malformed parts read as absent)."""
    selector = spec.get("nodeSelector")
    pairs = (
        tuple(sorted((str(k), str(v)) for k, v in selector.items()))
        if isinstance(selector, Mapping)
        else ()
    )
    required = _required(spec)
    text = json.dumps(required, sort_keys=True, separators=(",", ":")) if required else ""
    return NodeConstraint(pairs, text)


def _required(spec: Mapping[str, Any]) -> list[Any] | None:
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = (
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node_affinity, Mapping)
        else None
    )
    if not isinstance(required, Mapping):
        return None
    terms = required.get("nodeSelectorTerms")
    return list(terms) if isinstance(terms, list) else []


def allows(constraint: NodeConstraint, labels: Mapping[str, str], name: str) -> bool:
    """Whether a node with ``labels`` and ``name`` satisfies ``constraint``."""
    if any(labels.get(k) != v for k, v in constraint.selector):
        return False
    if not constraint.required:
        return True
    return any(term_holds(t, labels, name) for t in constraint.terms())


def term_holds(term: Any, labels: Mapping[str, str], name: str) -> bool:
    """All expressions and fields of one term hold; a term with neither matches nothing."""
    if not isinstance(term, Mapping):
        return False
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not isinstance(expressions, list) or not isinstance(fields, list):
        return False
    if not expressions and not fields:
        return False
    node_fields = {NAME_FIELD: name}
    return all(requirement_holds(e, labels) for e in expressions) and all(
        requirement_holds(f, node_fields) for f in fields
    )


def requirement_holds(requirement: Any, values: Mapping[str, str]) -> bool:
    """One node selector requirement: In, NotIn, Exists, DoesNotExist, Gt, Lt."""
    if not isinstance(requirement, Mapping):
        return False
    key = requirement.get("key", "")
    operator = requirement.get("operator", "")
    raw = requirement.get("values") or []
    wanted = [str(v) for v in raw] if isinstance(raw, list) else []
    present = key in values
    if operator == "In":
        return present and values[key] in wanted
    if operator == "NotIn":
        return not present or values[key] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(wanted) == 1:
        return _compare(operator, values[key], wanted[0])
    return False


def _compare(operator: str, actual: str, bound: str) -> bool:
    try:
        have, limit = int(actual), int(bound)
    except ValueError:
        return False
    return have > limit if operator == "Gt" else have < limit
