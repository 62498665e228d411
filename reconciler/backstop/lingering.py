"""Pods terminating on reserved nodes get at most ``EVICTION_GRACE_SECONDS`` (DESIGN §10).

A pod being deleted runs on — and keeps its GPUs — until its grace period ends: the
delete's ``gracePeriodSeconds``, else the pod's own ``terminationGracePeriodSeconds``,
which a pod may set to days while ignoring SIGTERM. The reconciler's own deletes
(preemption, eviction, the backstop) pass at most the allowed grace
(``PodView.stop_grace``); a delete by anyone else — a user deleting their squatting
pod with ``--grace-period`` of a week, a controller scaling down — would leave the pod
running where a booking needs its GPUs, out of the backstop's reach (a pod being
deleted is not evicted again).

``Lingering`` finds every pod on a reserved node whose deletion deadline lies more
than the allowed grace ahead and deletes it again with that grace: the API server moves
the deadline earlier (a shorter grace wins), and the kubelet kills the pod sooner. A
Warning Event ``TerminationGraceShortened`` tells the pod's owner why (once: a restart
reads the Events first). Pods the backstop leaves alone (the controller's namespace,
mirror pods, DaemonSets of exempt namespaces) are left alone here too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from reconciler.admission.evicting import EvictingPass, PassContext, told
from reconciler.backstop.rules import Scope, reserved_classes
from reconciler.base.component import Ground, Loop
from reconciler.base.pods import PodView
from shared import vocab
from shared.clock import parse_utc
from shared.errors import Conflict, KubeError, NotFound
from shared.logs import log
from shared.policy.inventory import NodeFacts
from shared.resources import PODS

_log = logging.getLogger(__name__)
LINGERING_TASK = "lingering-terminations"
#: Seconds a deletion deadline may lie beyond the allowed grace: ``deletionTimestamp``
#: has whole seconds, and a pod this pass shortened shows a deadline of about now plus
#: the grace.
SLACK_S = 2


def left_to_run(pod: PodView, now: datetime) -> float | None:
    """Seconds until the pod's deletion deadline (None: not being deleted, or a
    deadline that does not parse)."""
    if not pod.deleting:
        return None
    try:
        return (parse_utc(pod.deletion_at) - now).total_seconds()
    except ValueError:
        return None


def lingers(
    pod: PodView, nodes: Mapping[str, NodeFacts], scope: Scope, now: datetime, grace_s: int
) -> bool:
    """Whether ``pod`` is terminating on a reserved node with more than ``grace_s``
    (and the slack) left to run."""
    if not pod.uid or pod.finished or scope.exempt(pod) or not reserved_classes(pod, nodes):
        return False
    left = left_to_run(pod, now)
    return left is not None and left > grace_s + SLACK_S


def message(pod: PodView, nodes: Mapping[str, NodeFacts], now: datetime, grace_s: int) -> str:
    """The Event's text: what was found, the rule, what was done."""
    classes = ", ".join(reserved_classes(pod, nodes))
    left = left_to_run(pod, now) or 0.0
    return (
        f"This pod was being deleted with {left:.0f} s left to stop, on node {pod.node}, "
        f"which is reserved for GPU class {classes}. A pod on a reserved node gets at "
        f"most {grace_s} s to stop once it is deleted, so it was deleted again with a "
        f"grace period of {grace_s} s."
    )


@dataclass(frozen=True)
class Lingerer:
    """A pod to delete again with the allowed grace."""

    pod: PodView


class Lingering(EvictingPass[Lingerer]):
    """Shortens the grace of pods terminating on reserved nodes (module docstring)."""

    def __init__(
        self,
        ctx: PassContext,
        *,
        scope: Scope,
        nodes: Callable[[], Mapping[str, NodeFacts]],
        tick_s: float,
        on_shortened: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(ctx)
        self.scope = scope
        self._nodes = nodes
        self._tick_s = tick_s
        self._on_shortened = on_shortened

    def loops(self) -> list[Loop]:
        """The pass on pod changes, and every ``tick_s``."""
        return [(LINGERING_TASK, lambda: self.run(self._tick_s))]

    def _due(
        self, chosen: Mapping[str, PodView], pods: Mapping[str, PodView], now: datetime
    ) -> list[Lingerer]:
        nodes, grace = self._nodes(), self._grace_s
        found = [p for p in chosen.values() if lingers(p, nodes, self.scope, now, grace)]
        return [Lingerer(p) for p in sorted(found, key=lambda p: p.key)]

    async def _still_due(self, item: Lingerer, now: datetime) -> Lingerer | None:
        try:
            pod = await self._reread(item.pod.namespace, item.pod.name)
        except KubeError as exc:
            log(_log, logging.WARNING, "lingering.read_failed", pod=item.pod.key, error=str(exc))
            return None
        if pod is None or pod.uid != item.pod.uid:
            return None
        return (
            Lingerer(pod) if lingers(pod, self._nodes(), self.scope, now, self._grace_s) else None
        )

    async def _act(self, item: Lingerer, now: datetime, taken: dict[str, int]) -> bool:
        pod, grace = item.pod, self._grace_s
        reason = vocab.REASON_TERMINATION_GRACE_SHORTENED
        text = message(pod, self._nodes(), now, grace)
        if not await told(self._gateway, pod, reason):
            await self._emit(self._gateway, pod, reason, text, now=now)
        try:
            await self._gateway.delete(
                PODS, pod.name, pod.namespace, grace_period_s=grace, uid=pod.uid
            )
        except (NotFound, Conflict):
            return False  # gone, or the name is another pod's now
        except KubeError as exc:
            log(_log, logging.WARNING, "lingering.delete_failed", pod=pod.key, error=str(exc))
            return False
        if self._on_shortened is not None:
            self._on_shortened()
        left = left_to_run(pod, now)
        log(_log, logging.WARNING, "lingering.shortened", pod=pod.key, node=pod.node, left_s=left)
        return True


def setup(ground: Ground, ctx: PassContext, scope: Scope) -> Lingering:
    """The pass of one leader term, woken by changes of pods being deleted."""
    lingering = Lingering(
        ctx,
        scope=scope,
        nodes=lambda: ground.caches.nodes.items,
        tick_s=float(ground.settings.queue_interval_s),
        on_shortened=ground.metrics.grace_shortened.inc,
    )

    def pod_changed(key: str, old: PodView | None, new: PodView | None) -> None:
        if new is not None and new.deleting and new.node is not None:
            lingering.touch(key)

    def node_changed(key: str, old: NodeFacts | None, new: NodeFacts | None) -> None:
        if (old.classes if old else ()) != (new.classes if new else ()):
            lingering.touch()

    ground.caches.pods.listeners.append(pod_changed)
    ground.caches.nodes.listeners.append(node_changed)
    return lingering
