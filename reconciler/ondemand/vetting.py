"""Vetting one batch's on-demand candidates (R15–R17, R20): who is due, who may ask.

``read_context`` takes what a batch reads once: the caches, the class ids, each
class's nodes and state for the guards (3: a stuck holder, R17; 4: overcommit). ``due``
lists the waiting GPU pods that routing sends to JIT (re-routed every batch: a booking
that becomes admittable wins) whose retry time has come, oldest first, keeping one
``Track`` (the retry state) per candidate. ``vet`` runs ``shared.policy.ondemand.preflight``
over them in that order — guard 1a verdict, class id, 1b drained, node constraint, 3
stuck holder, 4 overcommit, 5 largest free block net of this batch's grants — and
records each hold on its track at once (a verdict arriving before the holds are told
must find the track waiting for it, R21).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from reconciler.admission import pending
from reconciler.base.caches import Caches
from reconciler.base.pods import PodView
from reconciler.base.settings import ReconcilerSettings
from shared.appclient import GpuClass
from shared.model import GPUReservation, State
from shared.policy import ondemand
from shared.policy.ondemand import Candidate, ClassState, Held, Preflight
from shared.policy.routing import Path, Pool, route_in

#: Holds retried at once when a node changes or a pod frees GPUs or gets placed.
RECHECKED = frozenset(
    {
        Held.DRAINED,
        Held.NO_MATCHING_NODE,
        Held.WAITING_FOR_NODE,
        Held.STUCK_HOLDER,
        Held.OVERCOMMIT,
        Held.FRAGMENTED,
    }
)


@dataclass
class Track:
    """One candidate's retry state (memory only: a restart asks again at once, and the
    idempotency key returns any lease granted before)."""

    seen: datetime
    due: datetime
    attempt: int = 1
    errors: int = 0
    waiting_verdict: bool = False
    #: The guard holding it (None: due, or waiting after an app answer).
    held: Held | None = None
    #: Its last ask failed for an app outage: asked again the moment the app answers.
    outage: bool = False
    #: This outage was told (OnDemandLeaseDelayed): once per outage per pod.
    told_outage: bool = False


@dataclass(frozen=True)
class Context:
    """What one batch reads, taken once."""

    now: datetime
    pods: list[PodView]
    pool: list[GPUReservation]
    states: dict[str, ClassState]
    others: dict[str, tuple[ondemand.ClassNode, ...]]
    class_ids: dict[str, int]
    #: Guard 3's classes, with the pods that hold them stuck (for the gate log only).
    stuck: dict[str, list[str]] = field(default_factory=dict)
    #: Guard 4's classes, with their deficit in GPUs.
    deficits: dict[str, int] = field(default_factory=dict)


@dataclass
class Vetted:
    """The outcome of vetting one batch's due candidates."""

    #: Pods that may ask, in the order they were vetted.
    eligible: list[PodView] = field(default_factory=list)
    #: Pods held by a guard, with the preflight that held them (to be told why).
    held: list[tuple[PodView, Preflight]] = field(default_factory=list)
    #: Pods paused per (class, guard): the gate warning's counts (R38).
    gated: dict[tuple[str, str], int] = field(default_factory=dict)


def read_context(
    caches: Caches,
    classes: Mapping[int, GpuClass],
    deficits: Mapping[str, int],
    settings: ReconcilerSettings,
    now: datetime,
) -> Context:
    """The caches as one batch sees them, with each class's state for the guards."""
    pods = list(caches.pods.items.values())
    pool = list(caches.reservations.items.values())
    inventory = caches.inventory()
    class_ids = {c.label_value: c.id for c in classes.values() if c.label_value}
    labels = set(class_ids) | (set(inventory.classes) if inventory is not None else set())
    nodes = {c: ondemand.class_nodes(inventory, c) for c in labels}
    stuck = stuck_classes(pods, nodes, now)
    states = {
        c: ClassState(
            nodes=nodes.get(c),
            stuck=c in stuck,
            overcommitted=deficits.get(c, 0) > 0,
            physical=physical(c, inventory, settings) if c in deficits else None,
            booked=windows(c, pool) if c in deficits else (),
        )
        for c in labels
    }
    others = {c: n for c, n in nodes.items() if n}
    return Context(now, pods, pool, states, others, class_ids, stuck, dict(deficits))


def physical(cls: str, inventory: Any, settings: ReconcilerSettings) -> int | None:
    """Guard 4 with ONDEMAND_OVERCOMMIT_FIT: the class's physical GPUs (None: pause)."""
    cap = inventory.capacity(cls) if inventory is not None else None
    if not settings.ondemand.overcommit_fit or cap is None:
        return None
    return int(cap.total)


def stuck_classes(
    pods: list[PodView],
    nodes: Mapping[str, tuple[ondemand.ClassNode, ...] | None],
    now: datetime,
) -> dict[str, list[str]]:
    """Guard 3 (R17): classes with an admitted pod the scheduler cannot place that
    its own node constraint does not explain (and that it has had the time to retry
    since the admission), with those pods (for the log only)."""
    stuck: dict[str, list[str]] = {}
    for pod in pods:
        cls = pod.profile.gpu_class
        if not pod.admitted or cls is None or pod.finished or pod.deleting:
            continue
        at = pod.admitted_at
        since = (now - at).total_seconds() if at is not None else None
        if ondemand.stuck_holder(
            pod.phase, pod.scheduled, pod.constraint, pod.gpus, nodes.get(cls), since
        ):
            stuck.setdefault(cls, []).append(pod.key)
    return stuck


def windows(cls: str, pool: list[GPUReservation]) -> tuple[tuple[datetime, datetime, int], ...]:
    """The active reservations of ``cls`` as ``(start, end, gpus)`` (guard 4's fit)."""
    return tuple(
        (r.facts.start, r.facts.end, r.facts.gpu_count)
        for r in pool
        if r.facts.gpu_class == cls and r.facts.state is State.ACTIVE
    )


def due(
    ctx: Context, tracks: dict[str, Track], placed: set[str], settings: ReconcilerSettings
) -> list[PodView]:
    """Candidates whose retry time has come, oldest first; ``tracks`` kept in step, and
    ``placed`` (pods this process admitted) narrowed to what the cache has not shown."""
    found: list[PodView] = []
    owned = Pool(ctx.pool)
    placed &= {p.uid for p in ctx.pods if not p.admitted}  # the cache caught up
    for pod in pending.waiting(ctx.pods):
        if pod.phase != "Pending" or pod.uid in placed:
            continue
        if route_in(pod.profile, owned, ctx.now, settings.rules).path is Path.JIT:
            found.append(pod)
    live = {p.uid for p in found}
    for uid in tracks.keys() - live:
        del tracks[uid]
    for pod in found:
        tracks.setdefault(pod.uid, Track(seen=ctx.now, due=ctx.now))
    ready = [p for p in found if tracks[p.uid].due <= ctx.now]
    return sorted(ready, key=lambda p: (p.created, p.namespace, p.name))


def vet(
    pods: list[PodView], ctx: Context, tracks: dict[str, Track], settings: ReconcilerSettings
) -> Vetted:
    """Preflight each due pod in order, the batch's claimed GPUs tallied per class
    (guard 5); each hold recorded on the pod's track at once."""
    vetted = Vetted()
    claimed: dict[str, int] = {}
    for pod in pods:
        cls = pod.profile.gpu_class or ""
        pre = ondemand.preflight(
            candidate(pod, settings),
            cls in ctx.class_ids,
            ctx.states.get(cls, ClassState()),
            claimed.get(cls, 0),
            {c: n for c, n in ctx.others.items() if c != cls},
            ctx.now,
        )
        if pre.ask:
            tracks[pod.uid].held = None
            claimed[cls] = claimed.get(cls, 0) + pod.gpus
            vetted.eligible.append(pod)
            continue
        if pre.held in ondemand.PAUSES and not (
            pre.held is Held.OVERCOMMIT and pod.profile.best_effort
        ):
            gate = (cls, str(pre.held))
            vetted.gated[gate] = vetted.gated.get(gate, 0) + 1
        held_by(tracks[pod.uid], pre, ctx.now)
        vetted.held.append((pod, pre))
    return vetted


def held_by(track: Track, pre: Preflight, now: datetime) -> None:
    """Record the hold on the candidate's track — at once, while vetting: a verdict
    that arrives before the batch's holds are told must find the track waiting for
    it (R21), or the pod waits for its 30 s retry."""
    track.due = ondemand.hold_until(now)
    track.held = pre.held
    track.waiting_verdict = pre.held is Held.NO_VERDICT


def candidate(pod: PodView, settings: ReconcilerSettings) -> Candidate:
    """What preflight reads of ``pod``."""
    return Candidate(
        phase=pod.phase,
        scheduled=pod.scheduled,
        gpu_class=pod.profile.gpu_class,
        gpus=pod.gpus,
        best_effort=pod.profile.best_effort,
        constraint=pod.constraint,
        duration_s=duration(pod, settings),
    )


def duration(pod: PodView, settings: ReconcilerSettings) -> int:
    """The lease's length in seconds (0: a best-effort stub)."""
    if pod.profile.best_effort:
        return 0
    runtime = pod.profile.minimum_runtime_s or 0
    return ondemand.lease_seconds(runtime, settings.ondemand.buffer)


def moved(old: PodView | None, new: PodView | None) -> bool:
    """Whether a change of a placed or admitted pod may change capacity or guard 3."""
    if old is None or (old.node is None and not old.admitted):
        return False
    if new is None:
        return True
    return (old.node, old.phase, old.deleting, old.scheduled) != (
        new.node,
        new.phase,
        new.deleting,
        new.scheduled,
    )
