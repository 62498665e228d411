"""What preemption, warnings, headroom and the forecast read: their settings, and the
caches seen through ``shared.policy.preemption``'s types.

- ``holders_of`` turns cached pods into ``Holder``s: live (not finished, not
  terminating), bound to a node, admitted (``galends/booking-reference``), with a GPU
  class; the live guarantee end and the chain come from the reservation cache exactly
  as the guarantee keeper computes them (``reconciler.admission.guarantees.live_end``).
- ``rooms_from`` reads the node inventory (``shared.policy.inventory``, issue 11) as
  ``Room``s; excluded nodes are simply absent, so pods there are never eligible.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Protocol

from reconciler.admission.guarantees import live_end
from reconciler.base.pods import PodView
from shared.appclient import PreemptionCandidate
from shared.model import GPUReservation, ReservationFacts, State, parse_reference
from shared.policy.preemption import Holder, Room
from shared.policy.windows import chain, kin, kin_key

# --- the inventory as rooms -----------------------------------------------------------


class NodeFigures(Protocol):
    """What is read of ``shared.policy.inventory.NodeCapacity``."""

    @property
    def name(self) -> str: ...
    @property
    def gpus(self) -> int: ...
    @property
    def free(self) -> int: ...


class ClassFigures(Protocol):
    """What is read of ``shared.policy.inventory.ClassCapacity``."""

    @property
    def nodes(self) -> Iterable[NodeFigures]: ...
    @property
    def total(self) -> int: ...
    @property
    def used(self) -> int: ...


class InventoryFigures(Protocol):
    """What is read of ``shared.policy.inventory.Inventory``."""

    @property
    def classes(self) -> Mapping[str, ClassFigures]: ...


def rooms_from(inventory: InventoryFigures) -> dict[str, Room]:
    """Every class the inventory knows, as a ``Room`` (unknown classes stay absent)."""
    rooms = {}
    for cls, cap in inventory.classes.items():
        nodes = list(cap.nodes)
        rooms[cls] = Room(
            total=cap.total,
            used=cap.used,
            node_gpus={n.name: n.gpus for n in nodes},
            node_free={n.name: n.free for n in nodes},
        )
    return rooms


# --- pods as holders ------------------------------------------------------------------


def guarantee_of(
    ref: str,
    reservations: Mapping[str, GPUReservation],
    facts: Iterable[ReservationFacts],
    now: datetime,
    *,
    use_group: bool,
) -> tuple[datetime | None, frozenset[str]]:
    """The live guarantee end of pods under ``ref`` and the names they claim.

    ``facts`` may be narrowed to the bookings that could chain (same owner, class and
    GPU count — ``windows.kin``); the chain rule itself is ``windows.chain``'s."""
    res = reservations.get(ref)
    pool = list(facts)
    end = live_end(res, pool, now, use_group=use_group)
    claims = {ref}
    if res is not None and res.facts.state is State.ACTIVE:
        claims.update(link.name for link in chain(res.facts, pool, now, use_group=use_group))
    return end, frozenset(claims)


def admitted_class(pod: PodView, reservations: Mapping[str, GPUReservation]) -> str | None:
    """The GPU class ``pod`` holds GPUs of: its booking's class when the reference
    resolves (the admission decided it; the ``gpu-class`` label is the user's to edit
    and must not make a pod immune to preemption), else its label."""
    res = reservations.get(pod.reference) if pod.reference else None
    return res.facts.gpu_class if res is not None else pod.profile.gpu_class


def holders_of(
    pods: Iterable[PodView],
    reservations: Mapping[str, GPUReservation],
    now: datetime,
    *,
    use_group: bool,
) -> list[Holder]:
    """Every live admitted GPU pod bound to a node, as a ``Holder`` of its booking's
    class (``admitted_class``; the guarantee is computed once per reservation, not per
    pod)."""
    pools = kin(r.facts for r in reservations.values())
    known: dict[str, tuple[datetime | None, frozenset[str]]] = {}
    found = []
    for pod in pods:
        ref = pod.reference
        rid = parse_reference(ref) if ref else None
        cls = admitted_class(pod, reservations)
        if ref is None or rid is None or cls is None or pod.node is None:
            continue
        if pod.finished or pod.deleting or not pod.uid or pod.gpus <= 0:
            continue
        if ref not in known:
            res = reservations.get(ref)
            facts = pools.get(kin_key(res.facts), []) if res else []
            known[ref] = guarantee_of(ref, reservations, facts, now, use_group=use_group)
        end, claims = known[ref]
        found.append(
            Holder(pod.uid, pod.namespace, pod.name, cls, pod.gpus, pod.node, rid, end, claims)
        )
    return found


def candidate_of(h: Holder) -> PreemptionCandidate:
    """The app's view of a holder it may choose as a victim."""
    return PreemptionCandidate(
        pod_uid=h.uid,
        namespace=h.namespace,
        pod_name=h.name,
        gpu_class=h.gpu_class,
        gpu_count=h.gpus,
        reservation_id=h.reservation_id,
    )
