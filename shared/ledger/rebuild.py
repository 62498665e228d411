"""Rebuilding a ledger from the live pods (self-healing; no side effects).

The reconciler keeps the ledger true by comparing the holds with the pods admitted
under the reservation (``PodUse``): ``rebuild`` gives the ledger the pods imply,
``unseen`` counts the holds released because their pod never appeared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cached_property

from shared import model
from shared.ledger.arithmetic import open_for_claims
from shared.model import GPUReservation, Hold


@dataclass(frozen=True)
class PodUse:
    """A live pod admitted under the reservation, as the reconciler sees it."""

    name: str
    uid: str
    gpus: int
    #: The pod's ``galends/admission-claim`` (None: admitted without one, e.g. legacy).
    claim: str | None = None
    #: The pod's ``galends/admitted-at`` (None: unknown or unreadable).
    admitted_at: datetime | None = None
    #: The pod's namespace: only the booking owner's pods take a hold (None: not checked).
    namespace: str | None = None
    #: ``metadata.creationTimestamp`` (None: absent or unreadable) and
    #: ``metadata.resourceVersion``: the order pods were persisted in (``persisted``).
    created_at: datetime | None = None
    resource_version: str = ""

    def __post_init__(self) -> None:
        # ``claim`` is the ledger's key of the pod's claim id, as holds keep it.
        if self.claim is not None:
            object.__setattr__(self, "claim", model.as_claim_key(self.claim))

    @cached_property
    def order(self) -> tuple[bool, datetime, bool, int, str]:
        """``persisted``'s sort key, computed once."""
        return _order(self)


def persisted(pod: PodUse) -> tuple[bool, datetime, bool, int, str]:
    """The sort key of "persisted first": creation time (one-second resolution), then
    the resourceVersion as an integer where it parses (the API server hands them out in
    write order; a watch delivers creations in that order), then the uid (a fixed,
    arbitrary tie-break). A pod with no readable time or version sorts last."""
    return pod.order


def _order(pod: PodUse) -> tuple[bool, datetime, bool, int, str]:
    rv = pod.resource_version
    number = int(rv) if rv.isascii() and rv.isdigit() else -1
    created = pod.created_at
    return (created is None, created or _NEVER, number < 0, number, pod.uid)


_NEVER = datetime.min.replace(tzinfo=UTC)


def presumed_announced(pod: PodUse, now: datetime, ttl_s: float) -> bool:
    """Whether a pod found without a hold was surely announced already.

    Admissions are announced within seconds, so a pod admitted more than the claim
    TTL ago whose hold is missing (a wiped status) was announced then, and a pod
    without a readable ``admitted-at`` (legacy) is not announced afresh. Only a pod
    admitted within the TTL is announced (again, at worst).
    """
    if pod.admitted_at is None:
        return True
    return pod.admitted_at <= now - timedelta(seconds=ttl_s)


def rebuild(
    res: GPUReservation,
    pods: Iterable[PodUse],
    now: datetime,
    ttl_s: float,
    unseen_s: float | None = None,
) -> GPUReservation:
    """The ledger the live ``pods`` imply (self-healing; no side effects).

    The pods are taken in the order they were persisted (``persisted``). Each pod
    keeps the hold bound to its uid; else it takes the hold of its claim id when that
    hold is unbound or bound to a pod that is gone (one claim binds one pod: the first
    persisted with it — a later pod carrying it is a copy and gets nothing), and only a
    pod of the booking owner's namespace binds by claim. Held pods keep their holds
    whatever the window (an overstaying pod is preemption's business), sized by their
    request. Unbound holds nobody took are kept while younger than ``unseen_s`` (their
    pod may still be being created; ``ttl_s`` when not given).

    A pod with no hold is *adopted* (a hold with its claim id, else ``pod-<uid>``,
    marked announced unless admitted within the TTL: ``presumed_announced``) when it
    is the owner's, asks for GPUs, its claim id is not held already, the booking is
    open for claims now (``open_for_claims``) and the budget has room for it after
    every hold kept — in persisted order, never beyond ``gpuCount``. So a wiped status
    heals from the pods, and a pod admitted outside the ledger (a webhook outage, a
    forged reference) counts only if it could have been admitted now; the
    reconciler's backstop evicts the others from reserved nodes.
    """
    ordered = sorted(pods, key=persisted)
    owner = res.facts.owner
    live = {p.uid for p in ordered}
    by_uid: dict[str, Hold] = {}
    for h in res.holds:
        if h.pod_uid:
            by_uid.setdefault(h.pod_uid, h)  # two holds bound to one pod: the first counts
    by_claim = {h.claim: h for h in res.holds}
    kept: list[Hold] = []
    taken: set[str] = set()
    orphans: list[PodUse] = []
    for pod in ordered:
        match = by_uid.get(pod.uid)
        if match is None and pod.claim and (pod.namespace is None or pod.namespace == owner):
            hold = by_claim.get(pod.claim)
            if hold is not None and (hold.pod_uid is None or hold.pod_uid not in live):
                match = hold
        if match is None or match.claim in taken:
            orphans.append(pod)
            continue
        taken.add(match.claim)
        if (match.gpus, match.pod, match.pod_uid) == (pod.gpus, pod.name, pod.uid):
            kept.append(match)  # as it is: most holds of a booking, on every event
        else:
            kept.append(
                Hold(match.claim, pod.gpus, match.at, pod.name, pod.uid, announced=match.announced)
            )
    cutoff = now - timedelta(seconds=ttl_s if unseen_s is None else unseen_s)
    by_name = {p.name: p for p in ordered}
    pending = [
        h
        for h in res.holds
        if not h.bound and h.claim not in taken and h.at >= cutoff and not superseded(h, by_name)
    ]
    taken.update(h.claim for h in pending)
    room = res.facts.gpu_count - sum(h.gpus for h in (*pending, *kept))
    if open_for_claims(res.facts, now):
        for pod in orphans:
            claim_id = pod.claim or model.claim_key(f"pod-{pod.uid}")
            if pod.namespace not in (None, owner) or pod.gpus <= 0 or claim_id in taken:
                continue
            if pod.gpus > room:
                continue
            room -= pod.gpus
            taken.add(claim_id)
            announced = presumed_announced(pod, now, ttl_s)
            kept.append(Hold(claim_id, pod.gpus, now, pod.name, pod.uid, announced))
    return replace(res, holds=tuple(pending + kept))


def unseen(before: GPUReservation, after: GPUReservation, now: datetime, unseen_s: float) -> int:
    """How many unbound holds of ``before`` that ``after`` no longer has were older
    than ``unseen_s``: holds whose pod never appeared, released (the rest of the
    dropped unbound holds were superseded by a later admission of their pod)."""
    cutoff = now - timedelta(seconds=unseen_s)
    left = {h.claim for h in after.holds}
    return sum(1 for h in before.holds if not h.bound and h.claim not in left and h.at < cutoff)


def superseded(hold: Hold, pods: Mapping[str, PodUse]) -> bool:
    """Whether an unbound ``hold`` is dead although young: it names a live pod that
    carries another claim, admitted at or after the hold was made. The admission that
    made the hold stopped between its claim and stamping the pod (a crash, a refused
    patch), and the pod was admitted again since — it can never carry this claim, so
    the hold would only keep the budget from the next pod until the TTL. A pod
    admitted before the hold (an old pod whose name a new create reuses) keeps it."""
    pod = pods.get(hold.pod) if hold.pod else None
    if pod is None or pod.claim is None or pod.claim == hold.claim:
        return False
    return pod.admitted_at is not None and pod.admitted_at >= hold.at
