"""The write journal: each reservation's claim writes of ours, by stage.

A write whose answer is not read (``ClaimPlan.echo`` off) goes through
``SENT → LANDED → SEEN`` (or ``LOST``): *sent* from the moment the ledger sends it (the
journal is the ``WriteLog`` the ledger tells), *landed* when its answer says so, *seen*
when a state of the server carries it. The cache asks the journal how each state of
the server it meets stands against our writes (``join``), and whether a watch line is
the event of one of them (``recognise``): a write of ours is hidden from a decision at
most until the next state of the server the cache meets.

Which server state a write lands on is told by the ledger token: every write of ours
tests one token and sets a new one, and every state between a write and the next
room-taking write carries the token it set. So a state carrying the token a landed
write tested came before it (the write is applied on top of it again: a drop by the
reconciler does not hide our holds); one carrying the token a write set shows it; any
other is newer than them all. The journal never lets a claim over-admit whatever it
holds: what it says only chooses what the next claim *tests*; the server's uid,
generation and token tests decide whether that lands.

Pure bookkeeping: no I/O, no clock, no calls out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

from shared.ledger import Write
from shared.watch import not_older
from webhook.claims.entries import Entry, applied, decided, on_version

#: Most writes sent per reservation whose answers are awaited (a write that failed is
#: never answered as landed: the oldest are let go).
MAX_SENT = 8
#: Most writes a reservation keeps landed but unseen (more means the watch is not
#: delivering): the oldest is let go — its holds stay in the entry; a state of the
#: server from before it, met later, is then taken as it is.
MAX_PENDING = 64


class Stage(Enum):
    """Where a write of ours (or a group's flight, ``webhook.claims.lanes``) stands."""

    #: A group formed; its write not sent yet (flights only).
    PLANNED = "planned"
    #: On its way; its answer not in.
    SENT = "sent"
    #: Its answer said it landed; no state of the server met shows it yet.
    LANDED = "landed"
    #: A state of the server met shows it (final).
    SEEN = "seen"
    #: It lost its race, failed, or was let go (final).
    LOST = "lost"


@dataclass(eq=False, slots=True)
class Noted:
    """One write in the journal, and its stage."""

    write: Write
    stage: Stage


@dataclass(slots=True)
class Book:
    """One reservation's writes: sent (in send order) and landed (in landing order)."""

    sent: list[Noted] = field(default_factory=list)
    landed: list[Noted] = field(default_factory=list)


class Journal:
    """Every reservation's writes of ours that a state of the server has not shown."""

    def __init__(self) -> None:
        self._books: dict[str, Book] = {}

    # --- reads ----------------------------------------------------------------------

    def pending(self, name: str) -> tuple[Write, ...]:
        """The writes landed on ``name`` that no state met shows yet (oldest first)."""
        book = self._books.get(name)
        return tuple(n.write for n in book.landed) if book else ()

    def awaited(self, name: str) -> tuple[Write, ...]:
        """The writes sent to ``name`` whose answers are not in (oldest first)."""
        book = self._books.get(name)
        return tuple(n.write for n in book.sent) if book else ()

    def stage(self, write: Write) -> Stage:
        """``write``'s stage (``SEEN`` or ``LOST`` once it left the journal: both final)."""
        book = self._books.get(write.name)
        for noted in (*book.sent, *book.landed) if book else ():
            if noted.write is write:
                return noted.stage
        return Stage.LOST

    @property
    def names(self) -> list[str]:
        """The reservations with writes in the journal."""
        return list(self._books)

    # --- transitions ----------------------------------------------------------------

    def sent(self, write: Write) -> None:
        """The ledger sends ``write`` (``shared.ledger.WriteLog``): quiet ones are
        noted, so their event is recognised even before their answer."""
        if not write.quiet:
            return
        book = self._books.setdefault(write.name, Book())
        book.sent.append(Noted(write, Stage.SENT))
        for gone in book.sent[:-MAX_SENT]:
            gone.stage = Stage.LOST
        del book.sent[:-MAX_SENT]

    def landed(self, write: Write, old: Entry | None) -> Entry | None:
        """``write`` landed, its answer not read; the entry the cache should hold now,
        given the one it holds (``old``), or None to leave it.

        Applied on top of ``old`` when that carries the token the write tested (the
        server's state before it, or our landed writes before it) — with the writes
        sent before it that set the tokens in between, when their answers are not in yet
        (they landed first); put in as decided when the cache holds a state older than
        the one it was decided on; else left to the watch (the cache has met the write,
        or a later state, already). Writes sent before it and not in that chain lost.
        """
        book = self._books.get(write.name)
        sent = book.sent if book is not None else []
        chain = [write]
        while old is not None and old.reservation.token != chain[0].tested:
            before = next((n.write for n in sent if n.write.token == chain[0].tested), None)
            if before is None:
                break
            chain.insert(0, before)
        at = next((i for i, n in enumerate(sent) if n.write is write), None)
        if at is None and book is not None and any(n.write is write for n in book.landed):
            return None  # landed already, as a link of a later write's chain
        if at is not None:
            for noted in sent[: at + 1]:
                noted.stage = Stage.LANDED if noted.write in chain else Stage.LOST
            del sent[: at + 1]
        if old is None:
            return None
        pending = list(book.landed) if book is not None else []
        if old.reservation.token == chain[0].tested:
            top = decided(old, write) if chain == [write] and not pending else None
            top = top or applied(old, chain)
            if top is None:
                return None
            self._land(write.name, [*pending, *(Noted(w, Stage.LANDED) for w in chain)])
            return top
        base = write.base_version
        if base and not not_older(old.reservation.resource_version, base):
            self._land(write.name, [Noted(write, Stage.LANDED)])
            return Entry(replace(write.result, resource_version=base), write.after)
        return None

    def join(self, old: Entry | None, new: Entry) -> Entry:
        """The server's state ``new`` as the cache keeps it, given ``old``.

        Without writes landed and unseen, ``new`` itself. With some, ``new``'s ledger
        token tells where it stands among them (each tested the token the one before
        set): before the first (it carries the token that one tested), after the
        ``i``-th (the token it set), or after them all (any other token: a room-taking
        write since) — those it shows are seen, the rest applied on top of it again."""
        name = new.reservation.name
        book = self._books.get(name)
        if book is None or not book.landed:
            return new
        landed = book.landed
        tokens = [landed[0].write.tested, *(n.write.token for n in landed)]
        token = new.reservation.token
        shown = tokens.index(token) if old is not None and token and token in tokens else None
        if shown is None:
            self._see(name, len(landed))
            return new
        self._see(name, shown)
        rest = [n.write for n in book.landed]
        top = applied(new, rest) if rest else None
        if rest and top is None:
            self._let_go(name)
        return top or new

    def recognise(self, name: str, entry: Entry, token: bytes) -> Write | None:
        """The write of ours whose watch event sets ``token`` on ``name`` (the first
        event carrying it is the write's own): the first landed one, or, with none
        landed, a write sent (answer not in) that tested the entry's token."""
        book = self._books.get(name)
        if book is None:
            return None
        if book.landed:
            write: Write | None = book.landed[0].write
        else:
            now = entry.reservation.token
            write = next((n.write for n in book.sent if n.write.tested == now), None)
        return write if write is not None and write.token.encode() == token else None

    def shown(self, name: str, entry: Entry, write: Write, version: str) -> Entry | None:
        """The watch showed ``write`` (``recognise``) at the server's ``version``: it is
        seen, and the entry is what it leaves under that version (None when the
        entry cannot carry it)."""
        book = self._books.get(name)
        if book is None:
            return None
        if book.landed and book.landed[0].write is write:
            self._see(name, 1)
            return on_version(entry, version, confirmed=not self.pending(name))
        top = decided(entry, write) or applied(entry, [write])
        if top is None:
            return None
        for noted in book.sent:
            if noted.write is write:
                noted.stage = Stage.SEEN
        book.sent = [n for n in book.sent if n.write is not write]
        self._tidy(name)
        return on_version(top, version, confirmed=True)

    def lost(self, writes: Sequence[Write]) -> None:
        """``writes`` ended without landing (as far as their answers tell: a write cut
        off or answered with an error may still land — its event is then decoded and
        taken as any state of the server)."""
        for write in writes:
            book = self._books.get(write.name)
            if book is None:
                continue
            for noted in book.sent:
                if noted.write is write:
                    noted.stage = Stage.LOST
            book.sent = [n for n in book.sent if n.stage is Stage.SENT]
            self._tidy(write.name)

    def forget(self, name: str) -> None:
        """``name`` is gone from the cache: its writes are let go."""
        book = self._books.pop(name, None)
        for noted in (*book.sent, *book.landed) if book else ():
            noted.stage = Stage.LOST

    # --- inside ---------------------------------------------------------------------

    def _land(self, name: str, landed: list[Noted]) -> None:
        """``landed`` are now ``name``'s landed writes (the newest ``MAX_PENDING``);
        any other it had is let go."""
        book = self._books.setdefault(name, Book())
        kept = landed[-MAX_PENDING:]
        for gone in (*book.landed, *landed):
            if not any(gone is k for k in kept):
                gone.stage = Stage.LOST
        book.landed = kept

    def _let_go(self, name: str) -> None:
        """``name``'s landed writes can no longer be placed: let go."""
        book = self._books[name]
        for noted in book.landed:
            noted.stage = Stage.LOST
        book.landed = []
        self._tidy(name)

    def _see(self, name: str, count: int) -> None:
        """The oldest ``count`` landed writes of ``name`` are seen."""
        book = self._books[name]
        for noted in book.landed[:count]:
            noted.stage = Stage.SEEN
        del book.landed[:count]
        self._tidy(name)

    def _tidy(self, name: str) -> None:
        book = self._books.get(name)
        if book is not None and not book.sent and not book.landed:
            del self._books[name]
