"""Ledger upkeep on the leader (DESIGN §3.2): keep every hold true to the live pods.

For each reservation the wanted ledger is ``shared.ledger.rebuild`` over the live
(unfinished) pods that carry its booking reference: holds are bound to their pod by
uid, else by claim id (to the first pod persisted with it), holds of finished or
deleted pods are dropped, unbound holds whose pod has not appeared within
``LEDGER_UNSEEN_HOLD_SECONDS`` (never more than ``LEDGER_CLAIM_TTL_SECONDS``) are
released — counted, and timed: the pass runs when the first of them comes due, not on
the tick — and an admitted pod without a hold gets one while its booking is open and
has room (adoption, in persisted order). The
write goes through ``ledger.amend`` (CAS on ``/status``), which re-applies the same
pure change to a fresh read, so a claim racing with the upkeep is never lost.

Upkeep runs only once the pod cache is synced: an empty cache must never read as
"every pod is gone". It runs for the reservations a pod event touched at once, and
for all of them on the backstop tick. A pass on a pod event leaves alone a ledger
whose only change would bind unannounced holds to their new pods: the announcer binds
them in the write that marks them announced (``binds_only_unannounced``); the tick's
pass binds what it did not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from reconciler.base.loops import Beat, until_ready
from reconciler.base.pods import PodView
from shared import ledger
from shared.clock import Clock, MonotonicClock, SystemMonotonic
from shared.ledger import LedgerGateway, PodUse
from shared.logs import log
from shared.model import GPUReservation, Hold

_log = logging.getLogger(__name__)
#: Seconds one reservation's upkeep may take before it is left to the next round.
UPKEEP_DEADLINE_S = 10.0


def charged_to(pod: PodView) -> str | None:
    """The reservation whose ledger ``pod`` counts in: the one it references, while it
    is live (not finished) and has a uid; None when it counts in none."""
    if pod.finished or not pod.uid:
        return None
    return pod.reference


def uses_by_reservation(pods: Iterable[PodView]) -> dict[str, list[PodUse]]:
    """Live admitted pods, grouped by the reservation they reference."""
    grouped: dict[str, list[PodUse]] = {}
    for pod in pods:
        ref = charged_to(pod)
        if ref is not None:
            grouped.setdefault(ref, []).append(pod.use())
    return grouped


def wanted(
    res: GPUReservation,
    uses: list[PodUse],
    now: datetime,
    ttl_s: float,
    unseen_s: float | None = None,
) -> GPUReservation:
    """The ledger ``res`` should have (pure)."""
    return ledger.rebuild(res, uses, now, ttl_s, unseen_s)


def differing(
    reservations: Mapping[str, GPUReservation],
    uses: Mapping[str, list[PodUse]],
    now: datetime,
    ttl_s: float,
    unseen_s: float | None = None,
) -> Iterator[tuple[str, GPUReservation, GPUReservation]]:
    """(name, ledger, the ledger its pods imply) of each reservation where the two
    differ, by name.

    The order of the holds carries no meaning: a rebuild lists them in the order its
    pods came, and upkeep (the pod cache's index by reference) and the queue pass (the
    whole pod cache) hand the same pods over in different orders. Comparing in order,
    the queue pass saw a ledger upkeep had just written as stale and waited for a write
    that never came (every pod of the booking held back until the next tick)."""
    for name in sorted(reservations):
        res = reservations[name]
        want = wanted(res, uses.get(name, []), now, ttl_s, unseen_s)
        if by_claim(want.holds) != by_claim(res.holds):
            yield name, res, want


def stale(
    reservations: Mapping[str, GPUReservation],
    uses: Mapping[str, list[PodUse]],
    now: datetime,
    ttl_s: float,
    unseen_s: float | None = None,
) -> list[str]:
    """Names of reservations whose ledger differs from what the pods imply."""
    return [name for name, _, _ in differing(reservations, uses, now, ttl_s, unseen_s)]


def behind(
    reservations: Mapping[str, GPUReservation],
    uses: Mapping[str, list[PodUse]],
    now: datetime,
    ttl_s: float,
    unseen_s: float | None = None,
) -> set[str]:
    """Names of reservations whose ledger the live pods contradict: ``stale``, beyond
    holds that only wait for the announcer to bind them (``binds_only_unannounced``:
    such a hold counts its GPUs already, so a claim on that ledger cannot over-admit)."""
    return {
        name
        for name, res, want in differing(reservations, uses, now, ttl_s, unseen_s)
        if not binds_only_unannounced(res, want)
    }


def binds_only_unannounced(res: GPUReservation, want: GPUReservation) -> bool:
    """Whether upkeep's only change to ``res`` would bind unannounced holds to their
    pods: the announcer's next write binds each of them with its mark (``ledger.
    announce_all``), so an upkeep write first would be one more write per admitted pod."""
    now_by = {h.claim: h for h in res.holds}
    if len(now_by) != len(res.holds) or now_by.keys() != {h.claim for h in want.holds}:
        return False
    for w in want.holds:
        h = now_by[w.claim]
        if h == w:
            continue
        if h.bound or h.announced or not w.bound or replace(h, pod=w.pod, pod_uid=w.pod_uid) != w:
            return False
    return len(want.holds) == len(res.holds)


def by_claim(holds: Iterable[Hold]) -> list[Hold]:
    """The holds in claim order (one ledger's claims are unique)."""
    return sorted(holds, key=lambda h: h.claim)


class Keeper:
    """Runs upkeep over the caches; ``touch`` asks for one reservation at once.

    ``uses(name)`` gives the live pods charged to reservation ``name`` as the pod cache
    holds them at the call (``reconciler.base.caches.ByReference``: an index, so a write
    attempt costs the pods of its reservation, not a scan of every pod)."""

    def __init__(
        self,
        gateway: LedgerGateway,
        namespace: str,
        clock: Clock,
        ttl_s: float,
        uses: Callable[[str], list[PodUse]],
        reservations: Callable[[], Mapping[str, GPUReservation]],
        ready: Callable[[], bool],
        *,
        unseen_s: float | None = None,
        on_unseen: Callable[[int], None] | None = None,
        mono: MonotonicClock | None = None,
    ) -> None:
        self._mono = mono or SystemMonotonic()
        self._gateway = gateway
        self._ns = namespace
        self._clock = clock
        self._ttl_s = ttl_s
        #: Seconds an unbound hold waits for its pod (the TTL when not given).
        self._unseen_s = ttl_s if unseen_s is None else min(unseen_s, ttl_s)
        self._on_unseen = on_unseen
        #: Unbound holds released because their pod never appeared.
        self.unseen_released = 0
        self._uses = uses
        self._reservations = reservations
        self._ready = ready
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self.writes = 0
        #: Reservation name → (the object last seen, its oldest unbound hold's time).
        self._unbound_since: dict[str, tuple[GPUReservation, datetime | None]] = {}

    def touch(self, name: str) -> None:
        """Reconsider reservation ``name`` soon (a pod under it changed or left)."""
        self._dirty.add(name)
        self._wake.set()

    async def run(self, tick_s: float) -> None:
        """Upkeep the touched reservations at once, and all of them every ``tick_s`` (or
        as soon as an unbound hold expires, if sooner).

        The first full pass runs as soon as the caches are synced (a restart heals at
        once, not a tick later)."""
        await until_ready(self._ready)
        await self.once()
        beat = Beat(self._clock, tick_s)
        while True:
            ticked = await beat.wait(self._wake, self.unbound_due())
            names = None if ticked else set(self._dirty)
            self._wake.clear()
            self._dirty.clear()
            await self.once(names)

    def unbound_due(self) -> datetime | None:
        """When the first unbound hold comes due for release (None: no unbound hold): a
        hold whose pod never appears — a create refused after the webhook, a hand-made
        review — would otherwise keep its GPUs until the tick."""
        current = self._reservations()
        if len(self._unbound_since) > 2 * len(current) + 16:  # reservations gone since
            self._unbound_since = {
                n: self._unbound_since[n] for n in current if n in self._unbound_since
            }
        first = min(
            (at for at in map(self._first_unbound, current.values()) if at is not None),
            default=None,
        )
        if first is None:
            return None
        return first + timedelta(seconds=self._unseen_s + 0.01)

    def _first_unbound(self, res: GPUReservation) -> datetime | None:
        """When the oldest unbound hold of ``res`` was made (None: none), kept per
        reservation object: a wake-up costs the reservations, not every hold."""
        known = self._unbound_since.get(res.name)
        if known is not None and known[0] is res:
            return known[1]
        first = min((h.at for h in res.holds if not h.bound), default=None)
        self._unbound_since[res.name] = (res, first)
        return first

    async def once(self, names: set[str] | None = None) -> list[str]:
        """One pass (over ``names``, or all); the reservations written."""
        if not self._ready():
            return []
        now = self._clock.now()
        reservations = dict(self._reservations())
        if names is not None:
            reservations = {n: r for n, r in reservations.items() if n in names}
        uses = {name: self._uses(name) for name in reservations}
        ttl_s, unseen_s = self._ttl_s, self._unseen_s
        written = []
        for name, res, want in differing(reservations, uses, now, ttl_s, unseen_s):
            if names is not None and binds_only_unannounced(res, want):
                continue  # the announcer binds them; the full pass on the tick if it cannot
            released = [0]

            def change(
                cur: GPUReservation, name: str = name, released: list[int] = released
            ) -> GPUReservation:
                # The pods as the cache holds them now, not at the start of the pass:
                # ``cur`` is a fresh read, and a hold bound since (the announcer binds a
                # webhook admission's hold to its pod once the cache shows the pod) must
                # be judged against a cache at least that new, or its pod would look
                # gone and the hold be dropped while the pod runs — freeing its GPUs
                # for one admission too many.
                new = wanted(cur, self._uses(name), now, ttl_s, unseen_s)
                released[0] = ledger.unseen(cur, new, now, unseen_s)
                return new

            deadline = self._mono.monotonic() + UPKEEP_DEADLINE_S
            got = await ledger.amend(
                self._gateway,
                self._ns,
                name,
                change,
                now=now,
                deadline=deadline,
                monotonic=self._mono.monotonic,
            )
            if got is not None:
                written.append(name)
                self.writes += 1
                log(_log, logging.INFO, "ledger.upkeep", reservation=name, holds=len(got.holds))
                if released[0]:
                    self.unseen_released += released[0]
                    if self._on_unseen is not None:
                        self._on_unseen(released[0])
                    log(
                        _log,
                        logging.WARNING,
                        "ledger.unseen_released",
                        reservation=name,
                        holds=released[0],
                        after_s=unseen_s,
                    )
        return written
