"""The backstop's loop on the leader (DESIGN §3, §10): ``Backstop``, an evicting pass
(``reconciler.admission.evicting``) over the rule of ``reconciler.backstop.rules``.

It runs on every change of a pod, a node or a reservation that can move a verdict
(``wire``), and every tick as a backstop. Before acting it re-reads the pod, its
reservation and its node (and the earlier holder of a shared claim) and decides again
on the fresh objects (a lagging cache must never evict: a reservation just reassigned
to the pod's namespace, a pod just re-linked, a taint just removed), under the
re-linker's lock. The eviction itself is ``reconciler.admission.evicting.remove``: a
Warning Event ``UnadmittedToleration`` whose message names exactly why — only what the
pod itself carries, never another user's booking — (not repeated after a restart),
then a delete with a uid precondition.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from reconciler.admission.evicting import EvictingPass, PassContext, hold_index, remove
from reconciler.backstop.rules import (
    Finding,
    Group,
    Ledgers,
    Scope,
    Sharing,
    Times,
    breach_of,
    findings,
    group_from,
    in_scope,
    message,
)
from reconciler.base.caches import Caches, ledger_only
from reconciler.base.component import Ground, Loop
from reconciler.base.pods import PodView
from reconciler.base.upkeep import charged_to
from shared import model, vocab
from shared.errors import KubeError, NotFound
from shared.logs import log
from shared.model import GPUReservation
from shared.policy.inventory import NodeFacts, project_node_facts
from shared.resources import GPU_RESERVATIONS, NODES

_log = logging.getLogger(__name__)
BACKSTOP_TASK = "admission-backstop"


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
        sharing: Sharing | None = None,
        times: Times | None = None,
        tick_s: float = 300.0,
    ) -> None:
        super().__init__(ctx, on_evicted=on_evicted)
        self._tick_s = tick_s
        self._ns = namespace
        self.scope = scope
        self._mirror_current = mirror_current
        self._nodes = nodes
        #: The cache's index of live pods by reservation (None: scan the pod cache),
        #: and of those by claim (None: built from ``group`` on each pass).
        self._group = group
        self._sharing = sharing if group is not None else None
        self._times = times or Times()

    def loops(self) -> list[Loop]:
        """The backstop's pass on changes, and every ``tick_s``."""
        return [(BACKSTOP_TASK, lambda: self.run(self._tick_s))]

    def _group_of(self, pods: Mapping[str, PodView]) -> Group:
        return self._group if self._group is not None else group_from(pods.values())

    def _due(
        self, chosen: Mapping[str, PodView], pods: Mapping[str, PodView], now: datetime
    ) -> list[Finding]:
        group = self._group_of(pods)
        if chosen is not pods:
            # A pass over touched pods: the pods sharing a claim with one of them are
            # decided too (a copy seen before its original is the copy once the
            # original shows), found in the cache's index by claim, or in one index of
            # each reservation's pods by claim made for the pass.
            claims: dict[str, dict[str, list[PodView]]] = {}
            sharing: dict[str, PodView] = {}
            for pod in chosen.values():
                if not (pod.claim and pod.reference):
                    continue
                if self._sharing is not None:
                    others = self._sharing(pod.reference, pod.claim)
                else:
                    index = claims.get(pod.reference)
                    if index is None:
                        index = claims[pod.reference] = by_claim(group(pod.reference))
                    others = index.get(pod.claim, [])
                for other in others:
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
            sharing=self._sharing,
        )

    async def _act(self, finding: Finding, now: datetime, taken: dict[str, int]) -> bool:
        text = message(finding)
        reason = vocab.REASON_UNADMITTED_TOLERATION
        pod, grace = finding.pod, self._grace_s
        if not await remove(self._gateway, self._emit, pod, reason, text, now, grace_s=grace):
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


def by_claim(pods: Iterable[PodView]) -> dict[str, list[PodView]]:
    """``pods`` carrying a claim, by that claim."""
    index: dict[str, list[PodView]] = {}
    for pod in pods:
        if pod.claim:
            index.setdefault(pod.claim, []).append(pod)
    return index


def judged_again(
    pods: Iterable[PodView], old: GPUReservation, new: GPUReservation
) -> list[PodView]:
    """The pods of ``pods`` (those charged to R) whose verdict a change of R's holds
    alone, ``old`` → ``new``, can move: every pod ``new`` does not bind by uid, and
    those whose uid's hold changed claim. A pod bound by uid to the same claim before
    and after keeps its verdict: R's rebuilt ledger holds it
    (``rules.bound_uids``), the evictor's share of it (``held_by``) is the same, and the
    rest of the rule reads R's facts and the pod, which did not change. When no bound
    uid is sure to be held (two holds share a claim: a malformed ledger), every pod is
    judged again. (A pod whose eviction failed is retried when it is next judged: on
    its own change, or the tick's pass over every pod.)"""
    before, after = hold_index(old).bindings, hold_index(new)
    held, now = after.bound, after.bindings
    if held is None:
        return list(pods)
    return [p for p in pods if p.uid not in held or before.get(p.uid) != now[p.uid]]


def wire(backstop: Backstop, caches: Caches) -> None:
    """Wake ``backstop`` for a pod in scope that changed (on a reserved node, or
    declaring a reservation toleration), for the pods under a reservation whose verdict
    a change of its ledger alone can move (``judged_again``), for every pod when a
    reservation's facts or a node's reservation taints changed."""

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
        elif old is not None and new is not None:  # the holds alone moved
            for pod in judged_again(caches.by_reference.pods(new.name), old, new):
                backstop.touch(pod.key)

    caches.pods.listeners.append(pod_changed)
    caches.nodes.listeners.append(node_changed)
    caches.reservations.listeners.append(reservation_changed)


def setup(ground: Ground, ctx: PassContext) -> Backstop:
    """The backstop of one leader term, on the evicting pass's context ``ctx``,
    subscribed to the pod, node and reservation caches."""
    settings = ground.settings
    ns = settings.common.namespace
    metrics = ground.metrics
    backstop = Backstop(
        ctx,
        ns,
        scope=Scope(ns, settings.exempt_namespaces),
        mirror_current=ground.fetched,
        on_evicted=lambda reason: metrics.unadmitted.labels(reason).inc(),
        nodes=lambda: ground.caches.nodes.items,
        group=ground.caches.by_reference.pods,
        sharing=ground.caches.by_reference.sharing,
        times=Times(float(settings.ledger_claim_ttl_s), settings.unseen_s),
        tick_s=float(settings.queue_interval_s),
    )
    wire(backstop, ground.caches)
    return backstop
