"""The webhook's watch-fed cache of GPUReservation objects (``shared.watch.Watched``).

The decision needs, for a pod of namespace N, every reservation owned by N (matching,
guarantee chains, near-miss reasons), so the cache is indexed by owner. It keeps the
raw object too: ``shared.ledger.claim`` starts from it instead of a GET. A claim's
written object is put in at once (``upsert``), so this replica does not decide on a
ledger older than its own write while the watch catches up; an older version arriving
later is ignored. Objects that fail ``shared.model.from_object`` are skipped with a
log line. No periodic resync: the webhook relists only when the watch fails.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared import model
from shared.clock import Clock
from shared.logs import log
from shared.model import GPUReservation
from shared.resources import GPU_RESERVATIONS
from shared.watch import Watched, WatchGateway, name_of

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    """One cached object: parsed and raw."""

    reservation: GPUReservation
    raw: dict[str, Any]


def entry_of(raw: dict[str, Any]) -> Entry | None:
    """The object as an ``Entry``; ``None`` (skipped, logged) when malformed."""
    try:
        return Entry(model.from_object(raw), raw)
    except ValueError as exc:
        name = (raw.get("metadata") or {}).get("name")
        log(_log, logging.WARNING, "cache.object_skipped", reservation=name, error=str(exc))
        return None


class ReservationCache:
    """GPUReservations of one namespace, by name and by owner."""

    def __init__(
        self,
        gateway: WatchGateway,
        namespace: str,
        clock: Clock,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.watched: Watched[Entry] = Watched(
            gateway,
            GPU_RESERVATIONS,
            entry_of,
            clock=clock,
            namespace=namespace,
            key=name_of,
            version_of=lambda e: e.reservation.resource_version,
            resync_s=None,
            monotonic=monotonic,
        )
        self._monotonic = monotonic
        self._by_owner: dict[str, set[str]] = defaultdict(set)
        self.watched.listeners.append(self._index)
        self.watched.on_synced = self._announce

    # --- reads ----------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """Whether the first LIST has filled the cache (readiness)."""
        return self.watched.synced.is_set()

    def of_owner(self, owner: str) -> list[GPUReservation]:
        """Every cached reservation of ``owner``."""
        items = self.watched.items
        return [items[n].reservation for n in sorted(self._by_owner.get(owner, ()))]

    def entry(self, name: str) -> Entry | None:
        return self.watched.items.get(name)

    def __len__(self) -> int:
        return len(self.watched.items)

    def age_s(self) -> float:
        """Seconds since the last LIST, event or bookmark."""
        return self._monotonic() - self.watched.heard_at

    # --- writes and the loop --------------------------------------------------------

    def upsert(self, raw: dict[str, Any], reservation: GPUReservation | None = None) -> None:
        """Put ``raw`` in unless the cache already has a newer version of it
        (``reservation``: ``raw`` parsed already, e.g. by the ledger write)."""
        self.watched.upsert(raw, None if reservation is None else Entry(reservation, raw))

    async def relist(self) -> str:
        """One LIST replacing the cache; the version to watch from."""
        return await self.watched.relist()

    async def run(self) -> None:
        """LIST then WATCH forever; a 410 or a broken stream relists. Returns on cancel."""
        await self.watched.run()

    def _index(self, name: str, old: Entry | None, new: Entry | None) -> None:
        if old is not None:
            self._by_owner[old.reservation.facts.owner].discard(name)
        if new is not None:
            self._by_owner[new.reservation.facts.owner].add(name)

    def _announce(self) -> None:
        log(_log, logging.INFO, "cache.synced", reservations=len(self))
