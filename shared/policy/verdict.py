"""Guard 1a (R16): can a lease fix what the scheduler said about a pending pod?

A candidate does not tolerate its class's reservation taint yet, and kube-scheduler's
TaintToleration filter runs before NodeResourcesFit, so the class's own nodes answer
"untolerated taint" — never "Insufficient nvidia.com/gpu". The parse therefore looks
for what a lease can NOT fix:

- ``None`` (no verdict yet): the pod is not Pending, has no ``PodScheduled``
  condition, or it is not ``False``/``Unschedulable`` with a message;
- ``False`` (a lease cannot help):
  - an ``Insufficient <resource>`` for anything but ``nvidia.com/gpu`` (cpu, memory
    on the nodes that got that far) — even when GPUs are short too;
  - the message names taints inline (``{key: value}``) and none of them has the
    reservation taint's key — every taint is somebody else's (the key alone, as the
    seed: a class whose nodes are all cordoned answers "were unschedulable" and never
    names its own taint, and guard 1b must still see such a pod);
  - no taint is mentioned at all and GPUs are not short (an affinity-only or
    cordon-only failure: a toleration changes nothing);
- ``True``: otherwise — GPUs are short, or a reservation taint is named, or
  the taints are anonymous counts (``untolerated taint(s)``, 1.35+, and the ≤ 1.17
  ``taints that the pod didn't tolerate``).

Only the filter histogram is read: the PostFilter text after `` preemption:`` repeats
the node count with preemption's own reasons. Every kube-scheduler wording listed in
``kubernetes-facts.md`` is understood (``had untolerated taint {k: v}``, ``had taint
{k: v}, that the pod didn't tolerate``, ``had untolerated taint(s)``, ``had taints that
the pod didn't tolerate``). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shared import vocab

#: The condition the scheduler writes, and the reason that carries a verdict.
POD_SCHEDULED = "PodScheduled"
UNSCHEDULABLE = "Unschedulable"

_INSUFFICIENT = re.compile(r"Insufficient ([^\s,]+)")
_NAMED_TAINT = re.compile(r"\{([^{}:]+):\s*([^{}]*)\}")
_ANONYMOUS_TAINTS = ("untolerated taint(s)", "taints that the pod didn't tolerate")
_POST_FILTER = " preemption:"


@dataclass(frozen=True)
class Scheduled:
    """The pod's ``PodScheduled`` condition as the reconciler keeps it."""

    status: str
    reason: str
    message: str


def filters_part(message: str) -> str:
    """The filter histogram of a fit error (the PostFilter text cut off)."""
    cut = message.find(_POST_FILTER)
    return message if cut < 0 else message[:cut]


def short_resources(message: str) -> set[str]:
    """Every resource an ``Insufficient <resource>`` names (punctuation stripped)."""
    return {m.rstrip(".,;:") for m in _INSUFFICIENT.findall(message)}


def named_taints(message: str) -> list[tuple[str, str]]:
    """The ``{key: value}`` taints the message names."""
    return [(k.strip(), v.strip()) for k, v in _NAMED_TAINT.findall(message)]


def lease_can_help(phase: str, scheduled: Scheduled | None) -> bool | None:
    """R16 (see the module docstring); no side effects."""
    if phase != "Pending" or scheduled is None:
        return None
    if scheduled.status != "False" or scheduled.reason != UNSCHEDULABLE or not scheduled.message:
        return None
    text = filters_part(scheduled.message)
    short = short_resources(text)
    if short - {vocab.GPU_RESOURCE}:
        return False
    named = named_taints(text)
    if named and all(key != vocab.RESERVATION_TAINT_KEY for key, _ in named):
        return False
    if vocab.GPU_RESOURCE in short or named:
        return True
    return any(form in text for form in _ANONYMOUS_TAINTS)
