"""A list-and-watch cache of one resource, kept current through the gateway.

The scheduler and the kubelet each run informers for pods and nodes, the way their
real counterparts do: LIST, then WATCH from the list's resourceVersion, resume from
the last seen one when the server ends a watch, relist on 410 Gone, retry after a
pause on any other error. Every change sets every event given to ``subscribe_to``
so loops can wake up.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from shared.errors import Gone, KubeError
from shared.gateway import Gateway
from shared.resources import Resource

log = logging.getLogger(__name__)

#: Seconds between attempts after a failed list or watch (wall clock).
RETRY_DELAY_S = 0.5
#: Server-side watch timeout; the informer resumes when it ends.
WATCH_TIMEOUT_S = 60


def object_key(obj: dict[str, Any]) -> str:
    """``<namespace>/<name>`` (``/<name>`` for cluster-scoped objects)."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name', '')}"


class Informer:
    """Cache of every object of ``resource``; ``synced`` is set after the first list."""

    def __init__(self, gateway: Gateway, resource: Resource) -> None:
        self._gateway = gateway
        self._resource = resource
        self.objects: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self._listeners: list[asyncio.Event] = []

    def subscribe_to(self, event: asyncio.Event) -> None:
        """Set ``event`` on every change (the subscriber clears it)."""
        self._listeners.append(event)

    def _notify(self) -> None:
        for event in self._listeners:
            event.set()

    async def run(self) -> None:
        """List and watch until cancelled."""
        while True:
            try:
                version = await self._relist()
                while True:
                    version = await self._watch(version)
            except Gone:
                continue
            except KubeError as exc:
                log.warning("informer %s: %s", self._resource.plural, exc)
                await asyncio.sleep(RETRY_DELAY_S)

    async def _relist(self) -> str:
        result = await self._gateway.list_all(self._resource)
        self.objects = {object_key(o): o for o in result.items}
        self.synced.set()
        self._notify()
        return result.resource_version

    async def _watch(self, version: str) -> str:
        stream = self._gateway.watch(self._resource, version, timeout_s=WATCH_TIMEOUT_S)
        async for event in stream:
            meta = event.object.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            if event.type == "BOOKMARK":
                continue
            key = object_key(event.object)
            if event.type == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = event.object
            self._notify()
        return version

    def snapshot(self) -> list[dict[str, Any]]:
        """The cached objects (shared dicts: read, do not modify)."""
        return list(self.objects.values())
