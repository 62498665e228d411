"""WATCH streams (facts §3.4): replay, live changes, selector transitions, bookmarks.

``events`` yields ``(type, object, change)``: with ``resourceVersion`` unset or ``"0"``
the current matching objects first come as ADDED; then every change after the start
point. An object entering the selectors is ADDED, one leaving is DELETED (its previous
state with the new RV). A start point older than the kept history yields a single
ERROR with a 410 Expired Status and ends. BOOKMARKs (only when asked) carry just the
resourceVersion. The stream ends after ``timeoutSeconds`` (default: 30–60 minutes).
``EncodedLines`` serialises the event of one change once for every watcher that shows
it the same way (as a real apiserver's watch cache encodes each event once per format),
around the stored state's own encoding when the event shows it unchanged (the write's
answer encoded it already: ``encoding.ObjectBytes``).
"""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

from sandbox.kube import encoding
from sandbox.kube.cluster import Call, Cluster
from sandbox.kube.errors import bad_request, status_body
from sandbox.kube.reads import matcher
from sandbox.kube.store import Change, TooOld

Obj = dict[str, Any]
#: ``(type, object, change)``: the change the event shows (``None`` for the replay of
#: current objects and bookmarks), so every watcher of one change can share its encoding.
Event = tuple[str, Obj, Change | None]

#: Seconds between bookmarks (a real apiserver sends one about every minute).
BOOKMARK_INTERVAL_S = 5.0
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(text: str | None, name: str) -> bool:
    """Go ``strconv.ParseBool`` (the Python client sends ``True``; checklist 30)."""
    if text is None or text == "":
        return False
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise bad_request(f'invalid boolean value "{text}" for {name}')


class WatchPlan:
    """A validated watch request, ready to stream."""

    def __init__(
        self, cluster: Cluster, call: Call, bookmark_interval: float = BOOKMARK_INTERVAL_S
    ) -> None:
        if call.query.get("continue"):
            raise bad_request("continue is not allowed with watch")
        self.cluster, self.call = cluster, call
        self.matches = matcher(call)
        self.bookmarks = parse_bool(call.query.get("allowWatchBookmarks"), "allowWatchBookmarks")
        self.initial = parse_bool(call.query.get("sendInitialEvents"), "sendInitialEvents")
        self.timeout = _timeout(call.query.get("timeoutSeconds"))
        self.bookmark_interval = bookmark_interval
        rv = call.query.get("resourceVersion") or ""
        if rv and not rv.isdigit():
            raise bad_request(f'invalid resource version "{rv}"')
        self.replay = rv in ("", "0") or self.initial
        self.since = int(rv) if rv and not self.initial and rv != "0" else None

    def _visible(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        namespace = (obj.get("metadata") or {}).get("namespace", "")
        return (not self.call.namespace or namespace == self.call.namespace) and self.matches(obj)

    def _translate(self, change: Change) -> Event | None:
        now = change.type != "DELETED" and self._visible(change.object)
        before = change.previous is not None and self._visible(change.previous)
        if change.type == "DELETED":
            return ("DELETED", change.object, change) if before else None
        if now:
            return ("MODIFIED" if before else "ADDED", change.object, change)
        if before and change.previous is not None:
            gone_obj = dict(change.previous)
            gone_obj["metadata"] = dict(gone_obj["metadata"], resourceVersion=str(change.rv))
            return ("DELETED", gone_obj, change)
        return None

    def _bookmark(self, initial_end: bool = False) -> Event:
        meta: Obj = {"resourceVersion": str(self.cluster.store.resource_version)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return (
            "BOOKMARK",
            {
                "kind": self.call.rtype.kind,
                "apiVersion": self.call.rtype.api_version,
                "metadata": meta,
            },
            None,
        )

    async def events(self) -> AsyncIterator[Event]:
        """The stream's events, until timeout, shutdown or a 410."""
        store = self.cluster.store
        group, plural = self.call.rtype.store_key
        start = store.resource_version if self.since is None else self.since
        try:
            backlog, watcher = store.subscribe(group, plural, start)
        except TooOld as exc:
            message = f"too old resource version: {self.since} ({exc.oldest})"
            yield ("ERROR", status_body(410, "Expired", message), None)
            return
        try:
            if self.replay:
                for obj in store.list(group, plural, self.call.namespace or None):
                    if self._visible(obj):
                        yield ("ADDED", obj, None)
                if self.initial and self.bookmarks:
                    yield self._bookmark(initial_end=True)
            for change in backlog:
                if (event := self._translate(change)) is not None:
                    yield event
            async for event in self._live(watcher.queue):
                yield event
        finally:
            store.unsubscribe(watcher)

    async def _live(self, queue: asyncio.Queue[Change | None]) -> AsyncIterator[Event]:
        """Changes as they come, a BOOKMARK once ``bookmark_interval`` has passed (when
        asked), until the deadline. The clock is looked at when the stream's one timer
        puts ``_TICK`` in its queue — armed for the next bookmark or the deadline and
        moved only when that time changes — instead of a timeout around every wait
        (≈ 5% of the emulator's CPU per change and watcher, docs/developer/performance.md); a
        cancel (the client went away) reaches the plain ``get`` as it is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        next_bookmark = loop.time() + self.bookmark_interval
        timer: asyncio.TimerHandle | None = None
        armed = -1.0
        try:
            while (now := loop.time()) < deadline:
                if self.bookmarks and now >= next_bookmark:
                    next_bookmark = now + self.bookmark_interval
                    yield self._bookmark()
                    continue
                wake = min(deadline, next_bookmark) if self.bookmarks else deadline
                if wake != armed:
                    if timer is not None:
                        timer.cancel()
                    timer, armed = loop.call_at(wake, queue.put_nowait, _TICK), wake
                change = await queue.get()
                if change is None:
                    return
                if change is _TICK:
                    armed = -1.0  # fired: armed again for what is due next
                elif (event := self._translate(change)) is not None:
                    yield event
        finally:
            if timer is not None:
                timer.cancel()


#: What a stream's timer puts in its watcher's queue: time to look at the clock.
_TICK = Change(0, "TICK", ("", "", "", ""), {}, None)


def encode_line(kind: str, obj: Obj) -> bytes:
    """One line of a JSON watch stream."""
    return encoding.watch_line(kind, encoding.encode(obj))


#: Encoded events kept for watchers still to send them (the newest changes).
LINES_KEPT = 256


class EncodedLines:
    """Watch lines by (change, event type, how the resource shows it), newest kept.

    A change's event line depends only on the change, the event type (an object
    leaving a watcher's selectors is a DELETED of its previous state) and the resource
    version and kind the watcher asked for, so watchers alike share one encoding.
    """

    def __init__(self, objects: encoding.ObjectBytes, kept: int = LINES_KEPT) -> None:
        self._kept = kept
        self._objects = objects
        self._lines: OrderedDict[tuple[int, str, str, str], tuple[Change, bytes]] = OrderedDict()

    def line(
        self, change: Change, kind: str, view: tuple[str, str], shown: Callable[[], Obj]
    ) -> bytes:
        """The line for ``change`` as ``kind`` seen through ``view`` (apiVersion, kind);
        ``shown()`` gives the object to encode the first time."""
        key = (id(change), kind, *view)
        found = self._lines.get(key)
        if found is not None and found[0] is change:
            return found[1]
        obj = shown()
        if obj is change.object:  # the stored state itself: its encoding may be known
            encoded = encoding.watch_line(kind, self._objects.of(obj))
        else:
            encoded = encode_line(kind, obj)
        self._lines[key] = (change, encoded)
        while len(self._lines) > self._kept:
            self._lines.popitem(last=False)
        return encoded


def _timeout(text: str | None) -> float:
    if not text:
        return random.uniform(1800, 3600)
    try:
        return max(0.0, float(int(text)))
    except ValueError as exc:
        raise bad_request(f'invalid value "{text}" for timeoutSeconds') from exc


Transform = Callable[[str, Obj], Obj]
