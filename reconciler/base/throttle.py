"""The seed's pending-status Event throttle (R39): one story per pod, told sparingly.

Per pod uid and *topic* (``hold`` for every waiting status, ``annotations`` for
AnnotationIgnored) the throttle remembers the last status sent: its key (the Event
reason and the text that varies) and when. A status is due when nothing was sent on
the topic yet, when its key differs from the last one (a changed status is told at
once — including a switch between two reasons), or when at least ``repeat`` has passed
(an unchanged one is restated at most once per ``ONDEMAND_DENIAL_EVENT_REPEAT_MINUTES``;
0 restates every time). The stamp is recorded only after a successful send
(``sent``), so a failed send is retried at the next attempt. A pod that leaves, ends,
or is admitted is forgotten; stale entries are pruned after max(2 h, 3 × repeat).
Time comes from the injected clock; the state is in memory (losing it at a restart
at worst restates each status once).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.clock import Clock

#: The topic of every waiting / problem status.
HOLD = "hold"
#: The topic of AnnotationIgnored, told alongside the pod's waiting status.
ANNOTATIONS = "annotations"
#: Stale entries are kept at least this long.
MIN_MEMORY = timedelta(hours=2)


@dataclass(frozen=True)
class Said:
    """The last status told on one topic of one pod."""

    key: tuple[str, str]
    at: datetime


class Throttle:
    """Decides whether a pod's status Event is due; remembers what was sent."""

    def __init__(self, clock: Clock, repeat: timedelta) -> None:
        self._clock = clock
        self._repeat = repeat
        self._said: dict[tuple[str, str], Said] = {}

    def due(self, uid: str, topic: str, reason: str, text: str) -> bool:
        """Whether the status ``(reason, text)`` should be sent now."""
        last = self._said.get((uid, topic))
        if last is None or last.key != (reason, text):
            return True
        return self._clock.now() - last.at >= self._repeat

    def sent(self, uid: str, topic: str, reason: str, text: str) -> None:
        """Record a successful send (only then is the status throttled)."""
        self._said[(uid, topic)] = Said((reason, text), self._clock.now())

    def recall(self, uid: str, topic: str, reason: str, text: str, at: datetime) -> None:
        """Seed what a previous process already sent (read back from the pod's Events)."""
        last = self._said.get((uid, topic))
        if last is None or last.at < at:
            self._said[(uid, topic)] = Said((reason, text), at)

    def forget(self, uid: str) -> None:
        """The pod left, ended, or was admitted: its story is over."""
        for topic in (HOLD, ANNOTATIONS):
            self._said.pop((uid, topic), None)

    def prune(self, live: set[str]) -> int:
        """Drop entries of pods not in ``live`` older than max(2 h, 3 × repeat)."""
        cutoff = self._clock.now() - max(MIN_MEMORY, 3 * self._repeat)
        gone = [k for k, s in self._said.items() if k[0] not in live and s.at < cutoff]
        for k in gone:
            del self._said[k]
        return len(gone)
