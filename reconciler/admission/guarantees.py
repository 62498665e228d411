"""Guarantees kept live on admitted pods (R9, R10, R35).

For every live admitted pod (it carries ``galends/booking-reference: res-<id>``) the
*live guarantee* is recomputed from the reservation cache: the end of the chain of
abutting bookings (``shared.policy.windows.guarantee_end``). A pod whose reservation
is missing or cancelled has no guarantee (R10: that reads as overstay). From it:

- in guarantee (``now < end``): ``guarantee-status: guaranteed`` and
  ``guaranteed-until`` = the end, refreshed as the chain grows (or shrinks);
- past it: ``guarantee-status: overstay`` only — ``guaranteed-until`` stays frozen,
  unless it is still ahead of now (the booking was moved into the past, shortened or
  cancelled): then it is set to the chain's end, or to now when there is none;
- the reservation-fact annotations are re-stamped when the (active) reservation's facts
  changed; a missing or cancelled reservation leaves them frozen;
- ``pod-runtime-limit-seconds`` and ``admitted-at`` are never touched here.

Only the annotations that differ are written, in one JSON Patch per pod whose first op
is a ``test`` on the booking reference (a re-link racing with us makes the patch fail
instead of stamping the old reservation's facts on the new link). ``wanted_notes``,
``differing`` and ``next_end`` are pure; ``GuaranteeKeeper`` is the shell: it runs on pod changes,
on reservation changes, at the next guarantee end (a timer, so overstay flips
promptly) and on the ``QUEUE_PROCESSOR_INTERVAL`` tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from reconciler.base.loops import JUST_AFTER, Beat, Dirty, until_ready
from reconciler.base.pods import PodView
from shared import vocab
from shared.clock import Clock, format_utc, parse_utc
from shared.errors import KubeError
from shared.logs import log
from shared.model import GPUReservation, ReservationFacts, State
from shared.pointer import annotation
from shared.policy.annotations import guarantee_status, reservation_facts
from shared.policy.windows import Kin, guarantee_end, kin, kin_key
from shared.resources import PODS

_log = logging.getLogger(__name__)
#: Keys this module keeps live.
LIVE_KEYS = frozenset(
    {
        vocab.GUARANTEE_STATUS,
        vocab.GUARANTEED_UNTIL,
        vocab.RESERVATION_KIND,
        vocab.RESERVATION_START,
        vocab.RESERVATION_END,
        vocab.RESERVATION_GPU_COUNT,
        vocab.GPU_CLASS_NAME,
    }
)


@dataclass(frozen=True)
class Wanted:
    """What every pod admitted under one reservation should carry now."""

    #: The live annotations (R35).
    notes: Mapping[str, str]
    #: At overstay: the instant the guarantee ended (the chain's end, or now when there
    #: is none) — the cap of a frozen ``guaranteed-until`` still ahead of now.
    ended: str | None = None


class PodPatcher(Protocol):
    """What the keeper needs of ``shared.gateway.Gateway``."""

    async def patch(
        self,
        res: Any,
        name: str,
        patch: dict[str, Any] | list[dict[str, Any]],
        namespace: str | None = None,
        patch_type: Any = "json",
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PATCH one object."""
        ...


# --- pure rules -----------------------------------------------------------------------


def kept_live(pod: PodView) -> bool:
    """A pod whose guarantee annotations are kept: admitted, not finished or leaving."""
    return pod.reference is not None and not pod.finished and not pod.deleting and bool(pod.uid)


def live_end(
    res: GPUReservation | None,
    pool: Iterable[ReservationFacts] | Mapping[Kin, list[ReservationFacts]],
    now: datetime,
    *,
    use_group: bool,
) -> datetime | None:
    """The end of the chained guarantee (R9); None when there is none (R10). ``pool``
    is every reservation's facts, or them grouped by ``windows.kin`` (a pass computing
    many ends groups them once)."""
    if res is None or res.facts.state is not State.ACTIVE:
        return None
    if isinstance(pool, Mapping):
        pool = pool.get(kin_key(res.facts), [])
    return guarantee_end(res.facts, pool, now, use_group=use_group)


def differing(pod: PodView, wanted: Wanted, now: datetime) -> dict[str, str]:
    """The annotations of ``wanted`` that ``pod`` does not carry as they are.

    At overstay ``guaranteed-until`` stays frozen (R35) unless the pod carries an
    instant still ahead of ``now`` (its booking was moved into the past, shortened or
    cancelled): then it is brought back to ``wanted.ended``, so the two annotations
    never contradict each other."""
    carried = pod.annotations
    changes = {k: v for k, v in wanted.notes.items() if carried.get(k) != v}
    until = carried.get(vocab.GUARANTEED_UNTIL)
    if wanted.ended is not None and until is not None and _ahead(until, now):
        changes[vocab.GUARANTEED_UNTIL] = wanted.ended
    return changes


def _ahead(text: str, now: datetime) -> bool:
    """``text`` is a UTC instant after ``now`` (an unreadable one counts as ahead: it
    is replaced by a readable end)."""
    try:
        return parse_utc(text) > now
    except ValueError:
        return True


def wanted_notes(
    res: GPUReservation | None,
    pool: Iterable[ReservationFacts] | Mapping[Kin, list[ReservationFacts]],
    now: datetime,
    *,
    use_group: bool,
) -> Wanted:
    """The live annotations every pod admitted under ``res`` should carry now (R35):
    they depend on the reservation alone, so a pass computes them once for all its
    pods."""
    end = live_end(res, pool, now, use_group=use_group)
    wanted: dict[str, str] = {}
    ended = None
    if end is not None and now < end:
        wanted[vocab.GUARANTEE_STATUS] = guarantee_status(end, now)
        wanted[vocab.GUARANTEED_UNTIL] = format_utc(end)
    else:
        wanted[vocab.GUARANTEE_STATUS] = vocab.GUARANTEE_STATUS_OVERSTAY
        ended = format_utc(end if end is not None else now)
    if res is not None and res.facts.state is State.ACTIVE:
        wanted.update(reservation_facts(res.facts))
    return Wanted(wanted, ended)


def patch_ops(reference: str, changes: Mapping[str, str]) -> list[dict[str, Any]]:
    """One JSON Patch: ``test`` the booking reference, then set every change."""
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": annotation(vocab.BOOKING_REFERENCE), "value": reference}
    ]
    ops.extend({"op": "add", "path": annotation(k), "value": v} for k, v in sorted(changes.items()))
    return ops


def next_end(
    pods: Iterable[PodView],
    reservations: Mapping[str, GPUReservation],
    now: datetime,
    *,
    use_group: bool,
) -> datetime | None:
    """The soonest future guarantee end among live admitted pods (the timer's instant).

    The end depends on the reservation only, so it is computed once per reservation in
    use, not once per pod (500 pods admitted at a window opening re-ran the chain walk
    for each one, on every pod event), over the bookings that could chain with it."""
    pools = kin(r.facts for r in reservations.values())
    used = {pod.reference for pod in pods if kept_live(pod) and pod.reference is not None}
    ends = (live_end(reservations.get(ref), pools, now, use_group=use_group) for ref in used)
    return min((end for end in ends if end is not None and end > now), default=None)


# --- the shell ------------------------------------------------------------------------


class GuaranteeKeeper:
    """Keeps every admitted pod's guarantee annotations true to the caches."""

    def __init__(
        self,
        gateway: PodPatcher,
        clock: Clock,
        pods: Callable[[], Mapping[str, PodView]],
        reservations: Callable[[], Mapping[str, GPUReservation]],
        ready: Callable[[], bool],
        *,
        use_group: bool,
    ) -> None:
        self._gateway = gateway
        self._clock = clock
        self._pods = pods
        self._reservations = reservations
        self._ready = ready
        self._use_group = use_group
        self.dirty = Dirty()
        #: The soonest future guarantee end among the pods the passes saw (the timer):
        #: set by a pass over every pod, lowered by a pass over touched pods.
        self._soonest: datetime | None = None
        self.writes = 0
        self.passes = 0

    def touch_pod(self, key: str) -> None:
        """Reconsider one pod soon (it changed)."""
        self.dirty.touch(key)

    def touch_all(self) -> None:
        """Reconsider every pod soon (a reservation changed)."""
        self.dirty.touch()

    async def run(self, tick_s: float) -> None:
        """Passes on changes, at the next guarantee end, and every ``tick_s``."""
        await until_ready(self._ready)
        beat = Beat(self._clock, tick_s)
        while True:
            await self.once(self.dirty.take())
            # ``_soonest`` stays until a pass has dealt with it, so a past one is due now.
            due = None if self._soonest is None else self._soonest + JUST_AFTER
            if await beat.wait(self.dirty.wake, due):
                self.dirty.touch()

    async def once(self, keys: set[str] | None = None) -> int:
        """One pass over ``keys`` (or every pod); the number of pods patched."""
        if not self._ready():
            return 0
        self.passes += 1
        now = self._clock.now()
        if self._soonest is not None and self._soonest <= now:
            keys = None  # a guarantee ended: every pod under it flips to overstay
        reservations = self._reservations()
        pool = kin(r.facts for r in reservations.values())
        pods = self._pods()
        chosen = list(pods.values()) if keys is None else [pods[k] for k in keys if k in pods]
        soonest = next_end(chosen, reservations, now, use_group=self._use_group)
        if keys is None or self._soonest is None:
            self._soonest = soonest
        elif soonest is not None:
            self._soonest = min(self._soonest, soonest)
        patched = 0
        notes: dict[str, Wanted] = {}  # per reservation, for this pass
        for pod in chosen:
            ref = pod.reference
            if not kept_live(pod) or ref is None:
                continue
            if ref not in notes:
                res = reservations.get(ref)
                notes[ref] = wanted_notes(res, pool, now, use_group=self._use_group)
            changes = differing(pod, notes[ref], now)
            if changes and await self._patch(pod, ref, changes):
                patched += 1
        return patched

    async def _patch(self, pod: PodView, reference: str, changes: dict[str, str]) -> bool:
        try:
            await self._gateway.patch(PODS, pod.name, patch_ops(reference, changes), pod.namespace)
        except KubeError as exc:
            # A failed test (re-linked meanwhile), a pod gone, or an outage: the next
            # pod event or tick decides again from fresh caches.
            log(_log, logging.INFO, "guarantee.patch_failed", pod=pod.key, error=str(exc))
            return False
        self.writes += 1
        status = changes.get(vocab.GUARANTEE_STATUS)
        log(
            _log,
            logging.INFO,
            "guarantee.updated",
            pod=pod.key,
            reservation=reference,
            keys=sorted(changes),
            status=status,
        )
        return True
