"""Slim projections of pods: only what the reconciler's decisions read.

A pod is watched when it carries the ``gpu-class`` label or requests
``nvidia.com/gpu`` (a *GPU pod*), and also — whatever its GPUs — when it is bound or
pinned to a node (``spec.nodeName``: the backstop judges every pod on a reserved node,
and only the node cache knows which nodes are), declares a reservation toleration of
any class, or carries ``galends/*`` annotations. Anything else projects to ``None``
and is not cached. The projection keeps identity, phase, the matching profile, the
controller-owned annotations, the reservation tolerations it declares and whether it
is still gated — never the whole object. Loops that act on GPU pods only (the queue)
test ``PodView.gpu_pod``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from shared import vocab
from shared.clock import parse_utc
from shared.ledger import PodUse
from shared.model import claim_key
from shared.policy.affinity import NodeConstraint, constraint_of
from shared.policy.matching import MatchRules, PodProfile, annotations_of, profile
from shared.policy.tolerations import EQUAL, is_granted, tolerates_reservation, tolerations_of
from shared.policy.usage import run_times
from shared.policy.verdict import POD_SCHEDULED, Scheduled

_FINISHED = frozenset({"Succeeded", "Failed"})
#: ``spec.terminationGracePeriodSeconds`` when a pod does not say (the API's default).
DEFAULT_GRACE_S = 30


@dataclass(frozen=True)
class PodView:
    """One GPU pod as the reconciler needs it."""

    namespace: str
    name: str
    uid: str
    phase: str
    profile: PodProfile
    #: ``galends/*`` annotations only, as sorted pairs (hashable, comparable).
    notes: tuple[tuple[str, str], ...]
    #: Carries the toleration the system grants for the pod's own class (R3).
    tolerated: bool
    #: Carries any scheduling gate (the reconciler removes its own at admission).
    gates: tuple[str, ...]
    deleting: bool
    node: str | None
    resource_version: str
    #: The ``PodScheduled`` condition (the scheduler's verdict, guard 1a), if any.
    scheduled: Scheduled | None = None
    #: ``metadata.creationTimestamp`` as written (on-demand candidates go oldest first).
    created: str = ""
    #: ``nodeSelector`` and required node affinity (the on-demand node guards).
    constraint: NodeConstraint = field(default_factory=NodeConstraint)
    #: Tolerates the reservation taint of some class, in any form: granted, another
    #: class's, ``Exists``, or a blanket toleration (the backstop's input).
    declared: bool = False
    #: The classes those tolerations name, sorted; ``*`` for an ``Exists`` form (every
    #: class). Empty for almost every pod.
    declared_classes: tuple[str, ...] = ()
    #: The API copy of a static pod (``kubernetes.io/config.mirror``): the kubelet
    #: runs it from a file on the node, so deleting it stops nothing; a pod a user
    #: creates with the annotation is one no kubelet runs (it deletes orphan mirrors).
    mirror: bool = False
    #: Controlled by a DaemonSet (``ownerReferences`` with ``controller: true``).
    daemon: bool = False
    #: ``metadata.annotations`` is a map and ``spec.tolerations`` a list: the admission
    #: patch adds into them, or creates them (``queue.admission_patch``). True by
    #: default, the safe guess: a wrong "present" fails the patch, a wrong "absent"
    #: would replace what is there.
    annotation_map: bool = True
    toleration_list: bool = True
    #: When it began running and when it finished, as its status says ("" when not
    #: yet): the usage accounting's input (``shared.policy.usage.run_times``).
    ran: tuple[str, str] = ("", "")
    #: ``spec.terminationGracePeriodSeconds`` as a delete without options applies it:
    #: absent or malformed → the API's default 30, negative → 1.
    grace_s: int = DEFAULT_GRACE_S
    #: ``metadata.deletionTimestamp`` as written ("" while not being deleted): when the
    #: kubelet kills what is still running.
    deletion_at: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def stop_grace(self, cap_s: int) -> int:
        """The grace period to delete this pod with: its own, at most ``cap_s``."""
        return min(self.grace_s, cap_s)

    @property
    def finished(self) -> bool:
        """Succeeded or Failed: it holds no GPUs any more."""
        return self.phase in _FINISHED

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.notes)

    def note(self, key: str) -> str | None:
        """One ``galends/*`` annotation (a scan of the few pairs)."""
        return next((value for name, value in self.notes if name == key), None)

    # The hot properties below run for every pod on every pass of several loops: each
    # is computed once per view (the view is immutable; a change is a new view).

    @cached_property
    def reference(self) -> str | None:
        """``res-<id>`` the pod was admitted under, if any."""
        return self.note(vocab.BOOKING_REFERENCE)

    @cached_property
    def claim(self) -> str | None:
        """The ledger key of the claim id the pod carries (``model.claim_key``): what
        its hold keeps."""
        carried = self.note(vocab.ADMISSION_CLAIM)
        return claim_key(carried) if carried else None

    @property
    def admitted(self) -> bool:
        """Admitted under a reservation (reference stamped)."""
        return self.reference is not None

    @property
    def gpus(self) -> int:
        return self.profile.gpus.count

    @property
    def gpu_pod(self) -> bool:
        """Labelled with a GPU class or asking for GPUs (the pods admission is about)."""
        return wanted(self.profile)

    def use(self) -> PodUse:
        """The pod as a ledger entry of its reservation (made once per view: upkeep and
        the backstop hand every pod of a booking to ``ledger.rebuild`` on each event)."""
        return self._use

    @cached_property
    def _use(self) -> PodUse:
        return PodUse(
            self.name,
            self.uid,
            self.gpus,
            self.claim,
            self.admitted_at,
            self.namespace,
            self.created_at,
            self.resource_version,
        )

    @cached_property
    def admitted_at(self) -> datetime | None:
        """``galends/admitted-at`` as an instant (None when absent or unreadable)."""
        return _instant(self.note(vocab.ADMITTED_AT))

    @cached_property
    def created_at(self) -> datetime | None:
        """``metadata.creationTimestamp`` as an instant (None when absent or unreadable)."""
        return _instant(self.created)


def wanted(prof: PodProfile) -> bool:
    """R1 widened: a ``gpu-class`` label, or a GPU request."""
    return prof.gpu_class is not None or prof.gpus.count > 0


def declared_classes(tolerations: list[Any]) -> tuple[str, ...]:
    """The reservation classes ``tolerations`` tolerate: each ``Equal`` one's value,
    ``*`` for an ``Exists`` form (every class); sorted, unique."""
    found = set()
    for t in tolerations:
        if tolerates_reservation(t):
            value = t.get("value")
            exact = (t.get("operator") or EQUAL) == EQUAL
            found.add(value if exact and isinstance(value, str) else ANY_CLASS)
    return tuple(sorted(found))


#: ``declared_classes``' mark of a toleration of every reservation class.
ANY_CLASS = "*"


def project_pod(pod: dict[str, Any], rules: MatchRules) -> PodView | None:
    """The slim view of ``pod``; ``None`` for pods the reconciler does not watch."""
    meta, spec, status = (_part(pod, k) for k in ("metadata", "spec", "status"))
    prof = profile(pod, rules)
    notes = annotations_of(pod)
    own = sorted((k, v) for k, v in notes.items() if k.startswith(vocab.ANNOTATION_PREFIX))
    tolerations = tolerations_of(pod)
    classes = declared_classes(tolerations)
    node = spec.get("nodeName")
    if not (wanted(prof) or classes or own or (isinstance(node, str) and node)):
        return None
    gpu_class = prof.gpu_class
    listed = spec.get("schedulingGates")
    # Positional (a malformed entry reads as ""), so a gate's index is its index in
    # the pod: the admission patch removes gates by index.
    gates = tuple(
        str(g.get("name")) if isinstance(g, dict) else ""
        for g in (listed if isinstance(listed, list) else [])
    )
    return PodView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        phase=str(status.get("phase") or "Pending"),
        profile=prof,
        notes=tuple(own),
        tolerated=gpu_class is not None and any(is_granted(t, gpu_class) for t in tolerations),
        gates=gates,
        deleting=bool(meta.get("deletionTimestamp")),
        node=node if isinstance(node, str) and node else None,
        resource_version=str(meta.get("resourceVersion", "")),
        scheduled=scheduled_of(status),
        created=str(meta.get("creationTimestamp") or ""),
        constraint=constraint_of(spec),
        declared=bool(classes),
        declared_classes=classes,
        mirror=vocab.MIRROR_POD_ANNOTATION in notes,
        daemon=_controlled_by(meta, _DAEMON_SET),
        annotation_map=isinstance(meta.get("annotations"), Mapping),
        toleration_list=isinstance(spec.get("tolerations"), list),
        ran=run_times(status),
        grace_s=grace_of(spec.get("terminationGracePeriodSeconds")),
        deletion_at=str(meta.get("deletionTimestamp") or ""),
    )


def grace_of(value: Any) -> int:
    """A pod's termination grace as the API server applies it on a delete without
    options (facts: absent → the default 30, negative → 1)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return DEFAULT_GRACE_S
    return 1 if value < 0 else value


_DAEMON_SET = "DaemonSet"


def _part(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``obj[key]`` when it is an object, else empty (a malformed part reads as absent)."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _controlled_by(meta: Mapping[str, Any], kind: str) -> bool:
    """Whether the object's controlling owner reference is of ``kind``."""
    owners = meta.get("ownerReferences")
    if not isinstance(owners, list):
        return False
    return any(
        isinstance(o, Mapping) and o.get("controller") is True and o.get("kind") == kind
        for o in owners
    )


def _instant(value: Any) -> datetime | None:
    """A UTC timestamp field as an instant; None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_utc(value)
    except ValueError:
        return None


def scheduled_of(status: Mapping[str, Any]) -> Scheduled | None:
    """The ``PodScheduled`` condition of a pod status (None when absent or malformed)."""
    conditions = status.get("conditions")
    for cond in conditions if isinstance(conditions, list) else []:
        if isinstance(cond, Mapping) and cond.get("type") == POD_SCHEDULED:
            return Scheduled(
                str(cond.get("status") or ""),
                str(cond.get("reason") or ""),
                str(cond.get("message") or ""),
            )
    return None


def waits(pod: PodView) -> bool:
    """Whether the queue must route ``pod``: a GPU pod (``PodView.gpu_pod``) not
    admitted, alive, not tolerated by hand, and not bound to a node yet — a pod the
    scheduler already placed runs in
    the ordinary pool (its spec can no longer move it onto a reserved node), so admitting
    it would charge the booking for GPUs it does not take from it. A labelled pod that
    asks for no GPU is not routed either: a reservation admits GPU pods only (the
    webhook says so at create, and the backstop would evict it from a reserved node);
    one whose GPU count cannot be read is, so that it hears why it waits."""
    return bool(
        pod.gpu_pod
        and (pod.gpus > 0 or not pod.profile.gpus.readable)
        and not pod.admitted
        and not pod.finished
        and not pod.deleting
        and not pod.tolerated
        and pod.uid
        and pod.node is None
    )


def instant_of(pod: PodView, key: str) -> datetime | None:
    """``pod``'s annotation ``key`` as a UTC instant; None when absent or unreadable."""
    text = pod.annotations.get(key)
    try:
        return parse_utc(text) if text else None
    except ValueError:
        return None
