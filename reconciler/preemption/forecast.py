"""``GET /api/forecast/preemption-risk`` (contract §4.2, R41): the forecast from this
replica's caches.

The body is ``shared.policy.forecast.forecast`` over the cached reservations, the
cached pods as ``Holder``s and the node inventory. Without a full pod and node
picture (the inventory is ``None``) there is no forecast: the endpoint answers 503 —
never risk computed from unknown physical state. ``pending_jit_gpus`` counts the GPUs
of live JIT-eligible pods of the class (R5: a runtime and a usage group, leases on)
that are neither admitted nor bound nor gated: the pods the on-demand path would lease
for.

Every replica answers: the leader from its caches, a standby from the watches
``Standby`` runs while it does not lead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from reconciler.base.caches import NODES_TASK, PODS_TASK, RESERVATIONS_TASK, Caches
from reconciler.base.pods import PodView
from reconciler.base.settings import PreemptionSettings
from reconciler.base.tasks import Tasks
from reconciler.preemption.plan import holders_of, rooms_from
from shared.clock import Clock
from shared.logs import log
from shared.policy.forecast import forecast
from shared.policy.matching import MatchRules, jit_eligible

_log = logging.getLogger(__name__)

#: The forecast body for a namespace filter (None: all); None when state is unknown.
Forecaster = Callable[[str | None], dict[str, Any] | None]


def pending_jit(pods: Iterable[PodView], rules: MatchRules) -> dict[str, int]:
    """GPUs per class of live JIT-eligible pods waiting without admission, node or gate."""
    found: dict[str, int] = {}
    for p in pods:
        cls = p.profile.gpu_class
        if cls is None or p.reference is not None or p.node is not None or p.gates:
            continue
        if p.finished or p.deleting or p.gpus <= 0 or not jit_eligible(p.profile, rules):
            continue
        found[cls] = found.get(cls, 0) + p.gpus
    return found


class Standby:
    """The watches a standby replica runs so its forecast is as fresh as the leader's:
    pods, nodes and GPUReservations into its own ``Caches`` (no upkeep, no acting
    loop). Started while the replica does not lead, stopped (and emptied) when it does.
    Its tasks are its own: they never count in the replica's health or loops."""

    WATCHES = (PODS_TASK, NODES_TASK, RESERVATIONS_TASK)

    def __init__(self, caches: Caches) -> None:
        self.caches = caches
        self.tasks = Tasks()

    def start(self) -> None:
        if self.tasks.running():
            return
        for name, loop in self.caches.loops():
            if name in self.WATCHES:
                self.tasks.spawn(name, loop)

    async def stop(self) -> None:
        await self.tasks.cancel()
        self.caches.reset()


def forecaster(
    current: Callable[[], Caches], settings: PreemptionSettings, rules: MatchRules, clock: Clock
) -> Forecaster:
    """The forecast over the caches ``current`` names now: the leader's, or a standby's
    (see the module docstring)."""

    def compute(namespace: str | None) -> dict[str, Any] | None:
        caches = current()
        inventory = caches.inventory() if caches.ready() else None
        if inventory is None:
            log(_log, logging.WARNING, "forecast.snapshot_failed", target="node_capacity")
            return None
        now = clock.now()
        reservations = caches.by_name()
        pods = list(caches.pods.items.values())
        return forecast(
            now,
            settings.lead,
            [r.facts for r in reservations.values()],
            holders_of(pods, reservations, now, use_group=rules.use_group),
            rooms_from(inventory),
            delegated=settings.delegate,
            namespace=namespace,
            pending_jit=pending_jit(pods, rules),
        )

    return compute
