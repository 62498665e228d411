"""The node inventory: how many GPUs of each class physically exist and are free.

This is the one capacity truth the reconciler decides from — the capacity audit, the
on-demand guards (1b: the class has nodes, 4: overcommit, 5: largest single-node
block), preemption, headroom and the forecast all read the same ``Inventory``. Pure:
no I/O, no clock.

Terms
-----
- A node belongs to class ``c`` when it carries the taint
  ``gpu-class-reservation=<c>:NoSchedule``; a node tainted for two classes counts in
  each (its GPUs appear in both totals).
- A node is **included** when it belongs to at least one class, is schedulable (not
  cordoned), Ready (condition ``Ready`` is ``True``; ``False`` or ``Unknown`` or
  missing is NotReady) and not being deleted. Anything else is **excluded**, with
  ``excluded_because`` saying why. Pods bound to an excluded node count against
  nothing: deleting them frees nothing the scheduler can use.
- A node's **GPUs** are ``status.allocatable["nvidia.com/gpu"]`` (a Kubernetes
  quantity; unreadable counts as 0 and is reported in ``problems``), replaced by the
  ``galends/force-node-capacity`` annotation when that is a whole number ≥ 0 (a value
  above allocatable is honoured). A negative or unparseable override is ignored and
  reported in ``problems``; the override never enrols a node.
- **Used** GPUs of a node: the effective requests of the pods that hold GPUs there —
  bound to it, not finished, not terminating (``PodPlacement.holds``). **Free** is
  ``max(0, gpus − used)`` per node (an over-full node, e.g. after the override was
  lowered, frees nothing rather than cancelling another node's free GPUs).
- Per class: ``total`` (sum of node GPUs), ``used``, ``free`` (sum of per-node free,
  so ``free <= total``), ``largest_block`` (the largest per-node free, 0 without
  nodes, so ``largest_block <= free``).
- A class the app knows (``known_classes``) or that any node is tainted for is
  present in ``Inventory.classes`` — as zeros when none of its nodes is included.
  A class never seen anywhere is absent: ``capacity(c)`` is ``None``, meaning
  *unknown*, which callers must treat as "no data" (fail open), never as zero.

Use from the reconciler: ``Caches.inventory()`` (``reconciler.base.caches``) builds this
from the node and pod caches and the app's last class list; it is ``None`` until
both caches hold a full LIST.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shared import vocab
from shared.policy.gpus import MAX_GPUS, Unreadable, parse_quantity

#: The override is a plain decimal integer (no sign, no suffix, no fraction).
_WHOLE = re.compile(r"^\s*[0-9]+\s*$")

#: Why a node is left out of every class (``NodeFacts.excluded_because``).
EXCLUDED_UNTAINTED = "no reservation taint with a class"
EXCLUDED_CORDONED = "cordoned (unschedulable)"
EXCLUDED_NOT_READY = "not Ready"
EXCLUDED_DELETING = "being deleted"

#: ``NodeProblem.subject`` values.
PROBLEM_ALLOCATABLE = "allocatable"
PROBLEM_OVERRIDE = "override"


@dataclass(frozen=True)
class NodeProblem:
    """A node value the inventory could not use: what, the value (truncated), why."""

    subject: str
    value: str
    why: str


@dataclass(frozen=True)
class NodeFacts:
    """What the inventory needs of one Node object (see the module docstring)."""

    name: str
    #: Values of its ``gpu-class-reservation`` NoSchedule taints, sorted, unique.
    classes: tuple[str, ...]
    #: ``status.allocatable["nvidia.com/gpu"]``; 0 when absent or unreadable.
    allocatable: int
    #: A valid ``galends/force-node-capacity`` (whole number >= 0), else None.
    override: int | None
    schedulable: bool
    ready: bool
    deleting: bool
    #: Values the inventory ignored (unreadable allocatable, invalid override).
    problems: tuple[NodeProblem, ...] = ()
    #: The node's labels as sorted pairs (for node-selector checks by the guards).
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def gpus(self) -> int:
        """GPUs the node contributes to each of its classes when included."""
        return self.override if self.override is not None else self.allocatable

    @property
    def excluded_because(self) -> str | None:
        """Why the node is left out of every class; None when it is included."""
        if not self.classes:
            return EXCLUDED_UNTAINTED
        if self.deleting:
            return EXCLUDED_DELETING
        if not self.schedulable:
            return EXCLUDED_CORDONED
        if not self.ready:
            return EXCLUDED_NOT_READY
        return None

    @property
    def included(self) -> bool:
        return self.excluded_because is None


@dataclass(frozen=True)
class PodPlacement:
    """What the inventory needs of a pod: where, how many GPUs, and whether it holds them.

    ``holds`` is true for a pod bound to ``node`` that has not finished and is not
    terminating (its GPUs are taken). Built from the reconciler's pod view by
    ``reconciler.base.caches.placement_of``, so this module stays independent of it.
    """

    node: str | None
    gpus: int
    holds: bool


@dataclass(frozen=True)
class NodeCapacity:
    """One included node as seen by one class."""

    name: str
    gpus: int
    used: int

    @property
    def free(self) -> int:
        return max(0, self.gpus - self.used)


@dataclass(frozen=True)
class ClassCapacity:
    """One class's physical capacity (see the module docstring for each figure)."""

    nodes: tuple[NodeCapacity, ...] = ()

    @property
    def total(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def used(self) -> int:
        return sum(n.used for n in self.nodes)

    @property
    def free(self) -> int:
        return sum(n.free for n in self.nodes)

    @property
    def largest_block(self) -> int:
        return max((n.free for n in self.nodes), default=0)


@dataclass(frozen=True)
class Inventory:
    """Every class's capacity and the nodes behind it, at one instant."""

    classes: Mapping[str, ClassCapacity]
    #: Tainted nodes left out (cordoned, NotReady, deleting): pods there count for nothing.
    excluded: frozenset[str]
    nodes: Mapping[str, NodeFacts] = field(default_factory=dict)

    def capacity(self, gpu_class: str) -> ClassCapacity | None:
        """The class's capacity; None when the class is unknown (never seen)."""
        return self.classes.get(gpu_class)

    def node_of(self, name: str) -> NodeFacts | None:
        """The facts of a tainted node (included or not); None for any other name."""
        return self.nodes.get(name)


# --- Projection of a Node object ----------------------------------------------------


def project_node_facts(node: Mapping[str, Any]) -> NodeFacts | None:
    """The facts of a Node object; None for a node with no reservation taint at all.

    A node carrying the taint key (even with an empty value, which names no class) is
    kept so it can be reported as excluded. Never raises on malformed input: a
    missing or odd-shaped field reads as absent.
    """
    meta = _mapping(node.get("metadata"))
    spec = _mapping(node.get("spec"))
    status = _mapping(node.get("status"))
    taints = [t for t in _list(spec.get("taints")) if isinstance(t, Mapping)]
    ours = [t for t in taints if t.get("key") == vocab.RESERVATION_TAINT_KEY]
    if not ours:
        return None
    problems: list[NodeProblem] = []
    allocatable = _allocatable(status, problems)
    override = _override(_mapping(meta.get("annotations")), problems)
    return NodeFacts(
        name=str(meta.get("name", "")),
        classes=_classes(ours),
        allocatable=allocatable,
        override=override,
        schedulable=not spec.get("unschedulable"),
        ready=_ready(status),
        deleting=bool(meta.get("deletionTimestamp")),
        problems=tuple(problems),
        labels=tuple(sorted((str(k), str(v)) for k, v in _mapping(meta.get("labels")).items())),
    )


def _classes(taints: list[Mapping[str, Any]]) -> tuple[str, ...]:
    values = {
        t.get("value")
        for t in taints
        if t.get("effect") == vocab.TAINT_EFFECT_NO_SCHEDULE and isinstance(t.get("value"), str)
    }
    return tuple(sorted(v for v in values if isinstance(v, str) and v))


def _allocatable(status: Mapping[str, Any], problems: list[NodeProblem]) -> int:
    values = _mapping(status.get("allocatable"))
    if vocab.GPU_RESOURCE not in values:
        return 0
    raw = values[vocab.GPU_RESOURCE]
    try:
        return parse_quantity(raw)
    except Unreadable as exc:
        problems.append(NodeProblem(PROBLEM_ALLOCATABLE, _short(raw), str(exc)))
        return 0


def _override(annotations: Mapping[str, Any], problems: list[NodeProblem]) -> int | None:
    if vocab.FORCE_NODE_CAPACITY not in annotations:
        return None
    raw = annotations[vocab.FORCE_NODE_CAPACITY]
    if not isinstance(raw, str) or not _WHOLE.match(raw):
        why = "not a whole number >= 0; allocatable is used"
        problems.append(NodeProblem(PROBLEM_OVERRIDE, _short(raw), why))
        return None
    value = int(raw)
    if value > MAX_GPUS:
        why = f"more than {MAX_GPUS} GPUs; allocatable is used"
        problems.append(NodeProblem(PROBLEM_OVERRIDE, _short(raw), why))
        return None
    return value


def _ready(status: Mapping[str, Any]) -> bool:
    for condition in _list(status.get("conditions")):
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _short(value: Any) -> str:
    return str(value)[:64]


# --- The inventory --------------------------------------------------------------------


def used_by_node(placements: Iterable[PodPlacement]) -> dict[str, int]:
    """GPUs held per node name by the placements that hold GPUs."""
    used: dict[str, int] = {}
    for p in placements:
        if p.holds and p.node is not None and p.gpus > 0:
            used[p.node] = used.get(p.node, 0) + p.gpus
    return used


def build_inventory(
    nodes: Iterable[NodeFacts],
    placements: Iterable[PodPlacement],
    known_classes: Iterable[str] = (),
) -> Inventory:
    """The inventory of ``nodes`` with ``placements`` charged to them.

    ``known_classes`` are the app's class labels: each is present even with no node.
    Nodes are taken in name order so the result does not depend on cache order.
    """
    return inventory_of(nodes, used_by_node(placements), known_classes)


def inventory_of(
    nodes: Iterable[NodeFacts],
    used: Mapping[str, int],
    known_classes: Iterable[str] = (),
) -> Inventory:
    """``build_inventory`` from GPUs already summed per node (``used_by_node``), so a
    caller that keeps those sums up to date pays per node, not per pod."""
    by_name = {n.name: n for n in nodes}
    per_class: dict[str, list[NodeCapacity]] = {c: [] for c in known_classes}
    excluded: set[str] = set()
    for name in sorted(by_name):
        facts = by_name[name]
        for cls in facts.classes:
            per_class.setdefault(cls, [])
        if not facts.included:
            excluded.add(name)
            continue
        for cls in facts.classes:
            per_class[cls].append(NodeCapacity(name, facts.gpus, used.get(name, 0)))
    classes = {c: ClassCapacity(tuple(ns)) for c, ns in per_class.items()}
    return Inventory(classes, frozenset(excluded), by_name)
