"""The webhook's watch-fed cache of GPUReservation objects (``shared.watch.Watched``).

The decision needs, for a pod of namespace N, every reservation owned by N (matching,
guarantee chains, near-miss reasons), so the cache is indexed by owner. It keeps the
raw object too: ``shared.ledger.claim`` starts from it instead of a GET. Objects that
fail ``shared.model.from_object`` are skipped with a log line. No periodic resync: the
webhook relists only when the watch fails.

Writes of ours whose answers are not read are kept by the write journal
(``webhook.claims.journal``): every state of the server the cache meets (watch event,
LIST, GET) is joined to them there, so this replica does not decide on a ledger older
than its own writes while the watch catches up. The first watch event carrying the
token a write of ours set is that write's own: it is recognised in the line's bytes and
not decoded (``peek``) — its resourceVersion alone is read.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from shared import model
from shared.clock import Clock
from shared.gateway import WatchEvent
from shared.ledger import ClaimResult
from shared.logs import log
from shared.model import GPUReservation
from shared.resources import GPU_RESERVATIONS
from shared.watch import Watched, WatchGateway, name_of, not_older
from webhook.claims.entries import Entry, entry_of
from webhook.claims.journal import Journal

_log = logging.getLogger(__name__)
#: How a watch line of a modified object starts (the apiserver's and the emulator's
#: encoding: ``type`` first, compact).
_MODIFIED = b'{"type":"MODIFIED",'
_METADATA = b'"metadata":'
_TOKEN = f'"{model.LEDGER_TOKEN}":"'.encode()
#: Bytes of a watch line's object metadata decoded at first (the whole rest if longer).
_METADATA_WINDOW = 2048
_DECODER = json.JSONDecoder()


def metadata_of(line: bytes) -> dict[str, Any] | None:
    """The ``metadata`` of the object in a watch line, decoded alone (the first
    ``"metadata":`` key of the line: the object's, its keys coming before ``spec``
    and ``status``); None when it cannot be read."""
    at = line.find(_METADATA)
    if at < 0:
        return None
    start = at + len(_METADATA)
    meta = _decoded(line[start : start + _METADATA_WINDOW])
    if meta is None and len(line) > start + _METADATA_WINDOW:
        meta = _decoded(line[start:])
    return meta if isinstance(meta, dict) else None


def token_in(line: bytes) -> bytes | None:
    """The ledger token of the object in a watch line, as bytes (the last
    ``"ledgerToken":"`` key of the line: the status's, which comes after metadata and
    spec); None when there is none."""
    at = line.rfind(_TOKEN)
    if at < 0:
        return None
    start = at + len(_TOKEN)
    end = line.find(b'"', start)
    return line[start:end] if end > start else None


def _decoded(text: bytes) -> Any:
    """The JSON value ``text`` starts with; None when it does not start with one."""
    try:
        value, _ = _DECODER.raw_decode(text.decode())
    except (ValueError, UnicodeDecodeError):
        return None
    return value


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
            join=self._join,
            resync_s=None,
            monotonic=monotonic,
        )
        self._monotonic = monotonic
        self._by_owner: dict[str, set[str]] = defaultdict(set)
        #: Our writes the server's states met do not show yet (the engine's too).
        self.journal = Journal()
        self.watched.listeners.append(self._index)
        self.watched.on_synced = self._announce
        self.watched.peek = self.peek

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
        """Put ``raw`` (a state of the server) in unless the cache already has a newer
        version of it (``reservation``: ``raw`` parsed already, e.g. by the ledger
        write); joined to the writes pending (``joined``)."""
        self.watched.upsert(raw, None if reservation is None else Entry(reservation, raw))

    def landed(self, result: ClaimResult) -> None:
        """A group's write of ours ended (``webhook.claims.engine``): the write that
        landed unread goes in as the journal places it (``Journal.landed``); an answer
        read is the server's own copy (spec and status of one resourceVersion) and goes
        in as any state of the server — the cached spec under a newer resourceVersion
        would outrank the watch's newer spec and let the next claim decide on the old
        budget. A result that read nothing changes nothing."""
        res = result.reservation
        if result.raw is None or res is None:
            return
        name = res.name
        entry = self.watched.items.get(name)
        if result.landed is not None:
            new = self.journal.landed(result.landed, entry)
            if new is not None:
                self.watched.put(name, new)
        elif entry is not None and entry.raw is not result.raw:  # not the cache's own
            self.upsert(result.raw, res)

    def peek(self, line: bytes) -> WatchEvent | None:
        """The event of a write of ours, recognised in its watch line before it is
        decoded: a MODIFIED event of the object carrying the token the write set
        (``Journal.recognise``; the token read by ``token_in``, then the name and
        resourceVersion by ``metadata_of``). The entry is then that write's result under
        the event's resourceVersion; an event standing for the line (name and version
        alone) comes back, which ``Watched.apply`` finds applied already. None: decode
        the line as usual."""
        journal = self.journal
        if not journal.names or not line.startswith(_MODIFIED):
            return None
        token = token_in(line)
        if token is None:
            return None
        for name in journal.names:
            entry = self.watched.items.get(name)
            if entry is None:
                journal.forget(name)
                continue
            write = journal.recognise(name, entry, token)
            if write is None:
                continue
            meta = metadata_of(line)
            version = meta.get("resourceVersion") if meta is not None else None
            if meta is None or meta.get("name") != name or not isinstance(version, str):
                return None
            if not version or not_older(entry.reservation.resource_version, version):
                return None
            shown = journal.shown(name, entry, write, version)
            if shown is None:
                return None
            self.watched.put(name, shown)
            return WatchEvent("MODIFIED", {"metadata": {"name": name, "resourceVersion": version}})
        return None

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
        else:
            self.journal.forget(name)

    def _join(self, old: Entry | None, new: Entry) -> Entry:
        return self.journal.join(old, new)

    def _announce(self) -> None:
        log(_log, logging.INFO, "cache.synced", reservations=len(self))
