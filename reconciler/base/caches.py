"""The leader's watched caches (pods, nodes, GPUReservations) and what reacts to them.

Pods are watched cluster-wide and projected with ``reconciler.base.pods.project_pod`` (GPU
pods, and slim views of the pods the backstop judges: bound or pinned to a node,
declaring a reservation toleration, or carrying ``galends/*`` annotations); nodes
tainted for the reservation system with ``shared.policy.inventory.project_node_facts``
(other nodes are not kept);
GPUReservations in the controller namespace as ``shared.model.GPUReservation`` (a
malformed object is skipped). A pod change that can alter a ledger — a pod under a
reservation appearing, finishing, leaving, or changing its claim — touches that
reservation's upkeep at once; ``ByReference`` indexes the live admitted pods by that
reservation for upkeep, ``WaitingByOwner`` the pods the reserved queue routes by their
owner. ``Caches.inventory()`` is the node inventory of these
caches (``reconciler.base.inventory``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from reconciler.base.inventory import InventoryCache
from reconciler.base.kube import KubeWatcher
from reconciler.base.pods import PodView, project_pod, waits
from reconciler.base.settings import ReconcilerSettings
from reconciler.base.upkeep import Keeper, charged_to
from shared import model
from shared.clock import Clock
from shared.ledger import LedgerGateway, PodUse
from shared.logs import log
from shared.policy.inventory import Inventory, NodeFacts, project_node_facts
from shared.policy.usage import STATUS_KEY as USAGE_KEY
from shared.resources import GPU_RESERVATIONS, NODES, PODS
from shared.watch import Watched, WatchGateway

_log = logging.getLogger(__name__)
PODS_TASK = "watch-pods"
NODES_TASK = "watch-nodes"
RESERVATIONS_TASK = "watch-reservations"
UPKEEP_TASK = "ledger-upkeep"
#: Seconds a watch may keep failing without a good LIST before health turns 503: long
#: enough for an API server restart, short enough that a refused LIST (RBAC) shows.
STALL_S = 120.0


def project_reservation(obj: dict[str, Any]) -> model.GPUReservation | None:
    """The object as a ``GPUReservation``; ``None`` (skipped, logged) when malformed."""
    try:
        return model.from_object(obj)
    except ValueError as exc:
        name = (obj.get("metadata") or {}).get("name")
        log(_log, logging.WARNING, "watch.malformed", reservation=name, error=str(exc))
        return None


def same_reservation(old: model.GPUReservation, new: model.GPUReservation) -> bool:
    """Whether a reservation's change means nothing to the leader's loops (no side
    effects): facts, holds and the other status facts equal, only the resourceVersion
    moved — a status write that refreshed the derived ``phase``/``usedGpus`` alone.
    Every loop re-decides on each reservation event (a full pass), so a burst of such
    writes (the startup sync's status of 2,000 new mirrors) would otherwise cost a
    burst of passes that all decide the same."""
    return (old.facts, old.holds, _facts_of(old)) == (new.facts, new.holds, _facts_of(new))


def ledger_only(old: model.GPUReservation | None, new: model.GPUReservation | None) -> bool:
    """Whether a reservation change moved its ledger holds alone (facts and the other
    status facts equal): a claim, a binding, an announcement mark. The loops that decide
    on facts only — guarantees, evictions, the backstop, no-shows — need no pass for it:
    at a window opening the 50 claims, 50 marks and 50 bindings each made every one of
    them pass over every pod."""
    if old is None or new is None:
        return False
    return (old.facts, _facts_of(old)) == (new.facts, _facts_of(new))


def _facts_of(res: model.GPUReservation) -> dict[str, Any]:
    """The status facts the loops decide on: every field but the usage record
    (written by the usage keeper alone, read by no loop)."""
    extra = res.status_extra
    return {k: v for k, v in extra.items() if k != USAGE_KEY} if USAGE_KEY in extra else extra


def touched_reservations(old: PodView | None, new: PodView | None) -> set[str]:
    """Reservations whose ledger a pod change may alter."""
    names = set()
    for view in (old, new):
        if view is not None and view.reference is not None:
            names.add(view.reference)
    if (
        old is not None
        and new is not None
        and (old.finished, old.claim, old.uid)
        == (
            new.finished,
            new.claim,
            new.uid,
        )
    ):
        return set()
    return names


class ByReference:
    """The pod cache's live admitted pods by the reservation they count in
    (``upkeep.charged_to``), kept by a listener on every change the cache tells —
    watch events and a relist's differences alike — so upkeep reads one reservation's
    pods without scanning the cache. A pod keeps its place while it stays under the
    same reservation (the order holds are rebuilt in). Within a reservation the pods
    are indexed by the claim they carry too (``sharing``): the pods that may take one
    hold, found without a scan of the reservation's pods."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[str, PodView]] = {}
        #: reservation → claim key → pod key → pod.
        self._claims: dict[str, dict[str, dict[str, PodView]]] = {}

    def changed(self, key: str, old: PodView | None, new: PodView | None) -> None:
        """The cache's listener: ``key`` went from ``old`` to ``new`` (None: absent)."""
        ref = charged_to(new) if new is not None else None
        was = charged_to(old) if old is not None else None
        if was is not None and was != ref:
            group = self._groups.get(was, {})
            group.pop(key, None)
            if not group:
                self._groups.pop(was, None)
        if was is not None and old is not None and old.claim:
            self._unclaim(was, old.claim, key)
        if new is not None and ref is not None:
            self._groups.setdefault(ref, {})[key] = new
            if new.claim:
                self._claims.setdefault(ref, {}).setdefault(new.claim, {})[key] = new

    def _unclaim(self, ref: str, claim: str, key: str) -> None:
        claims = self._claims.get(ref, {})
        holders = claims.get(claim, {})
        holders.pop(key, None)
        if not holders:
            claims.pop(claim, None)
            if not claims:
                self._claims.pop(ref, None)

    def sharing(self, name: str, claim: str) -> list[PodView]:
        """The live pods counted in reservation ``name`` that carry ``claim`` (a claim
        key, ``PodView.claim``)."""
        return list(self._claims.get(name, {}).get(claim, {}).values())

    def uses(self, name: str) -> list[PodUse]:
        """What those pods use (``shared.ledger.rebuild``'s input)."""
        return [pod.use() for pod in self._groups.get(name, {}).values()]

    def pods(self, name: str) -> list[PodView]:
        """The live pods counted in reservation ``name``."""
        return list(self._groups.get(name, {}).values())

    def names(self) -> set[str]:
        """The reservations some live pod counts in."""
        return set(self._groups)

    def clear(self) -> None:
        """Forget everything (the cache was emptied without telling its listeners)."""
        self._groups.clear()
        self._claims.clear()


class WaitingByOwner:
    """The pod cache's pods the reserved queue routes (``pods.waits``) by their owner
    (the namespace whose bookings they can use), kept by a listener as ``ByReference``
    is: a change of one owner's ledger re-routes that owner's waiting pods without a
    scan of the cache, and the queue depth is counted without routing anyone."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[str, PodView]] = {}

    def changed(self, key: str, old: PodView | None, new: PodView | None) -> None:
        """The cache's listener: ``key`` went from ``old`` to ``new`` (None: absent)."""
        if old is not None:
            group = self._groups.get(old.profile.owner, {})
            group.pop(key, None)
            if not group:
                self._groups.pop(old.profile.owner, None)
        if new is not None and waits(new):
            self._groups.setdefault(new.profile.owner, {})[key] = new

    def of(self, owner: str) -> list[PodView]:
        """``owner``'s waiting pods."""
        return list(self._groups.get(owner, {}).values())

    def count(self) -> int:
        """How many pods wait, all owners together."""
        return sum(len(group) for group in self._groups.values())

    def clear(self) -> None:
        """Forget everything (the cache was emptied without telling its listeners)."""
        self._groups.clear()


class Caches:
    """The three caches and the ledger keeper of one leader term."""

    def __init__(
        self,
        gateway: KubeWatcher,
        settings: ReconcilerSettings,
        clock: Clock,
        class_labels: Callable[[], Iterable[str] | None] = lambda: None,
        on_unseen: Callable[[int], None] | None = None,
    ) -> None:
        watch_gw: WatchGateway = gateway
        ledger_gw: LedgerGateway = gateway
        resync = settings.watch_resync_s
        rules = settings.rules
        ns = settings.common.namespace
        self.pods: Watched[PodView] = Watched(
            watch_gw, PODS, lambda o: project_pod(o, rules), clock=clock, resync_s=resync
        )
        self.nodes: Watched[NodeFacts] = Watched(
            watch_gw, NODES, project_node_facts, clock=clock, resync_s=resync
        )
        self.reservations: Watched[model.GPUReservation] = Watched(
            watch_gw,
            GPU_RESERVATIONS,
            project_reservation,
            clock=clock,
            namespace=ns,
            same=same_reservation,
            resync_s=resync,
        )
        #: ``by_name``'s mapping, with the reservation cache's items and change count
        #: it was made from.
        self._named: tuple[object, int, dict[str, model.GPUReservation]] | None = None
        #: Listens first, so every other listener reads it already updated.
        self.by_reference = ByReference()
        self.pods.listeners.append(self.by_reference.changed)
        self.waiting = WaitingByOwner()
        self.pods.listeners.append(self.waiting.changed)
        self.keeper = Keeper(
            ledger_gw,
            ns,
            clock,
            settings.ledger_claim_ttl_s,
            self.by_reference.uses,
            self.by_name,
            self.ready,
            unseen_s=settings.unseen_s,
            on_unseen=on_unseen,
        )
        self._tick_s = float(settings.queue_interval_s)
        self.pods.listeners.append(self._pod_changed)
        self.reservations.listeners.append(self._reservation_changed)
        self._inventory = InventoryCache(self.nodes, self.pods, class_labels)

    def inventory(self) -> Inventory | None:
        """The node inventory now (memoised; see ``reconciler.base.inventory``); ``None``
        until the node and pod caches hold a full LIST — capacity is then unknown."""
        return self._inventory.current()

    def by_name(self) -> Mapping[str, model.GPUReservation]:
        """Cached reservations by object name: one mapping, made again only once the
        reservation cache has changed (many loops ask on every pass). Read-only: every
        caller shares it."""
        watched, known = self.reservations, self._named
        if known is None or known[0] is not watched.items or known[1] != watched.changes:
            named = {r.name: r for r in watched.items.values()}
            self._named = known = (watched.items, watched.changes, named)
        return known[2]

    def live_references(self) -> set[str] | None:
        """The GPUReservation names live (unfinished) pods reference, read from the pod
        cache — which keeps every pod carrying a ``galends/*`` annotation, labelled or
        not; ``None`` while the cache holds no full LIST or its watch keeps failing."""
        if not self.pods.synced.is_set() or self.pods.failing_since is not None:
            return None
        return {n for n in self.by_reference.names() if model.parse_reference(n) is not None}

    def ready(self) -> bool:
        """Both the pod and the reservation caches hold a full LIST."""
        return self.pods.synced.is_set() and self.reservations.synced.is_set()

    def reset(self) -> None:
        """Forget everything (the loops are stopped): a later leader term must act on
        its own LIST, never on what the caches held when the previous term ended —
        upkeep would rebuild fresh ledgers from pods long gone or not yet seen."""
        for cache in (self.pods, self.nodes, self.reservations):
            cache.items = {}
            cache.synced.clear()
            cache.failing_since = None
        self.by_reference.clear()
        self.waiting.clear()
        self._inventory.invalidate()

    def stalled(self, grace_s: float) -> list[str]:
        """Resources whose LIST/WATCH has kept failing for ``grace_s`` or more without a
        good LIST (``/health`` turns 503 naming them)."""
        caches = (self.pods, self.nodes, self.reservations)
        return sorted(c.res.plural for c in caches if c.failing_for() >= grace_s)

    def loops(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """The leader's loops these caches need."""
        return [
            (PODS_TASK, self.pods.run),
            (NODES_TASK, self.nodes.run),
            (RESERVATIONS_TASK, self.reservations.run),
            (UPKEEP_TASK, lambda: self.keeper.run(self._tick_s)),
        ]

    def _reservation_changed(
        self, key: str, old: model.GPUReservation | None, new: model.GPUReservation | None
    ) -> None:
        """A ledger changed (a claim, a binding, another replica's write): upkeep looks
        again. A pass decided on a cached ledger older than a pod change it saw (e.g. a
        pod deleted while its hold was being bound) found nothing to do; the newer
        ledger must be judged too, not left to the tick."""
        if new is not None and (old is None or old.holds != new.holds):
            self.keeper.touch(new.name)

    def _pod_changed(self, key: str, old: PodView | None, new: PodView | None) -> None:
        for name in touched_reservations(old, new):
            self.keeper.touch(name)
