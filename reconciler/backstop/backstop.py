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

Before acting the shell re-reads the pod, its reservation and its node (and the
earlier holder of a shared claim) and decides again on the fresh objects (a lagging
cache must never evict: a reservation just reassigned to the pod's namespace, a pod
just re-linked, a taint just removed), under the re-linker's lock. The eviction itself
is ``reconciler.queue.evict.remove``: a Warning Event ``UnadmittedToleration`` whose message
names exactly why — only what the pod itself carries, never another user's booking —
(not repeated after a restart), then a delete with a uid precondition.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from reconciler.admission.evicting import EvictingPass, PassContext, eviction_reason, remove
from reconciler.base.caches import Caches, ledger_only
from reconciler.base.pods import ANY_CLASS, PodView
from reconciler.base.upkeep import charged_to
from shared import ledger, model, vocab
from shared.errors import KubeError, NotFound
from shared.logs import log
from shared.model import GPUReservation
from shared.policy.inventory import NodeFacts, project_node_facts
from shared.policy.wording import clip
from shared.resources import GPU_RESERVATIONS, NODES

_log = logging.getLogger(__name__)
BACKSTOP_TASK = "admission-backstop"


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


#: The live pods charged to a reservation (``reconciler.base.caches.ByReference.pods``).
Group = Callable[[str], list[PodView]]


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


class Ledgers:
    """R's ledger as upkeep would write it now, per reservation, memoised for one pass:
    ``shared.ledger.rebuild`` of R over its live pods (``group``)."""

    def __init__(self, group: Group, now: datetime, times: Times) -> None:
        self._group = group
        self._now = now
        self._times = times
        #: reservation → (held uids, claim → holder key, uids judged).
        self._memo: dict[str, tuple[set[str], dict[str, str], frozenset[str]]] = {}

    def standing(self, pod: PodView, res: GPUReservation) -> tuple[bool, str | None]:
        """(held, holder): whether ``pod`` holds a hold of R's rebuilt ledger, and when
        it does not, ``namespace/name`` of the live pod holding its claim id, if any."""
        got = self._memo.get(res.name)
        if got is None or pod.uid not in got[2]:
            members = self._group(res.name)
            if not any(m.uid == pod.uid for m in members):
                members = [*members, pod]
            t = self._times
            uses = [m.use() for m in members]
            wanted = ledger.rebuild(res, uses, self._now, t.ttl_s, t.unseen_s)
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
    if eviction_reason(pod, res, now) is not None:
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
) -> list[Finding]:
    """Every pod of ``pods`` in breach, in a stable order (no side effects). ``nodes``:
    the reserved nodes by name; ``group`` (the live pods charged to a reservation) must
    cover every pod charged to a reservation one of ``pods`` references; by default it
    is built from ``pods`` themselves."""
    pods = list(pods)
    nodes = nodes or {}
    ledgers = Ledgers(group or group_from(pods), now, times or Times())
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


class Backstop(EvictingPass[Finding]):
    """Runs the rule over the leader's caches; evicts what it finds."""

    def __init__(
        self,
        ctx: PassContext,
        namespace: str,
        *,
        scope: Scope,
        mirror_current: Callable[[], bool],
        on_evicted: Callable[[str], None] | None = None,
        nodes: Callable[[], Mapping[str, NodeFacts]] = dict,
        group: Group | None = None,
        times: Times | None = None,
    ) -> None:
        super().__init__(ctx, on_evicted=on_evicted)
        self._ns = namespace
        self.scope = scope
        self._mirror_current = mirror_current
        self._nodes = nodes
        #: The cache's index of live pods by reservation (None: scan the pod cache).
        self._group = group
        self._times = times or Times()

    def _group_of(self, pods: Mapping[str, PodView]) -> Group:
        return self._group if self._group is not None else group_from(pods.values())

    def _due(
        self, chosen: Mapping[str, PodView], pods: Mapping[str, PodView], now: datetime
    ) -> list[Finding]:
        group = self._group_of(pods)
        if chosen is not pods:
            # A pass over touched pods: the pods sharing a claim with one of them are
            # decided too (a copy seen before its original is the copy once the
            # original shows).
            sharing: dict[str, PodView] = {}
            for pod in chosen.values():
                if pod.claim and pod.reference:
                    for other in group(pod.reference):
                        if other.claim == pod.claim:
                            sharing[other.key] = other
            chosen = {**chosen, **sharing}
        return findings(
            chosen.values(),
            self._reservations(),
            self.scope,
            now,
            mirror_current=self._mirror_current(),
            nodes=self._nodes(),
            group=group,
            times=self._times,
        )

    async def _act(self, finding: Finding, now: datetime, taken: dict[str, int]) -> bool:
        text = message(finding)
        reason = vocab.REASON_UNADMITTED_TOLERATION
        if not await remove(self._gateway, self._emit, finding.pod, reason, text, now):
            return False
        self._count(finding.breach)
        log(
            _log,
            logging.WARNING,
            "backstop.evicted",
            pod=finding.pod.key,
            breach=str(finding.breach),
            reservation=finding.reference,
            holder=finding.holder,
            node=finding.pod.node,
        )
        return True

    async def _still_due(self, finding: Finding, now: datetime) -> Finding | None:
        """The finding decided again on fresh reads of the pod, its node, its reservation
        and the claim's holder; None when it no longer holds or a read failed (an
        unreadable object is unknown state, never a reason to evict)."""
        try:
            pod = await self._reread(finding.pod.namespace, finding.pod.name)
            if pod is None or pod.uid != finding.pod.uid:
                return None
            nodes = await self._read_node(pod.node)
            if not in_scope(pod, self.scope, nodes):
                return None
            reservations = await self._read_reservation(pod.reference)
            swap: dict[str, PodView | None] = {pod.uid: pod}
            if finding.holder is not None:
                ns, _, name = finding.holder.partition("/")
                first = await self._reread(ns, name)
                cached = self._pods().get(finding.holder)
                if cached is not None:
                    swap[cached.uid] = first
                if first is not None:
                    swap[first.uid] = first
        except (KubeError, ValueError) as exc:
            log(_log, logging.WARNING, "backstop.read_failed", pod=finding.pod.key, error=str(exc))
            return None
        group = self._group_of(self._pods())

        def fresh_group(name: str) -> list[PodView]:
            members = [m for m in group(name) if m.uid not in swap]
            return members + [p for p in swap.values() if p is not None and charged_to(p) == name]

        ledgers = Ledgers(fresh_group, now, self._times)
        current = self._mirror_current()
        fresh = breach_of(pod, reservations, nodes, ledgers, now, mirror_current=current)
        return fresh if fresh is not None and fresh.breach == finding.breach else None

    async def _read_reservation(self, ref: str | None) -> dict[str, GPUReservation]:
        """``{ref: reservation}``, or empty when it does not exist; ``ValueError`` when
        the object exists but is malformed."""
        if ref is None or model.parse_reference(ref) is None:
            return {}
        try:
            raw = await self._gateway.get(GPU_RESERVATIONS, ref, self._ns)
        except NotFound:
            return {}
        return {ref: model.from_object(raw)}

    async def _read_node(self, name: str | None) -> dict[str, NodeFacts]:
        """``{name: facts}`` when the node exists and carries a reservation taint. A
        LIST by ``metadata.name`` (a consistent read): the reconciler may list and
        watch nodes, not get them."""
        if name is None:
            return {}
        found = await self._gateway.list_all(NODES, field_selector=f"metadata.name={name}")
        for raw in found.items:
            facts = project_node_facts(raw)
            if facts is not None and facts.name == name:
                return {name: facts}
        return {}


def wire(backstop: Backstop, caches: Caches) -> None:
    """Wake ``backstop`` for a pod in scope that changed (on a reserved node, or
    declaring a reservation toleration), for the pods under a reservation whose ledger
    moved, for every pod when a reservation's facts or a node's reservation taints
    changed."""

    def pod_changed(key: str, old: PodView | None, new: PodView | None) -> None:
        if new is None:
            return
        if new.declared or (new.node is not None and new.node in caches.nodes.items):
            backstop.touch(key)

    def node_changed(key: str, old: NodeFacts | None, new: NodeFacts | None) -> None:
        before = old.classes if old is not None else ()
        after = new.classes if new is not None else ()
        if before != after:
            backstop.touch()

    def reservation_changed(
        key: str, old: GPUReservation | None, new: GPUReservation | None
    ) -> None:
        if not ledger_only(old, new):
            backstop.touch()
        elif new is not None:  # the holds moved: the pods counted in it are judged again
            for pod in caches.by_reference.pods(new.name):
                backstop.touch(pod.key)

    caches.pods.listeners.append(pod_changed)
    caches.nodes.listeners.append(node_changed)
    caches.reservations.listeners.append(reservation_changed)
