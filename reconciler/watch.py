"""A watched cache of slim projections: LIST, then WATCH resumed by resourceVersion.

``Watched`` keeps ``items`` (key ``namespace/name`` → projection) equal to the API's
view of one resource. One cycle: LIST (a consistent snapshot, diffed against the
cache so listeners hear about every change, including deletes missed while away),
then WATCH from the list's resourceVersion, resuming from the last event or bookmark
when the server closes the stream. A 410 Gone relists at once; any other error waits
``retry_s`` and relists. Every ``resync_s`` the cycle ends and a fresh LIST heals any
drift (periodic resync).

A projection function turns each raw object into the few fields decisions need, or
``None`` to ignore the object (it then counts as absent). Listeners are plain
callables ``(key, old, new)``; ``new is None`` means gone. They must not block.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, Protocol, TypeVar

from shared.errors import Gone, KubeError
from shared.gateway import ListResult, WatchEvent
from shared.logs import log
from shared.resources import Resource

_log = logging.getLogger(__name__)
T = TypeVar("T")
Listener = Callable[[str, T | None, T | None], None]


class WatchGateway(Protocol):
    """What a ``Watched`` needs of ``shared.gateway.Gateway``."""

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ListResult:
        """LIST every page."""
        ...

    def watch(
        self,
        res: Resource,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_s: int = 270,
    ) -> AsyncIterator[WatchEvent]:
        """Stream watch events."""
        ...


def key_of(obj: dict[str, Any]) -> str:
    """``namespace/name`` (``name`` for cluster-scoped objects)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class Watched(Generic[T]):
    """One resource's projections, kept current by LIST + WATCH."""

    def __init__(
        self,
        gateway: WatchGateway,
        res: Resource,
        project: Callable[[dict[str, Any]], T | None],
        *,
        namespace: str | None = None,
        resync_s: float = 300.0,
        retry_s: float = 1.0,
    ) -> None:
        self._gateway = gateway
        self.res = res
        self._project = project
        self._ns = namespace
        self._resync_s = resync_s
        self._retry_s = retry_s
        self.items: dict[str, T] = {}
        self.listeners: list[Listener[T]] = []
        #: Set once the first LIST has filled the cache.
        self.synced = asyncio.Event()
        self.relists = 0

    async def run(self) -> None:
        """Keep the cache current until cancelled."""
        while True:
            try:
                version = await self.relist()
                await self._watch_until_resync(version)
            except Gone:
                log(_log, logging.INFO, "watch.gone", resource=self.res.plural)
            except KubeError as exc:
                log(_log, logging.WARNING, "watch.failed", resource=self.res.plural, error=str(exc))
                await asyncio.sleep(self._retry_s)

    async def relist(self) -> str:
        """LIST and replace the cache, telling listeners what changed; the list's version."""
        listed = await self._gateway.list_all(self.res, self._ns)
        fresh: dict[str, T] = {}
        for obj in listed.items:
            view = self._project(obj)
            if view is not None:
                fresh[key_of(obj)] = view
        old = self.items
        self.items = fresh
        for key in old.keys() - fresh.keys():
            self._tell(key, old[key], None)
        for key, view in fresh.items():
            if old.get(key) != view:
                self._tell(key, old.get(key), view)
        self.relists += 1
        self.synced.set()
        return listed.resource_version

    async def _watch_until_resync(self, version: str) -> None:
        until = time.monotonic() + self._resync_s
        while (left := until - time.monotonic()) > 0:
            stream = self._gateway.watch(self.res, version, self._ns, timeout_s=max(1, int(left)))
            async for event in stream:
                version = self.apply(event) or version

    def apply(self, event: WatchEvent) -> str | None:
        """Apply one watch event to the cache; the resourceVersion to resume from."""
        meta = event.object.get("metadata") or {}
        version = meta.get("resourceVersion")
        if event.type == "BOOKMARK":
            return str(version) if version else None
        key = key_of(event.object)
        old = self.items.get(key)
        new = None if event.type == "DELETED" else self._project(event.object)
        if new is None:
            self.items.pop(key, None)
        else:
            self.items[key] = new
        if old != new:
            self._tell(key, old, new)
        return str(version) if version else None

    def _tell(self, key: str, old: T | None, new: T | None) -> None:
        for listener in self.listeners:
            try:
                listener(key, old, new)
            except Exception:
                _log.exception("watch.listener_failed", extra={"fields": {"key": key}})
