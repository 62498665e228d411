"""Booked versus used GPU-hour accounting (docs/operator/usage.md).

Its rules: a booking's booked GPU-seconds are its GPUs times the open window passed;
used GPU-seconds are its admitted pods' GPUs times the time each ran inside the window;
idle is the difference. Its loop: the leader's usage pass (``USAGE_INTERVAL_SECONDS``)
folds what the pod and reservation caches saw into each booking's ``status.usage`` and
the usage counters; ``setup`` builds the keeper and subscribes it to those caches.
"""

from __future__ import annotations

from reconciler.base import loops
from reconciler.base.component import Ground
from reconciler.usage.keeper import UsageKeeper

__all__ = ["UsageKeeper", "setup"]


def setup(ground: Ground) -> UsageKeeper:
    """The keeper, listening to the leader's pod and reservation caches."""
    caches = ground.caches
    keeper = UsageKeeper(
        ground.gateway,
        ground.settings.common.namespace,
        ground.clock,
        caches.by_name,
        caches.ready,
        ground.metrics.usage,
        ground.settings.usage,
        gather_s=loops.GATHER_S,
    )
    caches.pods.listeners.append(keeper.pod_changed)
    caches.reservations.listeners.append(keeper.reservation_changed)
    return keeper
