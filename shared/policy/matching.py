"""Which reservations a pod may use (R1, R2, R5, R6).

Terms:
- *owner*: the pod's namespace; a reservation's ``owner`` username must equal it.
- *class*: the pod's ``gpu-class`` label value; the reservation's class label must
  equal it. An empty label is no label.
- *group* (only when ``REQUIRED_GROUP_LABEL`` is set): the pod's value of that label,
  else ``DEFAULT_USAGE_GROUP``; the reservation's group must equal it, so a pod or a
  reservation without a group never matches.
- *usage group* (JIT): the group above when the label feature is on, else the
  ``galends/usage-group`` annotation, else ``DEFAULT_USAGE_GROUP``.

Every function here is pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from shared import vocab
from shared.model import Kind, ReservationFacts, State
from shared.policy import MAP
from shared.policy.gpus import DEFAULT_GPU_RESOURCES, GpuRequest, GpuResources, pod_gpus


@dataclass(frozen=True)
class MatchRules:
    """The deployment's matching settings (the seed's variables of the same names)."""

    #: REQUIRED_GROUP_LABEL: pod label naming its usage group; None disables groups.
    required_group_label: str | None = None
    #: DEFAULT_USAGE_GROUP: group assumed for a pod naming none.
    default_usage_group: str | None = None
    #: ONDEMAND_HORIZON_MINUTES: a booking opening this soon is waited for.
    horizon: timedelta = timedelta(minutes=30)
    #: ONDEMAND_LEASE_ENABLED.
    leases_enabled: bool = True
    #: BEST_EFFORT_ENABLED.
    best_effort_enabled: bool = False
    #: DEFAULT_MINIMUM_RUNTIME_SECONDS (0: no fallback).
    default_minimum_runtime_s: int = 0
    #: GPU_RESOURCE_WEIGHTS / GPU_RESOURCE_PREFIXES: which resources are GPUs.
    gpu_resources: GpuResources = DEFAULT_GPU_RESOURCES

    @property
    def use_group(self) -> bool:
        """Whether the group axis is on."""
        return self.required_group_label is not None


#: ``PodProfile.usage_group_source`` values.
GROUP_FROM_LABEL = "label"
GROUP_FROM_ANNOTATION = "annotation"
GROUP_FROM_DEFAULT = "default"


class Miss(StrEnum):
    """Why a reservation does not match a pod, in the order the checks run."""

    UNREADABLE_GPUS = "unreadable_gpus"
    NO_CLASS_LABEL = "no_class_label"
    NO_GROUP = "no_group"
    NOT_A_BOOKING = "not_a_booking"
    CANCELLED = "cancelled"
    OTHER_OWNER = "other_owner"
    OTHER_CLASS = "other_class"
    OTHER_GROUP = "other_group"
    ENDED = "ended"
    NO_SHOW = "no_show"


@dataclass(frozen=True, slots=True)
class PodProfile:
    """What matching needs to know about a pod."""

    owner: str
    gpu_class: str | None
    group: str | None
    gpus: GpuRequest
    usage_group: str | None = None
    minimum_runtime_s: int | None = None
    best_effort: bool = False
    #: Where ``usage_group`` came from: ``label``, ``annotation`` or ``default``.
    usage_group_source: str | None = None


def _strings(value: Any) -> dict[str, str]:
    if not value or not isinstance(value, MAP):  # most pods: none, or an empty map
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def labels_of(pod: Any) -> dict[str, str]:
    """The pod's string labels (malformed entries dropped)."""
    meta = pod.get("metadata") if isinstance(pod, MAP) else None
    return _strings(meta.get("labels")) if isinstance(meta, MAP) else {}


def annotations_of(pod: Any) -> dict[str, str]:
    """The pod's string annotations (malformed entries dropped)."""
    meta = pod.get("metadata") if isinstance(pod, MAP) else None
    return _strings(meta.get("annotations")) if isinstance(meta, MAP) else {}


def pod_group(labels: Mapping[str, str], rules: MatchRules) -> str | None:
    """R2: the group a pod matches reservations under (None: no group / feature off)."""
    if rules.required_group_label is None:
        return None
    return labels.get(rules.required_group_label) or rules.default_usage_group


def usage_group(
    labels: Mapping[str, str], notes: Mapping[str, str], rules: MatchRules
) -> str | None:
    """R5: the group a JIT lease would be created under."""
    if rules.use_group:
        return pod_group(labels, rules)
    return notes.get(vocab.USAGE_GROUP) or rules.default_usage_group


def usage_group_source(
    labels: Mapping[str, str], notes: Mapping[str, str], rules: MatchRules
) -> str | None:
    """Where ``usage_group`` takes the group from (told in OnDemandLeaseRejected)."""
    if rules.required_group_label is not None and labels.get(rules.required_group_label):
        return GROUP_FROM_LABEL
    if rules.required_group_label is None and notes.get(vocab.USAGE_GROUP):
        return GROUP_FROM_ANNOTATION
    return GROUP_FROM_DEFAULT if rules.default_usage_group else None


def minimum_runtime(notes: Mapping[str, str], rules: MatchRules) -> int | None:
    """R5: a positive ``minimum-runtime-seconds``, else the default when above 0."""
    text = notes.get(vocab.MINIMUM_RUNTIME_SECONDS, "").strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    return rules.default_minimum_runtime_s or None


def profile(
    pod: Any,
    rules: MatchRules,
    namespace: str | None = None,
    *,
    gpus: GpuRequest | None = None,
    labels: Mapping[str, str] | None = None,
) -> PodProfile:
    """The matching view of ``pod`` (``namespace`` overrides the pod's own; ``gpus``:
    ``pod_gpus(pod)`` and ``labels``: ``labels_of(pod)``, when the caller has them
    already)."""
    meta = pod.get("metadata") if isinstance(pod, MAP) else None
    own_ns = meta.get("namespace") if isinstance(meta, MAP) else None
    labels = labels_of(pod) if labels is None else labels
    notes = annotations_of(pod)
    best_effort = rules.best_effort_enabled and (
        notes.get(vocab.RUNTIME_GUARANTEE, "").strip().lower() == vocab.RUNTIME_GUARANTEE_NONE
    )
    return PodProfile(
        owner=namespace or (own_ns if isinstance(own_ns, str) else ""),
        gpu_class=labels.get(vocab.GPU_CLASS_LABEL) or None,
        group=pod_group(labels, rules),
        gpus=pod_gpus(pod, rules.gpu_resources) if gpus is None else gpus,
        usage_group=usage_group(labels, notes, rules),
        minimum_runtime_s=minimum_runtime(notes, rules),
        best_effort=best_effort,
        usage_group_source=usage_group_source(labels, notes, rules),
    )


def mismatch(
    facts: ReservationFacts,
    pod: PodProfile,
    now: datetime,
    rules: MatchRules,
    no_shows: Set[int] = frozenset(),
) -> Miss | None:
    """Why ``facts`` does not match ``pod`` (R6), or None when it matches: the first
    failed check in ``Miss`` order (each check is made only when every earlier one
    passed — a tuple of all ten cost 3 µs, most of routing a pod over one booking)."""
    if not pod.gpus.readable:
        return Miss.UNREADABLE_GPUS
    if pod.gpu_class is None:
        return Miss.NO_CLASS_LABEL
    use_group = rules.required_group_label is not None  # ``rules.use_group``
    if use_group and pod.group is None:
        return Miss.NO_GROUP
    if facts.kind is not Kind.BOOKING:
        return Miss.NOT_A_BOOKING
    if facts.state is not State.ACTIVE:
        return Miss.CANCELLED
    if facts.owner != pod.owner:
        return Miss.OTHER_OWNER
    if facts.gpu_class != pod.gpu_class:
        return Miss.OTHER_CLASS
    if use_group and facts.group != pod.group:
        return Miss.OTHER_GROUP
    if facts.end <= now:
        return Miss.ENDED
    if facts.id in no_shows:
        return Miss.NO_SHOW
    return None


def jit_eligible(pod: PodProfile, rules: MatchRules) -> bool:
    """R5 for a pod being created (so Pending): leases on, a runtime, a usage group."""
    if not rules.leases_enabled or pod.usage_group is None:
        return False
    return pod.minimum_runtime_s is not None or pod.best_effort
