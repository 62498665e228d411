"""Group formation and pipelining on one reservation, as an explicit state.

Claims on one reservation queue in its ``Lane``; each group of them is one ``Flight``:
one ledger write (``shared.ledger.write_claims``) carrying every ask of the group. A
lane's ``Phase`` says what the next group may do:

- ``IDLE``: no write in flight — a group starts at once, decided on the cache.
- ``WRITING``: the newest write in flight has not told what it leaves (not sent yet,
  or its result cannot be tested: an object without uid or generation) — wait.
- ``PIPELINE``: the newest write told what it leaves and that has room for the whole
  next group — the group is decided on it and sent before its answer; its patch tests
  the token that write sets, so it lands only after it.
- ``FULL``: what it leaves has too little room — wait for its answer (a refusal is
  decided on what the server holds, never on a write still in flight).
- ``SATURATED``: ``depth`` writes in flight — wait for one to end.

The phase is a pure function of the flights and the next group (``phase_of``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from shared import ledger
from shared.ledger import Ask, ClaimResult, Write
from webhook.claims.journal import Journal, Stage

#: Most asks one write carries; more wait for the next write (bounds one body's size).
MAX_GROUP = 128
#: Writes in flight per reservation (docs/developer/webhook.md "Group commit").
DEPTH = 2


class Phase(Enum):
    """What the next group of a lane may do (module docstring)."""

    IDLE = "idle"
    WRITING = "writing"
    PIPELINE = "pipeline"
    FULL = "full"
    SATURATED = "saturated"


@dataclass(eq=False, slots=True)
class Waiter:
    """One caller's ask, waiting for its outcome until its deadline."""

    ask: Ask
    deadline: float
    future: asyncio.Future[ClaimResult]


@dataclass(eq=False, slots=True)
class Flight:
    """One group's write: the ``WriteLog`` the ledger tells of each attempt as it is
    sent (quiet ones are passed on to the journal)."""

    group: list[Waiter]
    journal: Journal
    stage: Stage = Stage.PLANNED
    #: Its first attempt as sent: what a following group is decided on (a retry's
    #: comes too late for a follower, which was decided already).
    first: Write | None = None
    #: Every attempt as sent.
    attempts: list[Write] = field(default_factory=list)

    def sent(self, write: Write) -> None:
        if self.first is None:
            self.first = write
            self.stage = Stage.SENT
        self.attempts.append(write)
        self.journal.sent(write)


@dataclass(eq=False, slots=True)
class Lane:
    """One reservation's claims: the queue, the flights, the deadline timer."""

    loop: asyncio.AbstractEventLoop
    queue: list[Waiter] = field(default_factory=list)
    flights: list[Flight] = field(default_factory=list)
    #: The next start of a group, when one is scheduled on the loop.
    start: asyncio.Handle | None = None
    #: One timer for the earliest deadline of the callers waiting (``due``).
    timer: asyncio.TimerHandle | None = None
    due: float = math.inf


def phase_of(flights: Sequence[Flight], depth: int, wanted: int) -> Phase:
    """The lane's phase, given its flights (oldest first), the writes it may have in
    flight and the GPUs the next group asks for (no side effects)."""
    if not flights:
        return Phase.IDLE
    if len(flights) >= depth:
        return Phase.SATURATED
    newest = flights[-1].first
    if newest is None:
        return Phase.WRITING
    return Phase.PIPELINE if wanted <= ledger.free(newest.result) else Phase.FULL


def next_group(lane: Lane, now: float) -> list[Waiter]:
    """The next waiters (oldest first) whose callers still wait and have time; the
    others leave the queue."""
    live = [w for w in lane.queue if not w.future.done() and w.deadline > now]
    lane.queue = live[MAX_GROUP:]
    return live[:MAX_GROUP]
