"""The current node inventory, kept from the leader's node and pod caches.

``InventoryCache.current()`` is the one call the leader's loops make for physical
capacity (the capacity audit, the on-demand guards, preemption, the forecast): it
returns the ``shared.policy.inventory.Inventory`` of the cached nodes, the cached pods'
placements (summed per node as the pod watch reports changes) and the app's last
class list — or ``None`` while either cache has not
finished its first LIST (capacity is then *unknown*, never zero). The result is
memoised and rebuilt on the next call after a node changes, a pod's placement
(node, GPUs, whether it holds them) changes, or the class list changes, so every
reader between two changes sees the very same object.

Node changes are logged once per change: ``k8s.node_excluded`` (DEBUG) when a tainted
node leaves the inventory (cordoned, NotReady, deleting) and ``k8s.node_included``
when it comes back; ``k8s.node_capacity_forced`` (INFO) when a valid override is set
or changed; ``k8s.node_capacity_forced_invalid`` / ``k8s.node_allocatable_invalid``
(WARNING, naming the node) for a value the inventory ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from reconciler.base.pods import PodView
from shared.logs import log
from shared.policy.inventory import (
    PROBLEM_OVERRIDE,
    Inventory,
    NodeFacts,
    PodPlacement,
    inventory_of,
)
from shared.watch import Watched

_log = logging.getLogger(__name__)


def placement_of(view: PodView | None) -> PodPlacement | None:
    """The pod as the inventory sees it: it holds its GPUs while node-resident,
    unfinished and not terminating."""
    if view is None:
        return None
    holds = view.node is not None and not view.finished and not view.deleting
    return PodPlacement(view.node, view.gpus, holds)


class InventoryCache:
    """The memoised inventory of one leader term's caches."""

    def __init__(
        self,
        nodes: Watched[NodeFacts],
        pods: Watched[PodView],
        class_labels: Callable[[], Iterable[str] | None],
    ) -> None:
        self._nodes = nodes
        self._pods = pods
        self._class_labels = class_labels
        self._memo: Inventory | None = None
        self._memo_classes: frozenset[str] = frozenset()
        #: GPUs held per node, kept current by the pod listener (a rebuild then costs
        #: per node, not per pod).
        self._used: dict[str, int] = {}
        nodes.listeners.append(self._node_changed)
        pods.listeners.append(self._pod_changed)

    def current(self) -> Inventory | None:
        """The inventory now; None until both caches hold a full LIST."""
        if not (self._nodes.synced.is_set() and self._pods.synced.is_set()):
            return None
        known = frozenset(self._class_labels() or ())
        if self._memo is None or known != self._memo_classes:
            self._memo = inventory_of(self._nodes.items.values(), self._used, known)
            self._memo_classes = known
        return self._memo

    def invalidate(self) -> None:
        """Forget everything derived (the caches were emptied behind the listeners)."""
        self._memo = None
        self._used = {}

    def _pod_changed(self, key: str, old: PodView | None, new: PodView | None) -> None:
        before, after = placement_of(old), placement_of(new)
        if before == after:
            return
        self._charge(before, -1)
        self._charge(after, +1)
        self._memo = None

    def _charge(self, placement: PodPlacement | None, sign: int) -> None:
        if placement is None or not placement.holds or placement.node is None:
            return
        total = self._used.get(placement.node, 0) + sign * placement.gpus
        if total:
            self._used[placement.node] = total
        else:
            self._used.pop(placement.node, None)

    def _node_changed(self, key: str, old: NodeFacts | None, new: NodeFacts | None) -> None:
        self._memo = None
        if new is not None:
            report_node_change(old, new)


def report_node_change(old: NodeFacts | None, new: NodeFacts) -> None:
    """Log what changed about a node's part in the inventory (once per change)."""
    was = old.excluded_because if old is not None else None
    why = new.excluded_because
    if why is not None and (old is None or why != was):
        log(_log, logging.DEBUG, "k8s.node_excluded", node=new.name, reason=why)
    elif why is None and old is not None and was is not None:
        log(_log, logging.DEBUG, "k8s.node_included", node=new.name, classes=list(new.classes))
    if new.override is not None and (old is None or old.override != new.override):
        log(
            _log,
            logging.INFO,
            "k8s.node_capacity_forced",
            node=new.name,
            gpus=new.override,
            allocatable=new.allocatable,
        )
    seen = set(old.problems) if old is not None else set()
    for problem in new.problems:
        if problem in seen:
            continue
        event = (
            "k8s.node_capacity_forced_invalid"
            if problem.subject == PROBLEM_OVERRIDE
            else "k8s.node_allocatable_invalid"
        )
        log(_log, logging.WARNING, event, node=new.name, value=problem.value, error=problem.why)
