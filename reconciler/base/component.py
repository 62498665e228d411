"""A component of the leader: what its ``setup`` is handed, and what it hands back.

Each concern's component has one ``setup(ground, ...)`` beside its class: it builds
the component, subscribes it to the caches it reacts to, and returns it; the process
lists the components and runs their ``loops()`` while it leads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from reconciler.base.caches import Caches
from reconciler.base.events import Emit, Recorder
from reconciler.base.kube import KubeWatcher
from reconciler.base.metrics import Metrics, QueueMetrics
from reconciler.base.settings import ReconcilerSettings
from shared.clock import Clock

#: One loop of the leader: its task name, and how to start it.
Loop = tuple[str, Callable[[], Awaitable[None]]]


class Component(Protocol):
    """A part of the leader that runs loops while this replica leads."""

    def loops(self) -> list[Loop]:
        """The loops to run (none: the component only reacts, or is off)."""
        ...


@dataclass(frozen=True)
class Ground:
    """What every component's setup is handed: the process's gateway, settings and
    clock, the leader's caches, the metrics, the one Event recorder, and what the
    mirror knows of the reservation app."""

    gateway: KubeWatcher
    settings: ReconcilerSettings
    clock: Clock
    caches: Caches
    metrics: Metrics
    queue_metrics: QueueMetrics
    recorder: Recorder
    #: The recorder's ``emit``, counting each Event written by reason.
    emit: Emit
    #: Whether a full pull from the app has completed (a pod may hear "no match").
    fetched: Callable[[], bool]
    #: The app's class labels once its class list was fetched (None: not yet).
    class_labels: Callable[[], set[str] | None]
