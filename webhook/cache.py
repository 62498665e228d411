"""The webhook's watch-fed cache of GPUReservation objects (``shared.watch.Watched``).

The decision needs, for a pod of namespace N, every reservation owned by N (matching,
guarantee chains, near-miss reasons), so the cache is indexed by owner. It keeps the
raw object too: ``shared.ledger.claim`` starts from it instead of a GET. Objects that
fail ``shared.model.from_object`` are skipped with a log line. No periodic resync: the
webhook relists only when the watch fails.

A claim's write is put in at once, so this replica does not decide on a ledger older
than its own write while the watch catches up. The server's answer to the write is not
read (a ``ClaimPlan`` with ``echo`` off): the entry becomes *provisional* — the
server's state the cache last had with the write applied on top (``Entry.pending``,
the object ``ledger.expected_after`` gives) — and stays so until the watch shows the
write. Which server state a write lands on is told by the ledger token: every write
of ours tests one token and sets a new one, and every state between a write and the
next room-taking write carries the token it set. So each state of the server the
cache meets (watch event, LIST, GET) is joined to the pending writes (``joined``):
one carrying the token a pending write tested came before it, and the write is
applied on top of it again (a drop by the reconciler does not hide our holds); one
carrying the token a pending write set shows it (the write is no longer pending);
any other is newer than them all and taken as it is. The first watch event carrying
the token a pending write set is that write's own: it is recognised in the line's
bytes and not decoded (``peek``) — its resourceVersion alone is read. The cache never
lets a claim over-admit whatever it holds (the server tests uid, generation and
token), and our own holds are hidden at most until the next event (after a LIST
that predates the write). A write is known from the moment it is sent (``sending``), so
its event is recognised even when it comes before the answer: it is then applied to the
entry as the event's own state (the entry carried the token it tested), and the answer
arriving after finds the cache past it and changes nothing.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from shared import ledger, model
from shared.clock import Clock
from shared.gateway import WatchEvent
from shared.ledger import Write
from shared.logs import log
from shared.model import GPUReservation
from shared.resources import GPU_RESERVATIONS
from shared.watch import Watched, WatchGateway, name_of, not_older

_log = logging.getLogger(__name__)
#: How a watch line of a modified object starts (the apiserver's and the emulator's
#: encoding: ``type`` first, compact).
_MODIFIED = b'{"type":"MODIFIED",'
_METADATA = b'"metadata":'
_TOKEN = f'"{model.LEDGER_TOKEN}":"'.encode()
#: Bytes of a watch line's object metadata decoded at first (the whole rest if longer).
_METADATA_WINDOW = 2048
_DECODER = json.JSONDecoder()
#: Most writes sent per reservation whose answers are awaited (a write that failed is
#: never answered as landed: the oldest are let go).
MAX_SENT = 8
#: Most writes an entry keeps pending (more means the watch is not delivering): the
#: oldest is let go — its holds stay in the entry; a state of the server from before
#: it, met later, is then taken as it is (our newer holds hidden until the next one).
MAX_PENDING = 64


@dataclass(frozen=True, slots=True)
class Entry:
    """One cached object: parsed and raw. With ``pending``, writes of our own that
    landed but the watch has not shown yet (oldest first): ``raw`` and
    ``reservation`` are then the server's state last met with those writes applied
    (``raw`` without a resourceVersion; ``reservation.resource_version`` that
    state's)."""

    reservation: GPUReservation
    raw: dict[str, Any]
    pending: tuple[Write, ...] = ()


def entry_of(raw: dict[str, Any]) -> Entry | None:
    """The object as an ``Entry``; ``None`` (skipped, logged) when malformed."""
    try:
        return Entry(model.from_object(raw), raw)
    except ValueError as exc:
        name = (raw.get("metadata") or {}).get("name")
        log(_log, logging.WARNING, "cache.object_skipped", reservation=name, error=str(exc))
        return None


def applied(entry: Entry, writes: Sequence[Write]) -> Entry | None:
    """``entry`` with ``writes`` (each landed on the state before it) applied on top,
    pending; None when the object cannot carry them (no uid or generation)."""
    raw: dict[str, Any] | None = entry.raw
    holds = entry.reservation.holds
    for write in writes:
        raw = ledger.expected_after(raw, write.ops) if raw is not None else None
        holds += write.holds
    if raw is None or not writes:
        return None
    res = replace(entry.reservation, holds=holds, token=writes[-1].token)
    return Entry(res, raw, tuple(writes))


def decided(
    entry: Entry,
    write: Write,
    raw: dict[str, Any] | None = None,
    reservation: GPUReservation | None = None,
) -> Entry | None:
    """``write`` pending on ``entry`` as the ledger computed it — ``raw`` and
    ``reservation`` (by default the write's own ``after`` and ``result``) — when
    ``entry`` is the very state of the server it was decided on (its resourceVersion
    and token, nothing pending): what it leaves is what the ledger computed, and
    ``ops`` need not be applied again. None otherwise (``applied`` then)."""
    raw = write.after if raw is None else raw
    reservation = write.result if reservation is None else reservation
    if raw is None or reservation is None or entry.pending or not write.base_version:
        return None
    res = entry.reservation
    if res.resource_version != write.base_version or res.token != write.tested:
        return None
    return Entry(reservation, raw, (write,))


def joined(old: Entry | None, new: Entry) -> Entry:
    """The server's state ``new`` as the cache keeps it, given ``old`` (pure).

    Without writes pending, ``new`` itself. With some, ``new``'s ledger token tells
    where it stands among them (each tested the token the one before set): before
    the first (it carries the token that one tested), after the ``i``-th (the token
    it set), or after them all (any other token: a room-taking write since) — the
    writes not shown yet are applied on top of it again."""
    if old is None or not old.pending:
        return new
    tokens = [old.pending[0].tested, *(w.token for w in old.pending)]
    token = new.reservation.token
    if not token or token not in tokens:
        return new
    rest = old.pending[tokens.index(token) :]
    return (applied(new, rest) or new) if rest else new


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
            join=joined,
            resync_s=None,
            monotonic=monotonic,
        )
        self._monotonic = monotonic
        self._by_owner: dict[str, set[str]] = defaultdict(set)
        #: Writes of ours sent whose answers are not in yet, by reservation (oldest
        #: first), and the names whose entry may have writes pending or sent
        #: (checked by ``peek``).
        self._sent: dict[str, list[Write]] = {}
        self._awaited: set[str] = set()
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

    def sending(self, write: Write) -> None:
        """A claim's write of ours is being sent (the ledger's ``WriteLog``):
        its event may come before its answer, and is recognised then too."""
        sent = self._sent.setdefault(write.name, [])
        sent.append(write)
        del sent[:-MAX_SENT]
        self._awaited.add(write.name)

    def wrote(self, raw: dict[str, Any], reservation: GPUReservation, write: Write) -> None:
        """A claim's write of ours landed, its answer not read (``ClaimResult.landed``;
        ``raw``, ``reservation``: the object and ledger expected after it). Applied on
        top of the cached entry when that carries the token the write tested (the
        server's state before it, or our writes pending before it) — with the writes
        sent before it that set the tokens in between, when their answers are not in
        yet (they landed first); put in as decided when the cache holds a state older
        than the one it was decided on; else left to the watch (the cache has met the
        write, or a later state, already)."""
        name = reservation.name
        sent = self._sent.get(name, [])
        old = self.watched.items.get(name)
        # Writes sent before it whose answers are not in yet landed before it when it
        # tested the token one of them set (a pipelined write answered first).
        chain = [write]
        while old is not None and old.reservation.token != chain[0].tested:
            before = next((w for w in sent if w.token == chain[0].tested), None)
            if before is None:
                break
            chain.insert(0, before)
        if write in sent:  # and those sent before it: lost races, or in the chain
            del sent[: sent.index(write) + 1]
        if old is None:
            return
        if old.reservation.token == chain[0].tested:
            new = decided(old, write, raw, reservation) if chain == [write] else None
            if new is None:
                top = applied(old, chain)
                pending = (*old.pending, *chain)[-MAX_PENDING:]
                new = None if top is None else Entry(top.reservation, top.raw, pending)
        elif write.base_version and not not_older(
            old.reservation.resource_version, write.base_version
        ):
            new = Entry(replace(reservation, resource_version=write.base_version), raw, (write,))
        else:
            return
        if new is not None:
            self.watched.put(name, new)
            self._awaited.add(name)

    def peek(self, line: bytes) -> WatchEvent | None:
        """The event of a write of ours, recognised in its watch line before it is
        decoded: a MODIFIED event of the object carrying the token the write set (the
        first to carry it is the write's own; the token read by ``token_in``, then the
        name and resourceVersion by ``metadata_of``) — the entry's first pending write, or,
        with none pending, a write sent (answer not in yet) that tested the entry's
        token. The entry is then that write's result under the event's
        resourceVersion; an event standing for the line (name and version alone) comes
        back, which ``Watched.apply`` finds applied already. None: decode the line as
        usual."""
        if not self._awaited or not line.startswith(_MODIFIED):
            return None
        token = token_in(line)
        if token is None:
            return None
        for name in list(self._awaited):
            entry = self.watched.items.get(name)
            sent = self._sent.get(name)
            if entry is None or not (entry.pending or sent):
                self._awaited.discard(name)
                self._sent.pop(name, None)
                continue
            if entry.pending:
                write: Write | None = entry.pending[0]
            else:
                now = entry.reservation.token
                write = next((w for w in sent or () if w.tested == now), None)
            if write is None or write.token.encode() != token:
                continue
            meta = metadata_of(line)
            version = meta.get("resourceVersion") if meta is not None else None
            if meta is None or meta.get("name") != name or not isinstance(version, str):
                return None
            if not version or not_older(entry.reservation.resource_version, version):
                return None
            if not entry.pending:
                top = decided(entry, write) or applied(entry, [write])
                if top is None:
                    return None
                entry = top
            self.watched.put(name, _shown(entry, version))
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

    def _announce(self) -> None:
        log(_log, logging.INFO, "cache.synced", reservations=len(self))


def _shown(entry: Entry, version: str) -> Entry:
    """``entry`` once the watch showed its first pending write at ``version``: the same
    content on that state; confirmed (``raw`` at ``version``) when none is left."""
    rest = entry.pending[1:]
    res = replace(entry.reservation, resource_version=version)
    if rest:
        return Entry(res, entry.raw, rest)
    meta = entry.raw.get("metadata")
    meta = dict(meta, resourceVersion=version) if isinstance(meta, dict) else {}
    return Entry(res, dict(entry.raw, metadata=meta))
