"""Booked versus used GPU-hour accounting (``docs/usage.md``).

``setup`` builds the leader's ``UsageKeeper`` and subscribes it to the pod and
reservation caches; the process runs its ``loops()`` on the leader and calls its
``reset()`` when a term ends.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from reconciler.usage.keeper import UsageKeeper, UsageMetrics
from reconciler.usage.settings import UsageSettings, usage_from
from shared.clock import Clock

__all__ = ["UsageKeeper", "UsageMetrics", "UsageSettings", "setup", "usage_from"]


def setup(
    gateway: Any,
    namespace: str,
    clock: Clock,
    caches: Any,
    registry: CollectorRegistry,
    settings: UsageSettings,
) -> UsageKeeper:
    """The keeper, listening to ``caches`` (``reconciler.caches.Caches``: its ``pods``
    and ``reservations`` watches, ``by_name`` and ``ready``)."""
    keeper = UsageKeeper(
        gateway,
        namespace,
        clock,
        caches.by_name,
        caches.ready,
        UsageMetrics(registry),
        settings,
    )
    caches.pods.listeners.append(keeper.pod_changed)
    caches.reservations.listeners.append(keeper.reservation_changed)
    return keeper
