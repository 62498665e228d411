"""The proof-of-admission backstop (DESIGN §3): evict a GPU pod that tolerates the
reservation taint without having been admitted.

Tolerations cannot be removed from a live pod, so eviction is the only remedy for a
pod that declared its own way onto reserved nodes — created while every webhook
replica was down (``failurePolicy: Ignore``), or carrying a copied admission. The rule
is narrow on purpose, so that it never hits a legitimately admitted pod, including
after every ledger status was wiped (upkeep rebuilds those from the pods' own
references; the rule never reads the holds). A live pod that tolerates the
reservation taint of its class (of any class when it has none) is in *breach* when

- ``no_reference``: it carries no ``galends/booking-reference``;
- ``unknown_reservation``: the reference names no GPUReservation, once a full pull
  from the app has completed (the mirror creates every reservation a pod references
  that the app still knows; before a good pull nothing is judged unknown);
- ``not_owner``: its namespace is not the owner of the referenced reservation, unless
  the evictor already handles the pod (a booking reassigned or cancelled while its
  window is open: ``ReservationReassigned``/``ReservationCancelled``);
- ``shared_claim``: another live pod created strictly earlier carries the same
  ``galends/admission-claim`` (a copy of an admitted pod; one claim admits one pod;
  two pods created in the same second are left alone — neither can be told the copy).

Out of scope: pods in the controller's own namespace (only the operator and the
controller's service accounts create pods there, and the webhook never sees it) and
DaemonSet-controlled pods in the exempt namespaces (``UNADMITTED_EXEMPT_NAMESPACES``,
the chart passes the webhook's excluded namespaces): device plugins and monitoring
agents tolerate every taint by design.

Before acting the shell re-reads the pod, the reservation and the earlier holder of
the claim and decides again on the fresh objects (a lagging cache must never evict:
a reservation just reassigned to the pod's namespace, a pod just re-linked), under the
re-linker's lock. The eviction itself is ``reconciler.evict.remove``: a Warning Event
``UnadmittedToleration`` (not repeated after a restart), then a delete with a uid
precondition.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from reconciler.caches import Caches, ledger_only
from reconciler.evict import EvictingPass, PassContext, eviction_reason, remove
from reconciler.pods import PodView
from shared import model, vocab
from shared.errors import KubeError, NotFound
from shared.logs import log
from shared.model import GPUReservation
from shared.policy.wording import clip
from shared.resources import GPU_RESERVATIONS

_log = logging.getLogger(__name__)
BACKSTOP_TASK = "admission-backstop"


class Breach(StrEnum):
    """Why a tolerating pod is not admitted (the metric's ``reason`` label)."""

    NO_REFERENCE = "no_reference"
    UNKNOWN_RESERVATION = "unknown_reservation"
    NOT_OWNER = "not_owner"
    SHARED_CLAIM = "shared_claim"


@dataclass(frozen=True)
class Scope:
    """Whose pods the rule leaves alone."""

    #: The controller namespace (POD_NAMESPACE): every pod there is exempt.
    controller_namespace: str
    #: UNADMITTED_EXEMPT_NAMESPACES: DaemonSet-controlled pods there are exempt.
    exempt_namespaces: frozenset[str] = field(default_factory=frozenset)

    def exempt(self, pod: PodView) -> bool:
        if pod.namespace == self.controller_namespace:
            return True
        return pod.daemon and pod.namespace in self.exempt_namespaces


@dataclass(frozen=True)
class Finding:
    """One pod in breach of the rule."""

    pod: PodView
    breach: Breach
    #: The referenced reservation's object name, if the pod carries one.
    reference: str | None = None
    #: ``namespace/name`` of the earlier pod holding the same claim (``shared_claim``).
    holder: str | None = None


def in_scope(pod: PodView, scope: Scope) -> bool:
    """A live pod declaring the reservation toleration, and not exempt."""
    live = pod.uid and not pod.finished and not pod.deleting
    return bool(live) and pod.declared and not scope.exempt(pod)


def earliest_holders(pods: Iterable[PodView]) -> dict[str, list[PodView]]:
    """Live pods by the claim id they carry, earliest created first (no side effects)."""
    by_claim: dict[str, list[PodView]] = {}
    for pod in pods:
        if pod.claim and pod.uid and not pod.finished and not pod.deleting:
            by_claim.setdefault(pod.claim, []).append(pod)
    for group in by_claim.values():
        group.sort(key=lambda p: (p.created_at is None, p.created_at or datetime.min))
    return by_claim


def earlier_holder(pod: PodView, holders: Mapping[str, list[PodView]]) -> PodView | None:
    """A live pod created strictly before ``pod`` that carries its claim id, if any.

    Creation times have one-second resolution: a pod created in the same second as the
    first holder (or with no readable creation time) is never called the copy."""
    created = pod.created_at
    if not pod.claim or created is None:
        return None
    for other in holders.get(pod.claim, []):
        at = other.created_at
        if other.uid != pod.uid and at is not None and at < created:
            return other
    return None


def breach_of(
    pod: PodView,
    reservations: Mapping[str, GPUReservation],
    holders: Mapping[str, list[PodView]],
    now: datetime,
    *,
    mirror_current: bool,
) -> Finding | None:
    """The rule for one in-scope pod (no side effects); None when it may stay."""
    ref = pod.reference
    if ref is None:
        return Finding(pod, Breach.NO_REFERENCE)
    res = reservations.get(ref)
    if res is None:
        return Finding(pod, Breach.UNKNOWN_RESERVATION, ref) if mirror_current else None
    if pod.namespace != res.facts.owner and eviction_reason(pod, res, now) is None:
        return Finding(pod, Breach.NOT_OWNER, ref)
    first = earlier_holder(pod, holders)
    if first is not None:
        return Finding(pod, Breach.SHARED_CLAIM, ref, first.key)
    return None


def findings(
    pods: Iterable[PodView],
    reservations: Mapping[str, GPUReservation],
    scope: Scope,
    now: datetime,
    *,
    mirror_current: bool,
    holders: Mapping[str, list[PodView]] | None = None,
) -> list[Finding]:
    """Every pod of ``pods`` in breach, in a stable order (no side effects). ``holders``
    (``earliest_holders``) must cover every live pod carrying a claim one of ``pods``
    carries; by default it is built from ``pods`` themselves."""
    pods = list(pods)
    if holders is None:
        holders = earliest_holders(pods)
    found = []
    for pod in pods:
        if not in_scope(pod, scope):
            continue
        got = breach_of(pod, reservations, holders, now, mirror_current=mirror_current)
        if got is not None:
            found.append(got)
    return sorted(found, key=lambda f: f.pod.key)


def message(finding: Finding) -> str:
    """The Warning Event text: what is wrong and what the user can do."""
    pod = finding.pod
    gpu_class = pod.profile.gpu_class
    taint = (
        f"{vocab.RESERVATION_TAINT_KEY}={gpu_class or '<class>'}:{vocab.TAINT_EFFECT_NO_SCHEDULE}"
    )
    why = {
        Breach.NO_REFERENCE: "it was never admitted under a reservation (it carries no "
        f"{vocab.BOOKING_REFERENCE}: the admission webhook did not see it, or the "
        "toleration was written by hand)",
        Breach.UNKNOWN_RESERVATION: f"its {vocab.BOOKING_REFERENCE} names "
        f"{finding.reference}, which does not exist",
        Breach.NOT_OWNER: f"it refers to reservation {finding.reference}, which namespace "
        f"{pod.namespace} does not own",
        Breach.SHARED_CLAIM: f"it carries the admission claim of pod {finding.holder}, "
        "created before it (a copy of an admitted pod; one claim admits one pod)",
    }[finding.breach]
    return clip(
        f"This pod tolerates the reservation taint {taint}, but {why}. Reservation "
        "tolerations are granted, not declared, so the pod is being deleted. Create it "
        "again without that toleration and without galends annotations: if your "
        "namespace holds an open booking for this GPU class, it is admitted under it; "
        "otherwise it waits for one."
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
    ) -> None:
        super().__init__(ctx, on_evicted=on_evicted)
        self._ns = namespace
        self.scope = scope
        self._mirror_current = mirror_current

    def _due(
        self, chosen: Mapping[str, PodView], pods: Mapping[str, PodView], now: datetime
    ) -> list[Finding]:
        current = self._mirror_current()
        holders = None
        if chosen is not pods:
            # A pass over touched pods: the pods sharing a claim with one of them are
            # decided too (a copy seen before its original is the copy once the
            # original shows), and the claims' holders come from the whole cache.
            claims = {p.claim for p in chosen.values() if p.claim}
            sharing = {k: p for k, p in pods.items() if p.claim in claims} if claims else {}
            chosen = {**chosen, **sharing}
            holders = earliest_holders(sharing.values())
        return findings(
            chosen.values(),
            self._reservations(),
            self.scope,
            now,
            mirror_current=current,
            holders=holders,
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
        )
        return True

    async def _still_due(self, finding: Finding, now: datetime) -> Finding | None:
        """The finding decided again on fresh reads of the pod, its reservation and the
        claim's earlier holder; None when it no longer holds or a read failed (an
        unreadable reservation object is unknown state, never a reason to evict)."""
        try:
            pod = await self._reread(finding.pod.namespace, finding.pod.name)
            if pod is None or pod.uid != finding.pod.uid or not in_scope(pod, self.scope):
                return None
            reservations = await self._read_reservation(pod.reference)
            holders: dict[str, list[PodView]] = {}
            if finding.holder is not None and pod.claim:
                ns, _, name = finding.holder.partition("/")
                first = await self._reread(ns, name)
                holders[pod.claim] = [pod] if first is None else [first, pod]
        except (KubeError, ValueError) as exc:
            log(_log, logging.WARNING, "backstop.read_failed", pod=finding.pod.key, error=str(exc))
            return None
        current = self._mirror_current()
        fresh = breach_of(pod, reservations, holders, now, mirror_current=current)
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


def wire(backstop: Backstop, caches: Caches) -> None:
    """Wake ``backstop`` when a pod declaring the toleration or a reservation's facts
    change."""

    def pod_changed(key: str, old: PodView | None, new: PodView | None) -> None:
        if new is not None and new.declared:
            backstop.touch(key)

    def reservation_changed(
        key: str, old: GPUReservation | None, new: GPUReservation | None
    ) -> None:
        if not ledger_only(old, new):  # the rule never reads the holds
            backstop.touch()

    caches.pods.listeners.append(pod_changed)
    caches.reservations.listeners.append(reservation_changed)
