"""A watched cache of slim projections: LIST, then WATCH resumed by resourceVersion.

``Watched`` keeps ``items`` (key → projection) equal to the API's view of one resource.
One cycle: LIST (a consistent snapshot, diffed against the cache so listeners hear
about every change, including deletes missed while away), then WATCH from the list's
resourceVersion, resuming from the last event or bookmark when the server closes the
stream. A 410 Gone relists at once; any other error waits ``retry_s`` on the injected
clock (or a 429's ``Retry-After`` when longer, capped) and relists. With ``resync_s``
set, the cycle ends that often and a fresh LIST heals any drift (periodic resync); with
``None`` the watch goes on until it fails.

A projection function turns each raw object into the few fields its users need, or
``None`` to ignore the object (it then counts as absent). The key defaults to
``namespace/name``. Listeners are plain callables ``(key, old, new)``; ``new is None``
means gone. They must not block, and hear only of changes: with ``same`` given, a new
projection that ``same`` finds equal to the cached one replaces it silently (e.g. a
GPUReservation whose resourceVersion alone moved). With ``version_of`` a change older
than the cached projection (by resourceVersion) is ignored, so a writer can ``upsert``
what it wrote ahead of the watch without the watch's older events undoing it. With
``join`` every state of the server (listed, watched, upserted) is joined to what the
cache holds before it is put in (the webhook's writes of its own the server's state does
not show yet: ``webhook.cache``), and ``peek`` may recognise a watch line before it is
decoded (an event the cache has applied already: it is never decoded).

Used by the reconciler's caches (``reconciler.base.caches``) and the webhook's
GPUReservation cache (``webhook.cache``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, Protocol, TypeVar

from shared.clock import Clock
from shared.errors import Gone, KubeError, TooManyRequests
from shared.gateway import THROTTLE_WAIT_CAP_S, ListResult, WatchEvent
from shared.logs import log
from shared.resources import Resource

_log = logging.getLogger(__name__)
T = TypeVar("T")
Listener = Callable[[str, T | None, T | None], None]
#: Server-side timeout of one watch stream when no resync deadline bounds it.
STREAM_TIMEOUT_S = 270


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
        timeout_s: int = STREAM_TIMEOUT_S,
        known: Callable[[bytes], WatchEvent | None] | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Stream watch events (``known``: ``Watched.peek``)."""
        ...


def key_of(obj: dict[str, Any]) -> str:
    """``namespace/name`` (``name`` for cluster-scoped objects)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def name_of(obj: dict[str, Any]) -> str:
    """``name`` alone (for a cache of one namespace)."""
    return str((obj.get("metadata") or {}).get("name"))


def not_older(candidate: str, current: str) -> bool:
    """Whether resourceVersion ``candidate`` is not older than ``current``.

    Versions are opaque to clients; ours are compared only when both are integers
    (what the apiserver and the emulator hand out), else the candidate wins.
    """
    if candidate.isdigit() and current.isdigit():
        return int(candidate) >= int(current)
    return True


def relist_wait(error: KubeError, retry_s: float) -> float:
    """Seconds before the next LIST after ``error``: ``retry_s``, or a throttled
    answer's ``Retry-After`` when that is longer (capped as the gateway caps it)."""
    after = error.retry_after_s if isinstance(error, TooManyRequests) else None
    return retry_s if after is None else max(retry_s, min(after, THROTTLE_WAIT_CAP_S))


class Watched(Generic[T]):
    """One resource's projections, kept current by LIST + WATCH."""

    def __init__(
        self,
        gateway: WatchGateway,
        res: Resource,
        project: Callable[[dict[str, Any]], T | None],
        *,
        clock: Clock,
        namespace: str | None = None,
        key: Callable[[dict[str, Any]], str] = key_of,
        version_of: Callable[[T], str] | None = None,
        same: Callable[[T, T], bool] | None = None,
        join: Callable[[T | None, T], T] | None = None,
        resync_s: float | None = 300.0,
        retry_s: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._gateway = gateway
        self.res = res
        self._project = project
        self._clock = clock
        self._ns = namespace
        self._key = key
        self._version_of = version_of
        self._same = same
        self._join = join
        self._resync_s = resync_s
        self._retry_s = retry_s
        self._monotonic = monotonic
        self.items: dict[str, T] = {}
        #: Counts the writes to ``items`` (a relist replaces the dict): a reader
        #: keeping something derived from the items knows when to derive it again.
        self.changes = 0
        self.listeners: list[Listener[T]] = []
        #: Set once the first LIST has filled the cache.
        self.synced = asyncio.Event()
        #: Called once, right after the first LIST.
        self.on_synced: Callable[[], None] = lambda: None
        #: Given each raw watch line before it is decoded: an event standing for it (not
        #: decoded then), or None to decode it as usual.
        self.peek: Callable[[bytes], WatchEvent | None] | None = None
        self.relists = 0
        #: ``monotonic()`` when the API was last heard from (LIST, event or bookmark).
        self.heard_at = monotonic()
        #: ``monotonic()`` of the first LIST/WATCH failure since the last good LIST.
        self.failing_since: float | None = None

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
                if self.failing_since is None:
                    self.failing_since = self._monotonic()
                await self._clock.sleep(relist_wait(exc, self._retry_s))

    def failing_for(self) -> float:
        """Seconds the LIST/WATCH has kept failing with no good LIST since (0: fine).

        A cache that never syncs (an RBAC refusal of its LIST) or cannot relist any
        more says so here; health reports it."""
        if self.failing_since is None:
            return 0.0
        return self._monotonic() - self.failing_since

    async def relist(self) -> str:
        """LIST and replace the cache, telling listeners what changed; the list's version."""
        listed = await self._gateway.list_all(self.res, self._ns)
        fresh: dict[str, T] = {}
        old = self.items
        for obj in listed.items:
            view = self._project(obj)
            if view is not None:
                key = self._key(obj)
                fresh[key] = view if self._join is None else self._join(old.get(key), view)
        self.items = fresh
        self.changes += 1
        for key in old.keys() - fresh.keys():
            self._tell(key, old[key], None)
        for key, view in fresh.items():
            if self._changed(old.get(key), view):
                self._tell(key, old.get(key), view)
        self.relists += 1
        self.heard_at = self._monotonic()
        self.failing_since = None
        if not self.synced.is_set():
            self.synced.set()
            self.on_synced()
        return listed.resource_version

    async def _watch_until_resync(self, version: str) -> None:
        until = None if self._resync_s is None else self._monotonic() + self._resync_s
        while True:
            timeout = STREAM_TIMEOUT_S
            if until is not None:
                if (left := until - self._monotonic()) <= 0:
                    return
                timeout = max(1, int(left))
            if self.peek is None:
                stream = self._gateway.watch(self.res, version, self._ns, timeout_s=timeout)
            else:
                stream = self._gateway.watch(
                    self.res, version, self._ns, timeout_s=timeout, known=self.peek
                )
            async for event in stream:
                version = self.apply(event) or version

    def apply(self, event: WatchEvent) -> str | None:
        """Apply one watch event to the cache; the resourceVersion to resume from."""
        self.heard_at = self._monotonic()
        meta = event.object.get("metadata") or {}
        version = meta.get("resourceVersion")
        if event.type == "DELETED":
            self._put(self._key(event.object), None)
        elif event.type != "BOOKMARK":
            key = self._key(event.object)
            if not self._has(key, version):
                self._put(key, self._joined(key, self._project(event.object)))
        return str(version) if version else None

    def upsert(self, obj: dict[str, Any], view: T | None = None) -> None:
        """Put ``obj`` (a state of the server: an answer, a GET) in as if watched, ahead
        of the watch; ``view`` is its projection when the caller has made it already."""
        key = self._key(obj)
        self._put(key, self._joined(key, self._project(obj) if view is None else view))

    def put(self, key: str, view: T) -> None:
        """Put ``view`` in as it is (not joined: e.g. the cache's own provisional view),
        unless the cache holds a newer version (with ``version_of``)."""
        self._put(key, view)

    def _joined(self, key: str, view: T | None) -> T | None:
        if view is None or self._join is None:
            return view
        return self._join(self.items.get(key), view)

    def _has(self, key: str, version: Any) -> bool:
        """Whether the cache holds ``key`` at ``version`` or newer (with ``version_of``):
        the event of a write already upserted, or an older one. Projecting it would
        change nothing, so it is not projected (a ledger's holds parsed once per write)."""
        old = self.items.get(key)
        if old is None or self._version_of is None or not isinstance(version, str):
            return False
        cached = self._version_of(old)
        return version == cached or not not_older(version, cached)

    def _put(self, key: str, new: T | None) -> None:
        old = self.items.get(key)
        if self._stale(old, new):
            return
        if new is None:
            self.items.pop(key, None)
        else:
            self.items[key] = new
        self.changes += 1
        if self._changed(old, new):
            self._tell(key, old, new)

    def _changed(self, old: T | None, new: T | None) -> bool:
        """Whether listeners hear of ``old`` becoming ``new``."""
        if old is None or new is None or self._same is None:
            return old != new
        return not self._same(old, new)

    def _stale(self, old: T | None, new: T | None) -> bool:
        """Whether ``new`` is older than the cached ``old`` (only with ``version_of``)."""
        if old is None or new is None or self._version_of is None:
            return False
        return not not_older(self._version_of(new), self._version_of(old))

    def _tell(self, key: str, old: T | None, new: T | None) -> None:
        for listener in self.listeners:
            try:
                listener(key, old, new)
            except Exception:
                _log.exception("watch.listener_failed", extra={"fields": {"key": key}})
