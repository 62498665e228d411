"""The proof-of-admission backstop (DESIGN §3, §10): no pod that is not admitted
there stays on a reserved node, whatever path it took.

The rule keys on where a pod is, and on what it declares. A live pod is *in scope*
when it is bound or pinned (``spec.nodeName``) to a *reserved node* — a node of the
node cache whose ``gpu-class-reservation`` NoSchedule taints name a class — or when it
declares a reservation toleration of any class (explicit key, ``Exists`` without a
key, or another class's), whatever its GPUs. Its *place* is the reserved node's
classes, or, while it is on no reserved node, the classes its tolerations name. It is
admitted there only when it references booking R (``galends/booking-reference``) and

- R exists (``unknown_reservation``, once a full pull from the app has completed: the
  mirror creates every reservation a pod references that the app still knows);
- R's owner is the pod's namespace (``not_owner``), unless the evictor handles the pod
  (R cancelled or reassigned while its window is open: ``ReservationCancelled`` /
  ``ReservationReassigned``; the backstop leaves the pod to it);
- R's class is the node's (a class of it), or, off reserved nodes, every class it
  tolerates is R's (``wrong_class``);
- it asks for GPUs (``no_gpus``: reservations admit GPU pods only);
- R's ledger holds it: a hold bound to its uid, or the hold of its claim id — bound
  to no live pod, and the pod is the first persisted of those carrying that claim; or,
  without one, upkeep would adopt it now (``shared.ledger.rebuild``: R open for
  claims, the owner's pod, room in the budget after every hold, in persisted order).
  Otherwise: ``shared_claim`` when another live pod holds its claim (a copy; one claim
  admits one pod), ``not_open`` when R is not open for claims, ``over_budget`` else.

A pod with no reference is in breach as ``no_reference`` when it declares a
toleration, ``no_admission`` when it declares nothing (a pod pinned by ``nodeName``).
The rule simulates upkeep with the same pure function upkeep writes with, so wiping
every ledger status rebuilds the holds of every pod it leaves alone. A pod with a
bound hold keeps it after R's window ends: an overstay is preemption's business.

Out of scope (never judged): pods in the controller's own namespace (only the
operator and the controller's service accounts create pods there); DaemonSet-
controlled pods in the exempt namespaces (``UNADMITTED_EXEMPT_NAMESPACES``: device
plugins and monitoring agents tolerate every taint by design); mirror pods of static
pods (``kubernetes.io/config.mirror``: the kubelet runs them from a file on the node, so
a delete would not stop them; one a user creates with the annotation is an orphan no
kubelet runs — it deletes it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from reconciler.admission.evicting import HoldIndex, eviction_reason, hold_index
from reconciler.base.pods import ANY_CLASS, PodView
from reconciler.base.upkeep import charged_to
from shared import ledger, vocab
from shared.model import GPUReservation
from shared.policy.inventory import NodeFacts
from shared.policy.wording import clip

#: The live pods charged to a reservation (``caches.ByReference.pods``).
Group = Callable[[str], list[PodView]]
#: The live pods charged to a reservation that carry a claim key
#: (``caches.ByReference.sharing``).
Sharing = Callable[[str, str], list[PodView]]


class Breach(StrEnum):
    """Why an in-scope pod is not admitted where it is (the metric's ``reason``)."""

    NO_ADMISSION = "no_admission"
    NO_REFERENCE = "no_reference"
    UNKNOWN_RESERVATION = "unknown_reservation"
    NOT_OWNER = "not_owner"
    WRONG_CLASS = "wrong_class"
    NO_GPUS = "no_gpus"
    SHARED_CLAIM = "shared_claim"
    NOT_OPEN = "not_open"
    OVER_BUDGET = "over_budget"


@dataclass(frozen=True)
class Scope:
    """Whose pods the rule leaves alone."""

    #: The controller namespace (POD_NAMESPACE): every pod there is exempt.
    controller_namespace: str
    #: UNADMITTED_EXEMPT_NAMESPACES: DaemonSet-controlled pods there are exempt.
    exempt_namespaces: frozenset[str] = field(default_factory=frozenset)

    def exempt(self, pod: PodView) -> bool:
        if pod.namespace == self.controller_namespace or pod.mirror:
            return True
        return pod.daemon and pod.namespace in self.exempt_namespaces


@dataclass(frozen=True)
class Times:
    """The ledger timing upkeep rebuilds with (the rule simulates the same rebuild)."""

    #: LEDGER_CLAIM_TTL_SECONDS.
    ttl_s: float = 120.0
    #: LEDGER_UNSEEN_HOLD_SECONDS (never more than the TTL).
    unseen_s: float = 10.0


@dataclass(frozen=True)
class Finding:
    """One pod in breach of the rule."""

    pod: PodView
    breach: Breach
    #: The referenced reservation's object name, if the pod carries one.
    reference: str | None = None
    #: ``namespace/name`` of the pod holding the same claim (``shared_claim``).
    holder: str | None = None
    #: The reserved node's classes when the pod is on one (else empty).
    place: tuple[str, ...] = ()


def reserved_classes(pod: PodView, nodes: Mapping[str, NodeFacts]) -> tuple[str, ...]:
    """The classes of the reserved node ``pod`` is bound or pinned to; empty when it
    is on none (no ``nodeName``, a node without a reservation taint naming a class)."""
    facts = nodes.get(pod.node) if pod.node else None
    return facts.classes if facts is not None else ()


def in_scope(pod: PodView, scope: Scope, nodes: Mapping[str, NodeFacts]) -> bool:
    """A live pod on a reserved node or declaring a reservation toleration, not exempt."""
    live = pod.uid and not pod.finished and not pod.deleting
    if not live or scope.exempt(pod):
        return False
    return pod.declared or bool(reserved_classes(pod, nodes))


def group_from(pods: Iterable[PodView]) -> Group:
    """A ``Group`` over ``pods`` (one scan; for callers without the cache's index)."""
    grouped: dict[str, list[PodView]] = {}
    for pod in pods:
        ref = charged_to(pod)
        if ref is not None:
            grouped.setdefault(ref, []).append(pod)
    return lambda name: grouped.get(name, [])


def bound_uids(res: GPUReservation) -> frozenset[str] | None:
    """The uids ``res``'s holds are bound to, each of which ``shared.ledger.rebuild``
    keeps held whatever the other pods and holds are; None when no uid is sure to be
    (two holds share a claim id: a malformed ledger).

    Why a bound uid is held: ``rebuild`` gives a live pod the first hold bound to its
    uid unless that hold's claim was taken by a pod persisted before it. An earlier pod
    takes a claim only through its own uid's hold (another hold, so another claim when
    the claims are distinct) or through the hold of its claim id when that hold is
    unbound or bound to a gone pod — never the hold of a live pod. So with distinct
    claims, a live pod bound by uid keeps its hold, in whatever order the pods come."""
    bound = hold_index(res).bound
    return None if bound is None else frozenset(bound)


class Ledgers:
    """R's ledger as upkeep would write it now, per reservation, memoised for one pass:
    ``shared.ledger.rebuild`` of R over its live pods (``group``) — or, where the
    answer is sure without it (``shortcut``), from R's holds and the pods carrying the
    claim in question (``sharing``: the cache's index; by default built from ``group``
    once per reservation)."""

    def __init__(
        self,
        group: Group,
        now: datetime,
        times: Times,
        sharing: Sharing | None = None,
        *,
        shortcuts: bool = True,
    ) -> None:
        self._group = group
        self._now = now
        self._times = times
        self._sharing = sharing
        self._shortcuts = shortcuts
        #: reservation → (held uids, claim → holder key, uids judged).
        self._memo: dict[str, tuple[set[str], dict[str, str], frozenset[str]]] = {}
        #: reservation → its holds indexed.
        self._holds: dict[str, HoldIndex] = {}
        #: reservation → claim → its live pods carrying it (without ``sharing``).
        self._claims: dict[str, dict[str, list[PodView]]] = {}
        #: Rebuilds run (what the pass cost).
        self.rebuilds = 0

    def holds(self, res: GPUReservation) -> HoldIndex:
        """``res``'s holds indexed (memoised for the pass)."""
        got = self._holds.get(res.name)
        if got is None:
            got = self._holds[res.name] = hold_index(res)
        return got

    def carrying(self, name: str, claim: str) -> list[PodView]:
        """The live pods charged to reservation ``name`` that carry ``claim``."""
        if self._sharing is not None:
            return self._sharing(name, claim)
        claims = self._claims.get(name)
        if claims is None:
            claims = self._claims[name] = {}
            for member in self._group(name):
                if member.claim:
                    claims.setdefault(member.claim, []).append(member)
        return claims.get(claim, [])

    def standing(self, pod: PodView, res: GPUReservation) -> tuple[bool, str | None]:
        """(held, holder): whether ``pod`` holds a hold of R's rebuilt ledger, and when
        it does not, ``namespace/name`` of the live pod holding its claim id, if any."""
        if self._shortcuts:
            known = self.shortcut(pod, res)
            if known is not None:
                return known
        got = self._memo.get(res.name)
        if got is None or pod.uid not in got[2]:
            members = self._group(res.name)
            if not any(m.uid == pod.uid for m in members):
                members = [*members, pod]
            t = self._times
            uses = [m.use() for m in members]
            wanted = ledger.rebuild(res, uses, self._now, t.ttl_s, t.unseen_s)
            self.rebuilds += 1
            keys = {m.uid: m.key for m in members}
            held = {h.pod_uid for h in wanted.holds if h.pod_uid}
            holders = {h.claim: keys[h.pod_uid] for h in wanted.holds if h.pod_uid in keys}
            got = (held, holders, frozenset(keys))
            self._memo[res.name] = got
        held, holders, _ = got
        if pod.uid in held:
            return True, None
        holder = holders.get(pod.claim) if pod.claim else None
        return False, holder if holder != pod.key else None

    def shortcut(self, pod: PodView, res: GPUReservation) -> tuple[bool, str | None] | None:
        """``standing`` where R's holds settle it without a rebuild; None elsewhere.
        Both cases need distinct claims (every ledger the product writes):

        - a pod R's holds bind by uid is held (``bound_uids``);
        - a pod of R's owner whose claim's hold is unbound: ``rebuild`` gives that hold
          to the first persisted of the live pods of R's owner carrying the claim that
          no hold binds by uid — no other pod can take it (a pod takes a hold of
          another claim through its uid, and the hold of its own claim otherwise) —
          and every other of them holds nothing (adoption skips a claim already held):
          ``pod`` is held when it is that first one, else a copy of its holder.

        Everything else — no hold of its claim (adoption weighs the budget), a hold
        bound to another pod, a pod of another namespace — takes the rebuild."""
        index = self.holds(res)
        bound = index.bound
        if bound is None:
            return None
        if pod.uid in bound:
            return True, None
        owner, claim = res.facts.owner, pod.claim
        hold = index.claims.get(claim) if claim else None
        if claim is None or hold is None or hold.pod_uid is not None or pod.namespace != owner:
            return None
        takers = {
            q.uid: q
            for q in self.carrying(res.name, claim)
            if q.namespace == owner and q.uid not in bound
        }
        takers.setdefault(pod.uid, pod)
        first = min(takers.values(), key=lambda q: ledger.persisted(q.use()))
        if first.uid == pod.uid:
            return True, None
        return False, first.key if first.key != pod.key else None


def breach_of(
    pod: PodView,
    reservations: Mapping[str, GPUReservation],
    nodes: Mapping[str, NodeFacts],
    ledgers: Ledgers,
    now: datetime,
    *,
    mirror_current: bool,
) -> Finding | None:
    """The rule for one in-scope pod (no side effects); None when it may stay."""
    place = reserved_classes(pod, nodes)
    ref = pod.reference
    if ref is None:
        breach = Breach.NO_REFERENCE if pod.declared else Breach.NO_ADMISSION
        return Finding(pod, breach, place=place)
    res = reservations.get(ref)
    if res is None:
        return (
            Finding(pod, Breach.UNKNOWN_RESERVATION, ref, place=place) if mirror_current else None
        )
    if eviction_reason(pod, res, now, ledgers.holds(res)) is not None:
        return None  # the evictor's: a booking cancelled or reassigned mid-window
    if pod.namespace != res.facts.owner:
        return Finding(pod, Breach.NOT_OWNER, ref, place=place)
    cls = res.facts.gpu_class
    if (cls not in place) if place else any(c != cls for c in pod.declared_classes):
        return Finding(pod, Breach.WRONG_CLASS, ref, place=place)
    if pod.gpus <= 0:
        return Finding(pod, Breach.NO_GPUS, ref, place=place)
    held, holder = ledgers.standing(pod, res)
    if held:
        return None
    if holder is not None:
        return Finding(pod, Breach.SHARED_CLAIM, ref, holder, place)
    if not ledger.open_for_claims(res.facts, now):
        return Finding(pod, Breach.NOT_OPEN, ref, place=place)
    return Finding(pod, Breach.OVER_BUDGET, ref, place=place)


def findings(
    pods: Iterable[PodView],
    reservations: Mapping[str, GPUReservation],
    scope: Scope,
    now: datetime,
    *,
    mirror_current: bool,
    nodes: Mapping[str, NodeFacts] | None = None,
    group: Group | None = None,
    times: Times | None = None,
    sharing: Sharing | None = None,
) -> list[Finding]:
    """Every pod of ``pods`` in breach, in a stable order (no side effects). ``nodes``:
    the reserved nodes by name; ``group`` (the live pods charged to a reservation) must
    cover every pod charged to a reservation one of ``pods`` references; by default it
    is built from ``pods`` themselves. ``sharing``: ``group``'s pods by claim (the
    cache's index), if there is one."""
    pods = list(pods)
    nodes = nodes or {}
    ledgers = Ledgers(group or group_from(pods), now, times or Times(), sharing)
    found = []
    for pod in pods:
        if not in_scope(pod, scope, nodes):
            continue
        got = breach_of(pod, reservations, nodes, ledgers, now, mirror_current=mirror_current)
        if got is not None:
            found.append(got)
    return sorted(found, key=lambda f: f.pod.key)


def _taint(cls: str) -> str:
    return f"{vocab.RESERVATION_TAINT_KEY}={cls}:{vocab.TAINT_EFFECT_NO_SCHEDULE}"


def message(finding: Finding) -> str:
    """The Warning Event text: what is wrong and what the user can do. It names only
    what the pod carries (its reference, its claim's holder in its own namespace) and
    the node's taint, never another user's booking (owner, times)."""
    pod = finding.pod
    ref = finding.reference
    if finding.place:
        node_classes = ", ".join(finding.place)
        where = (
            f"This pod is on node {pod.node}, which is reserved for GPU class {node_classes} "
            f"(taint {', '.join(_taint(c) for c in finding.place)})"
        )
    else:
        shown = pod.profile.gpu_class or next(
            (c for c in pod.declared_classes if c != ANY_CLASS), "<class>"
        )
        where = f"This pod tolerates the reservation taint {_taint(shown)}"
    why = {
        Breach.NO_ADMISSION: "it was never admitted under a reservation (it carries no "
        f"{vocab.BOOKING_REFERENCE}; pinning a pod to a node with spec.nodeName skips the "
        "scheduler, not the reservation)",
        Breach.NO_REFERENCE: "it was never admitted under a reservation (it carries no "
        f"{vocab.BOOKING_REFERENCE}: the admission webhook did not see it, or the "
        "toleration was written by hand)",
        Breach.UNKNOWN_RESERVATION: f"its {vocab.BOOKING_REFERENCE} names {ref}, which does "
        "not exist",
        Breach.NOT_OWNER: f"it refers to reservation {ref}, which namespace {pod.namespace} "
        "does not own",
        Breach.WRONG_CLASS: f"reservation {ref} it refers to is for another GPU class than "
        "the reserved nodes it is on or tolerates",
        Breach.NO_GPUS: f"it asks for no GPU (reservation {ref} admits GPU pods only)",
        Breach.SHARED_CLAIM: f"it carries the admission claim of pod {finding.holder}, "
        "which holds it (a copy of an admitted pod; one claim admits one pod)",
        Breach.NOT_OPEN: f"its reservation {ref} holds no GPUs for it and is not open now",
        Breach.OVER_BUDGET: f"its reservation {ref} holds no GPUs for it and has none left",
    }[finding.breach]
    return clip(
        f"{where}, but {why}. Reserved nodes run only pods admitted there, so the pod is "
        "being deleted. Create it again without that toleration, spec.nodeName or "
        "galends annotations: if your namespace holds an open booking for this GPU "
        "class with room, it is admitted under it; otherwise it waits for one."
    )
