"""On-demand (JIT) leases: the preflight guards, the ask and the retry schedule (R15–R20).

Terms:
- *candidate*: a pending pod routed to the JIT path (``routing.Path.JIT``).
- *class nodes*: the included nodes of the candidate's class, with their labels and
  free GPUs (from the node inventory); ``None`` when there is no data for the class yet
  (no inventory, or a class no node and no app class names) — every node guard then
  fails open.
- *hold*: the candidate is not asked for this round and is retried later; each hold
  says why (``Held``), so the pod can be told.

Preflight order (R15's newest): the class id (a label the app does not know is told
``UnknownGpuClass`` whatever the scheduler says), guard 1a (the scheduler verdict,
``verdict``), 1b (a known class with zero included nodes: *drained*), the node constraint
(``NoMatchingNode`` when the pod's ``nodeSelector``/required affinity allows none of
the class's nodes; ``WaitingForNode`` when every node it allows has fewer free GPUs
than it asks while the class as a whole could host it), guard 3 (a stuck holder),
guard 4 (overcommit), guard 5 (the largest single-node free block, net of GPUs this
batch already granted, for asks of 2 GPUs and more and best-effort pods). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from shared.appclient.backoff import COOLDOWN_SECONDS, Rand, after_denial, cooldown, exponential
from shared.appclient.outcomes import (
    Denied,
    Failure,
    Rejected,
    Transient,
)
from shared.policy.affinity import NodeConstraint, allows
from shared.policy.inventory import Inventory
from shared.policy.verdict import Scheduled, lease_can_help

#: A guard hold is retried this much later (R19).
HOLD_SECONDS = 30.0
#: Guard 3 counts an admitted pod as stuck only once it has been admitted this long.
#: Before that its ``Unschedulable`` may still be the verdict from before it carried the
#: toleration: kube-scheduler requeues an updated pod at once, but one in backoff waits
#: up to ``podMaxBackoffSeconds`` (10 s) for its retry.
STUCK_GRACE_SECONDS = 15.0
#: Exponential backoff of non-retryable faults: base and cap (R19).
ERROR_BASE_SECONDS = COOLDOWN_SECONDS[0]
ERROR_CAP_SECONDS = 1800.0


class Held(StrEnum):
    """Why a candidate is not asked this round."""

    NO_VERDICT = "no_verdict"
    NOT_FIXABLE = "not_fixable"
    UNKNOWN_CLASS = "unknown_class"
    DRAINED = "drained"
    NO_MATCHING_NODE = "no_matching_node"
    WAITING_FOR_NODE = "waiting_for_node"
    STUCK_HOLDER = "stuck_holder"
    OVERCOMMIT = "overcommit"
    FRAGMENTED = "fragmented"


#: Holds that pause the whole class (told as OnDemandAdmissionPaused).
PAUSES = frozenset({Held.DRAINED, Held.STUCK_HOLDER, Held.OVERCOMMIT})


@dataclass(frozen=True)
class ClassNode:
    """One included node of a class: name, labels, free GPUs."""

    name: str
    labels: tuple[tuple[str, str], ...]
    free: int


@dataclass(frozen=True)
class ClassState:
    """What the guards know about one class at one instant."""

    #: Included nodes; None = no data (fail open).
    nodes: tuple[ClassNode, ...] | None = None
    #: Guard 3: a reservation holder of the class is stuck Pending.
    stuck: bool = False
    #: Guard 4: the app counts more GPUs than exist (from the capacity audit).
    overcommitted: bool = False
    #: Guard 4 with ONDEMAND_OVERCOMMIT_FIT: the physical GPUs of the class (None:
    #: pause every ask) and the active reservations' windows ``(start, end, gpus)`` a
    #: lease must fit beside for its whole duration.
    physical: int | None = None
    booked: tuple[tuple[datetime, datetime, int], ...] = ()

    @property
    def largest_block(self) -> int | None:
        return None if self.nodes is None else max((n.free for n in self.nodes), default=0)


@dataclass(frozen=True)
class Candidate:
    """What the preflight reads of a candidate pod."""

    phase: str
    scheduled: Scheduled | None
    gpu_class: str | None
    gpus: int
    best_effort: bool
    constraint: NodeConstraint
    #: The lease's duration (guard 4 checks the whole of it).
    duration_s: int = 0


@dataclass(frozen=True)
class Preflight:
    """The preflight answer: ask (``held`` None) or hold, and why."""

    held: Held | None = None
    #: The other classes whose nodes the pod's constraint matches (NoMatchingNode).
    elsewhere: tuple[str, ...] = ()

    @property
    def ask(self) -> bool:
        return self.held is None


def allowed_nodes(constraint: NodeConstraint, nodes: Iterable[ClassNode]) -> list[ClassNode]:
    """The class nodes the pod's node constraint allows."""
    return [n for n in nodes if allows(constraint, dict(n.labels), n.name)]


def node_fit(
    constraint: NodeConstraint, gpus: int, nodes: Sequence[ClassNode] | None
) -> Held | None:
    """NoMatchingNode / WaitingForNode, or None (fits, narrows nothing, or no data)."""
    if nodes is None or not nodes or not constraint.narrows:
        return None
    allowed = allowed_nodes(constraint, nodes)
    if not allowed:
        return Held.NO_MATCHING_NODE
    if len(allowed) == len(nodes):
        return None
    if max(n.free for n in allowed) < gpus <= max(n.free for n in nodes):
        return Held.WAITING_FOR_NODE
    return None


def preflight(
    cand: Candidate,
    class_known: bool,
    state: ClassState,
    claimed: int = 0,
    others: Mapping[str, Sequence[ClassNode]] | None = None,
    now: datetime | None = None,
) -> Preflight:
    """R15 steps 3–8 for one candidate at ``now``; ``claimed`` GPUs of its class were
    granted earlier in this batch (guards 4 and 5 count them as taken). No side
    effects."""
    if not class_known:
        return Preflight(Held.UNKNOWN_CLASS)
    verdict = lease_can_help(cand.phase, cand.scheduled)
    if verdict is None:
        return Preflight(Held.NO_VERDICT)
    if verdict is False:
        return Preflight(Held.NOT_FIXABLE)
    if state.nodes is not None and not state.nodes:
        return Preflight(Held.DRAINED)
    fit = node_fit(cand.constraint, cand.gpus, state.nodes)
    if fit is Held.NO_MATCHING_NODE:
        return Preflight(fit, elsewhere=matching_classes(cand.constraint, others or {}))
    if fit is not None:
        return Preflight(fit)
    if state.stuck:
        return Preflight(Held.STUCK_HOLDER)
    if (
        state.overcommitted
        and not cand.best_effort
        and not fits_physically(cand, state, claimed, now)
    ):
        return Preflight(Held.OVERCOMMIT)
    block = state.largest_block
    if (cand.gpus >= 2 or cand.best_effort) and block is not None and block - claimed < cand.gpus:
        return Preflight(Held.FRAGMENTED)
    return Preflight()


def fits_physically(cand: Candidate, state: ClassState, claimed: int, now: datetime | None) -> bool:
    """Guard 4 (fit mode): the lease fits in the physical GPUs beside every active
    reservation for its whole duration; never without a physical count or an instant."""
    if state.physical is None or now is None:
        return False
    end = now + timedelta(seconds=cand.duration_s)
    peak = booked_peak(state.booked, now, max(end, now + timedelta(seconds=1)))
    return state.physical - peak - claimed >= cand.gpus


def matching_classes(
    constraint: NodeConstraint, others: Mapping[str, Sequence[ClassNode]]
) -> tuple[str, ...]:
    """Classes with at least one node the constraint allows (named in NoMatchingNode)."""
    return tuple(sorted(c for c, nodes in others.items() if allowed_nodes(constraint, nodes)))


def stuck_holder(
    phase: str,
    scheduled: Scheduled | None,
    constraint: NodeConstraint,
    gpus: int,
    nodes: Sequence[ClassNode] | None,
    admitted_for: float | None = None,
) -> bool:
    """Guard 3 (R17) for one admitted pod: Pending, the scheduler says Unschedulable,
    and its own placement does not explain it (it allows some class node, and not only
    full ones while another node has room). ``admitted_for``: seconds since its
    admission; a pod admitted less than ``STUCK_GRACE_SECONDS`` ago is not stuck yet
    (the scheduler may not have retried it since); None (unknown) counts as long ago."""
    if phase != "Pending" or scheduled is None or scheduled.status != "False":
        return False
    if scheduled.reason != "Unschedulable":
        return False
    if admitted_for is not None and admitted_for < STUCK_GRACE_SECONDS:
        return False
    return node_fit(constraint, gpus, nodes) is None


def booked_peak(
    windows: Iterable[tuple[datetime, datetime, int]], start: datetime, end: datetime
) -> int:
    """The most GPUs booked at any instant of ``[start, end)`` by ``windows``
    (``(start, end, gpus)`` of active reservations)."""
    inside = [(s, e, g) for s, e, g in windows if s < end and e > start]
    instants = {start, *(s for s, _, _ in inside if s > start)}
    return max((sum(g for s, e, g in inside if s <= t < e) for t in instants), default=0)


# --- The retry schedule (R19) ---------------------------------------------------------


class Outcome(StrEnum):
    """The class of an answer to a lease ask, for logs and the retry schedule."""

    CONTENDED = "contended"
    SCHEDULED = "scheduled"
    STRUCTURAL = "structural"
    REJECTED = "rejected"
    ERROR = "error"
    TRANSIENT = "transient"


@dataclass(frozen=True)
class Retry:
    """When to ask again, and the consecutive non-retryable error count after this."""

    at: datetime
    outcome: Outcome
    errors: int


def retry_after(failure: Failure, now: datetime, errors: int, rand: Rand) -> Retry:
    """R19: contended → 2–5 min (or a later ``not_before``, capped at 30 min);
    structural → exponential to 30 min; network/5xx → 2–5 min, no Event; any other
    4xx (404 included) → exponential to 30 min. ``errors`` counts earlier consecutive
    non-retryable faults (reset by any retryable answer)."""
    if isinstance(failure, Denied):
        plan = after_denial(failure.denial, now, errors, rand, ERROR_CAP_SECONDS)
        if not failure.denial.retryable:
            return Retry(plan.at, Outcome.STRUCTURAL, errors + 1)
        kind = Outcome.SCHEDULED if failure.denial.not_before else Outcome.CONTENDED
        return Retry(plan.at, kind, 0)
    if isinstance(failure, Transient):
        return Retry(now + timedelta(seconds=cooldown(rand)), Outcome.TRANSIENT, 0)
    delay = exponential(errors, ERROR_BASE_SECONDS, ERROR_CAP_SECONDS, rand)
    kind = Outcome.REJECTED if isinstance(failure, Rejected) else Outcome.ERROR
    return Retry(now + timedelta(seconds=delay), kind, errors + 1)


def jitter(now: datetime, rand: Rand) -> datetime:
    """The ordinary 2–5 minute retry (not granted by a delegated batch, failed admit)."""
    return now + timedelta(seconds=cooldown(rand))


def hold_until(now: datetime) -> datetime:
    """A guard hold's retry (flat 30 s)."""
    return now + timedelta(seconds=HOLD_SECONDS)


def lease_seconds(minimum_runtime_s: int, buffer: timedelta) -> int:
    """R18: the lease covers the minimum runtime plus the buffer."""
    return minimum_runtime_s + int(buffer.total_seconds())


def class_nodes(inventory: Inventory | None, gpu_class: str) -> tuple[ClassNode, ...] | None:
    """The included nodes of ``gpu_class`` with labels and free GPUs; None = no data."""
    cap = inventory.capacity(gpu_class) if inventory is not None else None
    if inventory is None or cap is None:
        return None
    found = []
    for node in cap.nodes:
        facts = inventory.node_of(node.name)
        found.append(ClassNode(node.name, facts.labels if facts else (), node.free))
    return tuple(found)
