"""The webhook's watch-fed cache of reserved nodes: node name → the classes of its
reservation taints (``gpu-class-reservation=<class>``).

A pod created with ``spec.nodeName`` never meets the scheduler, which is what keeps
pods without the toleration off a ``NoSchedule``-tainted node; the decision refuses
such a pod on a reserved node unless it is admitted now (``webhook.decide.Pin``).
Only nodes carrying the taint key are kept, as the set of its values (an empty value
names no class: nothing is admitted there). LIST + WATCH with the periodic resync of
``shared.watch.Watched``; readiness waits for the first LIST.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from shared import vocab
from shared.clock import Clock
from shared.logs import log
from shared.resources import NODES
from shared.watch import Watched, WatchGateway, name_of
from webhook.decide import Pin, node_name

_log = logging.getLogger(__name__)


def reservation_classes(node: Mapping[str, Any]) -> frozenset[str] | None:
    """The values of the node's reservation taints; None when it carries none (never
    raises: a malformed field reads as absent)."""
    spec = node.get("spec")
    taints = spec.get("taints") if isinstance(spec, Mapping) else None
    if not isinstance(taints, list):
        return None
    found = {
        value if isinstance(value := t.get("value"), str) else ""
        for t in taints
        if isinstance(t, Mapping) and t.get("key") == vocab.RESERVATION_TAINT_KEY
    }
    return frozenset(found) if found else None


class NodeCache:
    """Reserved nodes by name."""

    def __init__(
        self,
        gateway: WatchGateway,
        clock: Clock,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.watched: Watched[frozenset[str]] = Watched(
            gateway, NODES, reservation_classes, clock=clock, key=name_of, monotonic=monotonic
        )
        self.watched.on_synced = self._announce

    @property
    def synced(self) -> bool:
        """Whether the first LIST has filled the cache (readiness)."""
        return self.watched.synced.is_set()

    def pin(self, pod: Mapping[str, Any]) -> Pin | None:
        """The reserved node ``pod`` names in ``spec.nodeName``; None when it names none,
        or a node that is not reserved or not known here (docs/developer/webhook.md)."""
        node = node_name(pod)
        if node is None:
            return None
        classes = self.watched.items.get(node)
        return None if classes is None else Pin(node, classes)

    async def run(self) -> None:
        """LIST then WATCH until cancelled."""
        await self.watched.run()

    def _announce(self) -> None:
        log(_log, logging.INFO, "cache.nodes_synced", nodes=len(self.watched.items))
