"""A watch-fed cache of GPUReservation objects (LIST, then WATCH; 410 → relist).

The decision needs, for a pod of namespace N, every reservation owned by N (matching,
guarantee chains, near-miss reasons), so the cache is indexed by owner. It keeps the
raw object too: ``shared.ledger.claim`` starts from it instead of a GET. A claim's
written object is put in at once (``upsert``), so this replica does not decide on a
ledger older than its own write while the watch catches up. Objects that fail
``shared.model.from_object`` are skipped with a log line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from shared import model
from shared.errors import Gone, KubeError
from shared.gateway import ListResult, WatchEvent
from shared.logs import log
from shared.model import GPUReservation
from shared.resources import GPU_RESERVATIONS, Resource

_log = logging.getLogger(__name__)
#: Seconds between attempts after a failed LIST or a broken WATCH.
RETRY_S = 1.0


class WatchGateway(Protocol):
    """What the cache needs of ``shared.gateway.Gateway``."""

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ListResult: ...

    def watch(
        self,
        res: Resource,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_s: int = 270,
    ) -> AsyncIterator[WatchEvent]: ...


@dataclass(frozen=True)
class Entry:
    """One cached object: parsed and raw."""

    reservation: GPUReservation
    raw: dict[str, Any]


def _newer(candidate: str, current: str) -> bool:
    """Whether resourceVersion ``candidate`` is not older than ``current``."""
    if candidate.isdigit() and current.isdigit():
        return int(candidate) >= int(current)
    return True


class ReservationCache:
    """GPUReservations of one namespace, by name and by owner."""

    def __init__(
        self,
        gateway: WatchGateway,
        namespace: str,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._gateway = gateway
        self._namespace = namespace
        self._monotonic = monotonic
        self._by_name: dict[str, Entry] = {}
        self._by_owner: dict[str, set[str]] = defaultdict(set)
        self._heard = monotonic()
        self.synced = False

    # --- reads ----------------------------------------------------------------------

    def of_owner(self, owner: str) -> list[GPUReservation]:
        """Every cached reservation of ``owner``."""
        return [self._by_name[n].reservation for n in sorted(self._by_owner.get(owner, ()))]

    def entry(self, name: str) -> Entry | None:
        return self._by_name.get(name)

    def __len__(self) -> int:
        return len(self._by_name)

    def age_s(self) -> float:
        """Seconds since the last LIST, event or bookmark."""
        return self._monotonic() - self._heard

    # --- writes ---------------------------------------------------------------------

    def upsert(self, raw: dict[str, Any]) -> None:
        """Put ``raw`` in unless the cache already has a newer version of it."""
        try:
            res = model.from_object(raw)
        except ValueError as exc:
            name = (raw.get("metadata") or {}).get("name")
            log(_log, logging.WARNING, "cache.object_skipped", reservation=name, error=str(exc))
            return
        current = self._by_name.get(res.name)
        if current and not _newer(res.resource_version, current.reservation.resource_version):
            return
        if current:
            self._by_owner[current.reservation.facts.owner].discard(res.name)
        self._by_name[res.name] = Entry(res, raw)
        self._by_owner[res.facts.owner].add(res.name)

    def remove(self, raw: dict[str, Any]) -> None:
        name = (raw.get("metadata") or {}).get("name")
        entry = self._by_name.pop(str(name), None)
        if entry:
            self._by_owner[entry.reservation.facts.owner].discard(entry.reservation.name)

    def replace_all(self, items: list[dict[str, Any]]) -> None:
        """A fresh LIST: forget everything, then put in every item."""
        self._by_name.clear()
        self._by_owner.clear()
        for item in items:
            self.upsert(item)
        self._heard = self._monotonic()

    def apply(self, event: WatchEvent) -> None:
        """One watch event."""
        self._heard = self._monotonic()
        if event.type in ("ADDED", "MODIFIED"):
            self.upsert(event.object)
        elif event.type == "DELETED":
            self.remove(event.object)

    # --- the loop -------------------------------------------------------------------

    async def run(self) -> None:
        """LIST then WATCH forever; a 410 or a broken stream relists. Returns on cancel."""
        while True:
            try:
                version = await self._relist()
                while True:
                    version = await self._watch(version)
            except Gone:
                log(_log, logging.INFO, "cache.watch_expired")
            except KubeError as exc:
                log(_log, logging.WARNING, "cache.watch_failed", error=str(exc))
                await asyncio.sleep(RETRY_S)

    async def _relist(self) -> str:
        listed = await self._gateway.list_all(GPU_RESERVATIONS, self._namespace)
        self.replace_all(listed.items)
        if not self.synced:
            log(_log, logging.INFO, "cache.synced", reservations=len(self))
        self.synced = True
        return listed.resource_version

    async def _watch(self, version: str) -> str:
        """One watch stream; the version to resume from when it ends cleanly."""
        async for event in self._gateway.watch(GPU_RESERVATIONS, version, self._namespace):
            self.apply(event)
            version = str((event.object.get("metadata") or {}).get("resourceVersion") or version)
        return version
