"""Booked versus used: the GPU-second accounting of one reservation (pure).

A reservation's *accounted window* is ``[start, stop)`` where ``stop`` is its end, or the
instant it was cancelled when that came first (``Window``). Figures, all in GPU-seconds
(whole seconds: every instant here is stored to the second):

- *booked*: ``gpuCount`` × the part of the accounted window that has passed;
- *used*: for each pod admitted under the reservation, its GPUs × the time it was
  Running inside the accounted window — from the later of its start of running, its
  admission under this reservation and the window's start, to the earlier of its
  finish (or disappearance) and the window's stop. Pending time never counts;
- *idle*: booked − used (never negative).

The durable state is a ``Record`` (``status.usage``): the GPU-seconds of runs already
*closed* (finished pods, folded into one total), the uids folded while their pods still
exist (so a finished pod seen again is never counted twice; pruned once the pod is
gone), and the *open* runs (pod uid, GPUs, since). ``advance`` folds what the pods say
now into a record; the open runs are recomputed from the pods on every pass, so a
record written by an earlier leader and the pods as they are give the same figures as
an uninterrupted run. A pod that vanished while nobody watched is closed at the
record's ``as_of`` (the last instant it was known running): counted up to there, never
beyond — an undercount bounded by the time the reconciler was away.

No I/O, no clock: ``now`` is always a parameter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared.clock import parse_utc
from shared.model import GPUReservation, State

#: Key of the usage record in a GPUReservation's status.
STATUS_KEY = "usage"
#: Longest list of open runs or folded uids read from a record (a longer one is
#: malformed: a booking cannot hold more pods than this in a real cluster).
MAX_ENTRIES = 5000


def whole(at: datetime) -> datetime:
    """``at`` in UTC to the second (the precision every stored instant has)."""
    if at.microsecond == 0 and at.tzinfo is UTC:
        return at
    return at.astimezone(UTC).replace(microsecond=0)


def seconds(start: datetime, stop: datetime) -> int:
    """Whole seconds from ``start`` to ``stop``; 0 when ``stop`` is not later."""
    return max(0, int((stop - start).total_seconds()))


@dataclass(frozen=True, slots=True)
class Window:
    """The accounted window ``[start, stop)`` and the GPUs booked over it."""

    start: datetime
    stop: datetime
    gpus: int

    def clip(self, start: datetime, stop: datetime) -> int:
        """Seconds of ``[start, stop)`` inside the window."""
        return seconds(max(start, self.start), min(stop, self.stop))


def cancelled_at(res: GPUReservation) -> datetime | None:
    """When a cancelled reservation stopped holding GPUs: the no-show record's
    ``cancelledAt`` (else ``declaredAt``) when the system cancelled it, else the app's
    ``updated_at`` (the cancellation is its last change). None when it is active."""
    if res.facts.state is not State.CANCELLED:
        return None
    record = res.status_extra.get("noShow")
    if isinstance(record, dict):
        for key in ("cancelledAt", "declaredAt"):
            found = _instant_or_none(record.get(key))
            if found is not None:
                return found
    return res.facts.updated_at


def no_show(res: GPUReservation) -> bool:
    """Whether the reservation was declared a no-show (``status.noShow`` present)."""
    return isinstance(res.status_extra.get("noShow"), dict)


def window_of(res: GPUReservation) -> Window:
    """The accounted window of ``res``."""
    facts = res.facts
    stop = facts.end
    cancel = cancelled_at(res)
    if cancel is not None:
        stop = min(stop, max(whole(cancel), facts.start))
    return Window(whole(facts.start), whole(stop), facts.gpu_count)


@dataclass(frozen=True, slots=True)
class Run:
    """One pod under the reservation, as the pod (or its disappearance) tells it."""

    uid: str
    gpus: int
    #: When its containers began running; None while it has not run (pending).
    started: datetime | None
    #: When it finished, or was seen gone; None while it runs (or never ran).
    stopped: datetime | None = None
    #: When it was admitted under this reservation (``galends/admitted-at``), if known.
    admitted: datetime | None = None

    @property
    def since(self) -> datetime | None:
        """Where its use under this reservation begins (before the window clipping)."""
        if self.started is None:
            return None
        if self.admitted is not None and self.admitted > self.started:
            return whole(self.admitted)
        return whole(self.started)


@dataclass(frozen=True, slots=True)
class Open:
    """A run not yet closed: a pod running at ``Record.as_of``."""

    uid: str
    gpus: int
    since: datetime


@dataclass(frozen=True)
class Record:
    """The durable usage state of one reservation (``status.usage``)."""

    as_of: datetime | None = None
    closed: int = 0
    folded: tuple[str, ...] = ()
    open: tuple[Open, ...] = ()
    peak: int = 0
    first_start: datetime | None = None
    #: ``closed`` by hour of the window: entry i holds the closed GPU-seconds of
    #: ``[start + i h, start + (i+1) h)`` (for ``--since`` cuts and the plot).
    hours: tuple[int, ...] = ()

    def used(self, window: Window, now: datetime) -> int:
        """Used GPU-seconds up to ``now``: the closed total and the open runs so far."""
        return self.closed + sum(r.gpus * window.clip(r.since, now) for r in self.open)

    def current(self, window: Window, now: datetime) -> int:
        """GPUs in use at ``now`` inside the window."""
        if not window.start <= now < window.stop:
            return 0
        return sum(r.gpus for r in self.open if r.since <= now)


@dataclass(frozen=True, slots=True)
class Figures:
    """What a reader wants of a record at one instant."""

    booked: int
    used: int
    idle: int
    current: int
    peak: int
    first_start: datetime | None
    #: Seconds from the window's start to the first pod's start (None: no pod ran).
    to_first_use: int | None


HOUR = 3600


def spread(hours: list[int], window: Window, gpus: int, start: datetime, stop: datetime) -> None:
    """Add ``gpus`` x the seconds of ``[start, stop)`` inside the window to ``hours``
    (grown as needed), hour by hour of the window."""
    lo, hi = max(start, window.start), min(stop, window.stop)
    if hi <= lo or gpus <= 0:
        return
    a = seconds(window.start, lo)
    b = seconds(window.start, hi)
    while a < b:
        index = a // HOUR
        edge = min(b, (index + 1) * HOUR)
        while len(hours) <= index:
            hours.append(0)
        hours[index] += gpus * (edge - a)
        a = edge


def used_by_hour(record: Record, window: Window, now: datetime) -> list[int]:
    """Used GPU-seconds by hour of the window up to ``now`` (closed and open runs)."""
    hours = list(record.hours)
    for run in record.open:
        spread(hours, window, run.gpus, run.since, whole(now))
    return hours


@dataclass(frozen=True, slots=True)
class Form:
    """A record's open runs as one line: from ``settled`` on (every run's clipped start
    passed), used = closed + ``gpus`` x t(min(now, stop)) − ``offset`` (t: Unix
    seconds). A pass reads thousands of records' figures; this makes each O(1)."""

    gpus: int
    offset: int
    settled: datetime


def form_of(record: Record, window: Window) -> Form:
    """``record``'s line in ``window`` (runs starting at or after its stop count 0)."""
    gpus = offset = 0
    settled = window.start
    for run in record.open:
        begin = max(run.since, window.start)
        if begin >= window.stop:
            continue
        gpus += run.gpus
        offset += run.gpus * int(begin.timestamp())
        settled = max(settled, begin)
    return Form(gpus, offset, settled)


def figures(record: Record, window: Window, now: datetime, form: Form | None = None) -> Figures:
    """The record's figures at ``now`` (``now`` at or after ``record.as_of``);
    ``form``: ``form_of(record, window)``, kept by a caller that asks often."""
    now = whole(now)
    booked = window.gpus * window.clip(window.start, now)
    if form is not None and now >= form.settled:
        end = int(min(now, window.stop).timestamp())
        used = record.closed + form.gpus * end - form.offset
        current = form.gpus if window.start <= now < window.stop else 0
    else:
        used = record.used(window, now)
        current = record.current(window, now)
    first = record.first_start
    return Figures(
        booked=booked,
        used=used,
        idle=max(0, booked - used),
        current=current,
        peak=record.peak,
        first_start=first,
        to_first_use=None if first is None else seconds(window.start, first),
    )


def advance(record: Record, window: Window, runs: Iterable[Run], now: datetime) -> Record:
    """The record once the pods as they are at ``now`` (``runs``: every pod under the
    reservation the caller knows of, finished ones and those seen gone included) are
    folded in.

    - a run with a stop that is not folded yet is closed: its clipped GPU-seconds join
      ``closed``, its uid ``folded`` (kept while the caller still reports it);
    - a running run is open (since recomputed from the pod);
    - an open run of the record the caller no longer reports (the pod vanished while
      nobody watched) is closed at the record's ``as_of``.
    """
    now = whole(now)
    seen = {run.uid: run for run in runs}
    folded_before = set(record.folded)
    closed = record.closed
    hours = list(record.hours)
    folded: list[str] = []
    opened: list[Open] = []
    first = record.first_start
    for run in seen.values():
        since = run.since
        if run.uid in folded_before:
            folded.append(run.uid)
            continue
        if since is None:
            if run.stopped is not None:
                folded.append(run.uid)  # never ran: nothing to count, nothing to redo
            continue
        start_in = max(since, window.start)
        if run.stopped is None:
            ran_inside = start_in <= now and start_in < window.stop
        else:
            ran_inside = start_in < min(whole(run.stopped), window.stop)
        if ran_inside:
            first = start_in if first is None else min(first, start_in)
        if run.stopped is not None:
            closed += run.gpus * window.clip(since, whole(run.stopped))
            spread(hours, window, run.gpus, since, whole(run.stopped))
            folded.append(run.uid)
        else:
            opened.append(Open(run.uid, run.gpus, since))
    vanished_at = record.as_of if record.as_of is not None else now
    for gone in record.open:
        if gone.uid not in seen:
            closed += gone.gpus * window.clip(gone.since, min(vanished_at, now))
            spread(hours, window, gone.gpus, gone.since, min(vanished_at, now))
    opened.sort(key=lambda r: r.uid)
    current = (
        sum(r.gpus for r in opened if r.since <= now) if window.start <= now < window.stop else 0
    )
    return Record(
        as_of=now,
        closed=closed,
        folded=tuple(sorted(folded)),
        open=tuple(opened),
        peak=max(record.peak, current),
        first_start=first,
        hours=tuple(hours),
    )


def _instant_or_none(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_utc(value)
    except ValueError:
        return None


def unchanged(a: Record, b: Record) -> bool:
    """Whether two records differ only in ``as_of`` (nothing to write for the
    structure; the figures follow from the open runs)."""
    return (a.closed, a.open, a.folded, a.peak, a.first_start, a.hours) == (
        b.closed,
        b.open,
        b.folded,
        b.peak,
        b.first_start,
        b.hours,
    )


# --- a pod's run, from its status -------------------------------------------------------

_RAN = frozenset({"Running", "Succeeded", "Failed"})
_FINISHED = frozenset({"Succeeded", "Failed"})


def run_times(status: Mapping[str, Any]) -> tuple[str, str]:
    """When a pod began running and when it finished, as its ``status`` says, as text
    ("" when not yet, or unreadable): the earliest container ``startedAt`` (running or
    terminated), else ``startTime`` once the phase is Running or later; the latest
    ``finishedAt`` once the phase is Succeeded or Failed. Pending time is never
    running time."""
    phase = status.get("phase")
    if phase not in _RAN:
        return ("", "")
    starts: list[str] = []
    ends: list[str] = []
    containers = status.get("containerStatuses")
    for c in containers if isinstance(containers, list) else []:
        state = c.get("state") if isinstance(c, Mapping) else None
        if not isinstance(state, Mapping):
            continue
        for name in ("running", "terminated"):
            part = state.get(name)
            if not isinstance(part, Mapping):
                continue
            started = part.get("startedAt")
            if isinstance(started, str) and _instant_or_none(started) is not None:
                starts.append(started)
            finished = part.get("finishedAt")
            readable = isinstance(finished, str) and _instant_or_none(finished) is not None
            if name == "terminated" and readable:
                ends.append(str(finished))
    fallback = status.get("startTime")
    if not starts and isinstance(fallback, str) and _instant_or_none(fallback) is not None:
        starts.append(fallback)
    start = min(starts, key=parse_utc) if starts else ""
    end = max(ends, key=parse_utc) if ends and phase in _FINISHED else ""
    return (start, end)
