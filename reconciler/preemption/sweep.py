"""The preemption sweep on the leader (R30–R34): plan, warn, kill.

A sweep runs every ``PREEMPTION_CHECK_INTERVAL``, at once when a reservation changes,
and on a timer at the next instant a boundary enters the lead window (``S - lead``)
or is reached (``S``, phase B) — like window-open admission, never "up to the next
tick". Each sweep:

1. reads the caches; without a full pod and node picture (the inventory is ``None``)
   the sweep is skipped and nothing is marked — never kill on unknown physical state;
2. for every boundary in the lead window, ascending: plans its needs
   (``shared.policy.preemption``) — a (boundary, phase) already evaluated consumes its
   room but kills nothing (its mark is set even when nothing was short);
3. chooses victims per need: the app's (§2.8, when delegation is on; only offered
   uids, an empty answer respected), else uniform-random greedy with the injected
   RNG; an uncovered remainder is logged (``preempt.unmet``) and counted;
4. headroom (R34) when due;
5. plans termination warnings over the survivors and reconciles them
   (``reconciler.preemption.warn``);
6. kills them (``reconciler.preemption.kills``): re-read under the re-linker's lock, Event
   ``Preempted``, overstay report, delete with a uid precondition.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from reconciler.base.caches import ledger_only
from reconciler.base.component import Ground
from reconciler.base.events import Emit
from reconciler.base.kube import KubeWriter
from reconciler.base.loops import JUST_AFTER, Beat, until_ready
from reconciler.base.metrics import SweepMetrics
from reconciler.base.pods import PodView, instant_of
from reconciler.base.settings import PreemptionSettings
from reconciler.preemption import warn
from reconciler.preemption.kills import Killer, Victim, mono
from reconciler.preemption.overstay import OverstayReporter
from reconciler.preemption.plan import InventoryFigures, candidate_of, holders_of, rooms_from
from shared import vocab
from shared.appclient import PreemptionCandidate
from shared.appclient.outcomes import OverstayResult, Victims, VictimsResult
from shared.appclient.requests import OverstayReport
from shared.clock import Clock, format_utc
from shared.errors import KubeError
from shared.logs import log
from shared.model import GPUReservation
from shared.policy import outlook, preemption
from shared.policy.matching import MatchRules
from shared.policy.preemption import Holder, Need, Phase, Room, Tally

_log = logging.getLogger(__name__)
SWEEP_TASK = "preemption-sweep"


class VictimApp(Protocol):
    """What the sweep asks of the reservation app (``shared.appclient.AppClient``)."""

    async def select_victims(
        self, needed_by_class: Mapping[str, int], candidates: Sequence[PreemptionCandidate]
    ) -> VictimsResult: ...

    async def report_overstay(self, report: OverstayReport) -> OverstayResult: ...


@dataclass
class SweepResult:
    """What one sweep did."""

    skipped: bool = False
    victims: list[Victim] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    #: Seconds from a victim's choice to its delete answered (monotonic), per delete.
    latencies_s: list[float] = field(default_factory=list)
    warnings: dict[str, warn.Warning] = field(default_factory=dict)
    unmet: dict[str, int] = field(default_factory=dict)


class Sweeper:
    """Runs the preemption sweep over the leader's caches."""

    def __init__(
        self,
        gateway: KubeWriter,
        clock: Clock,
        emit: Emit,
        *,
        pods: Callable[[], Mapping[str, PodView]],
        reservations: Callable[[], Mapping[str, GPUReservation]],
        inventory: Callable[[], InventoryFigures | None],
        ready: Callable[[], bool],
        app: VictimApp | None,
        settings: PreemptionSettings,
        rules: MatchRules,
        zone: ZoneInfo | None,
        lock: asyncio.Lock,
        rng: random.Random | None = None,
        metrics: SweepMetrics | None = None,
    ) -> None:
        self._gateway = gateway
        self._clock = clock
        self._emit = emit
        self._pods = pods
        self._reservations = reservations
        self._inventory = inventory
        self._ready = ready
        self._app = app
        self.settings = settings
        self._rules = rules
        self._zone = zone
        self._rng = rng or random.Random()
        self._metrics = metrics
        self._killer = Killer(
            gateway,
            emit,
            rules=rules,
            zone=zone,
            lock=lock,
            reservations=reservations,
            reporter=app if settings.overstay_report else None,
            grace_s=settings.grace_s,
            preempted=metrics.preempted if metrics is not None else None,
        )
        self._wake = asyncio.Event()
        #: (boundary, phase) pairs already evaluated (pruned once past the window).
        self.marks: set[tuple[datetime, Phase]] = set()
        #: Warnings count as outstanding at startup (a previous leader may have left some).
        self.outstanding = True
        self.last_headroom: datetime | None = None
        #: Pod uid → the warning instant this process announced with an Event.
        self.told: dict[str, str] = {}

    def loops(self) -> list[tuple[str, Callable[[], Any]]]:
        return [(SWEEP_TASK, self.run)]

    def touch(self) -> None:
        """A reservation changed: sweep again soon."""
        self._wake.set()

    async def run(self) -> None:
        """Sweep now, then at the next boundary instant, on changes and every interval."""
        await until_ready(lambda: self._ready() and self._inventory() is not None)
        beat = Beat(self._clock, float(self.settings.interval_s))
        while True:
            self._wake.clear()
            boundary = self._next_boundary()  # before the sweep: owed if it runs past it
            try:
                await self.once()
            except KubeError as exc:
                log(_log, logging.WARNING, "preempt.sweep_failed", error=str(exc))
            await beat.wait(self._wake, boundary)

    def _next_boundary(self) -> datetime | None:
        """Just after the next instant a boundary enters the lead window or is reached."""
        now = self._clock.now()
        lead = self.settings.lead
        instants = [
            t
            for res in self._reservations().values()
            if preemption.is_booking(res.facts)
            for t in (res.facts.start - lead, res.facts.start)
            if t > now
        ]
        return min(instants) + JUST_AFTER if instants else None

    # --- one sweep --------------------------------------------------------------------

    async def once(self) -> SweepResult:
        """One sweep (see the module docstring)."""
        now = self._clock.now()
        lead = self.settings.lead
        reservations = self._reservations()
        bookings = [r.facts for r in reservations.values()]
        self.marks = {(s, p) for s, p in self.marks if s > now - lead}
        inventory = self._inventory() if self._ready() else None
        if inventory is None:
            log(_log, logging.WARNING, "preempt.snapshot_failed", target="node_capacity")
            return SweepResult(skipped=True)
        pods = self._pods()
        use_group = self._rules.use_group
        holders = holders_of(pods.values(), reservations, now, use_group=use_group)
        rooms = rooms_from(inventory)
        tally = Tally(rooms)
        result = SweepResult()
        covered = preemption.claimed(holders)
        for boundary in preemption.boundaries(bookings, now, lead):
            await self._boundary(boundary, now, bookings, covered, holders, rooms, tally, result)
        headroom = await self._headroom(now, pods, holders, tally, result)
        if self.settings.warnings:
            delegated = self.settings.delegate and self._app is not None
            result.warnings = warn.plan(
                now, bookings, holders, rooms, tally, headroom,
                self.settings, delegated=delegated, zone=self._zone,
            )  # fmt: skip
        for uid, latency in await self._killer.kill_all(result.victims, now):
            result.deleted.append(uid)
            result.latencies_s.append(latency)
        if self.settings.warnings or self.outstanding:
            self.outstanding = await warn.reconcile(
                self._gateway,
                self._emit,
                {k: p for k, p in pods.items() if p.reference is not None},
                result.warnings,
                {v.holder.uid for v in result.victims},
                now,
                self.told,
                self._metrics.warnings.inc if self._metrics else None,
            )
        return result

    async def _boundary(
        self,
        boundary: datetime,
        now: datetime,
        bookings: Sequence[Any],
        covered: Mapping[str, int],
        holders: Sequence[Holder],
        rooms: Mapping[str, Room],
        tally: Tally,
        result: SweepResult,
    ) -> None:
        phase = preemption.phase_of(boundary, now)
        demands = preemption.demands_at(boundary, bookings, covered)
        pools = {
            cls: preemption.eligible(
                [h for h in holders if h.gpu_class == cls], rooms.get(cls), now
            )
            for cls in demands
        }
        before = dict(tally.free)
        needs = preemption.plan_boundary(boundary, demands, pools, tally)
        if (boundary, phase) in self.marks:
            tally.settle()
            return
        self.marks.add((boundary, phase))
        for cls, parts in sorted(demands.items()):
            log(
                _log,
                logging.INFO,
                "preempt.boundary",
                boundary=format_utc(boundary),
                sweep=phase.value,
                gpu_class=cls,
                demand=sum(parts),
                free=before.get(cls, 0),
                kills=sum(n.gpus for n in needs if n.gpu_class == cls),
            )
        for need in needs:
            victims = await self._choose(need, tally)
            tally.kill(victims)
            self._note_unmet(need, victims, result)
            result.victims.extend(Victim(v, boundary, mono()) for v in victims)

    def _note_unmet(self, need: Need, victims: Sequence[Holder], result: SweepResult) -> None:
        short = preemption.unmet(need, victims)
        if not short:
            return
        result.unmet[need.gpu_class] = result.unmet.get(need.gpu_class, 0) + short
        if self._metrics is not None:
            self._metrics.unmet.labels(need.gpu_class).inc(short)
        log(
            _log,
            logging.WARNING,
            "preempt.unmet",
            gpu_class=need.gpu_class,
            boundary=format_utc(need.boundary),
            needed=need.gpus,
            unmet=short,
            node=need.node,
        )

    async def _choose(self, need: Need, tally: Tally) -> list[Holder]:
        """The app's victims when it answers, else the local random choice."""
        alive = tally.alive(need.pool)
        if not alive or need.gpus <= 0:
            return []
        if self.settings.delegate and self._app is not None:
            offered = Need(need.gpu_class, need.gpus, tuple(alive), need.boundary, need.node)
            answer = await self._app.select_victims(
                {need.gpu_class: need.gpus}, [candidate_of(h) for h in alive]
            )
            if isinstance(answer, Victims):
                self._count("app")
                return preemption.accept(offered, answer.pod_uids)
            log(_log, logging.WARNING, "preempt.selection_unavailable", error=repr(answer))
        self._count("local")
        return preemption.local_pick(need, alive, self._rng)

    def _count(self, by: str) -> None:
        if self._metrics is not None:
            self._metrics.selections.labels(by).inc()

    # --- headroom (R34) ---------------------------------------------------------------

    async def _headroom(
        self,
        now: datetime,
        pods: Mapping[str, PodView],
        holders: Sequence[Holder],
        tally: Tally,
        result: SweepResult,
    ) -> dict[str, datetime]:
        """Headroom warning instants per pod uid (every sweep); kills when due."""
        pct = self.settings.headroom_percent
        if pct <= 0:
            return {}
        stamped = {p.uid: instant_of(p, vocab.TERMINATION_WARNING_AT) for p in pods.values()}
        notice: dict[str, datetime] = {}
        due = self.last_headroom is None or (now - self.last_headroom) >= timedelta(
            seconds=self.settings.headroom_interval_s
        )
        for cls in sorted(tally.free):
            total = sum(tally.node_gpus[cls].values())
            short = max(0, outlook.headroom_target(total, pct) - tally.free[cls])
            if not short:
                continue
            room = Room(total, 0, tally.node_gpus[cls], tally.node_free[cls])
            pool = tally.alive(
                preemption.eligible([h for h in holders if h.gpu_class == cls], room, now)
            )
            for h in pool:
                notice[h.uid] = stamped.get(h.uid) or now + self.settings.headroom_notice
            if not due:
                continue
            killable = tuple(h for h in pool if self._noticed(stamped.get(h.uid), now))
            log(
                _log,
                logging.INFO,
                "preempt.headroom",
                gpu_class=cls,
                short=short,
                killable=len(killable),
            )
            need = Need(cls, short, killable, now)
            victims = await self._choose(need, tally)
            tally.kill(victims)
            self._note_unmet(need, victims, result)
            result.victims.extend(Victim(v, None, mono()) for v in victims)
        if due:
            self.last_headroom = now
        return notice

    def _noticed(self, warned_at: datetime | None, now: datetime) -> bool:
        """Killable for headroom: its stamped warning instant has passed (no notice
        gate when warnings are off)."""
        if not self.settings.warnings:
            return True
        return warned_at is not None and warned_at <= now


def setup(ground: Ground, victims: VictimApp | None, lock: asyncio.Lock) -> Sweeper:
    """The preemption sweep of one leader term, woken when a reservation's facts
    change, and the overstay reporter when it is on. ``victims``: the app's victim
    selection and overstay report (None: the sweep chooses, nothing is reported);
    ``lock``: the re-linker's, so a kill and a re-link never act on one pod at once."""
    settings = ground.settings
    caches = ground.caches
    sweeper = Sweeper(
        ground.gateway,
        ground.clock,
        ground.emit,
        pods=lambda: caches.pods.items,
        reservations=caches.by_name,
        inventory=caches.inventory,
        ready=caches.ready,
        app=victims,
        settings=settings.preemption,
        rules=settings.rules,
        zone=settings.common.display_timezone,
        lock=lock,
        metrics=SweepMetrics(ground.metrics.registry),
    )

    def reservation_changed(
        _key: str, old: GPUReservation | None, new: GPUReservation | None
    ) -> None:
        if not ledger_only(old, new):
            sweeper.touch()

    caches.reservations.listeners.append(reservation_changed)
    if settings.preemption.overstay_report and victims is not None:
        reporter = OverstayReporter(
            victims, ground.clock, caches.by_name, use_group=settings.rules.use_group
        )
        caches.pods.listeners.append(reporter.pod_changed)
    return sweeper
