"""The UPDATE decision (DESIGN §4): no forging admission after the fact.

An update by anyone but the controller's service accounts is denied when it adds a
reservation toleration, changes a controller-owned annotation, or moves an admitted or
queued pod out of its class or group. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared import vocab
from shared.policy import tolerations as tol
from shared.policy.matching import annotations_of, labels_of
from webhook import wording
from webhook.verdict import Context, Outcome, Verdict


def changed_owned(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Controller-owned annotations added, removed or changed between two pods."""
    before, after = annotations_of(old), annotations_of(new)
    keys = vocab.CONTROLLER_OWNED_ANNOTATIONS
    return sorted(k for k in keys if before.get(k) != after.get(k))


def _held(old: Mapping[str, Any], ctx: Context) -> str | None:
    """``admitted`` or ``queued`` when the pod before the update was either; else None."""
    if annotations_of(old).get(vocab.BOOKING_REFERENCE):
        return "admitted"
    gate = ctx.policy.gate_name
    spec = old.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    if (
        gate
        and isinstance(gates, list)
        and any(isinstance(g, Mapping) and g.get("name") == gate for g in gates)
    ):
        return "queued"
    return None


def decide_update(new: dict[str, Any], old: dict[str, Any], username: str, ctx: Context) -> Verdict:
    """The UPDATE verdict: deny forging admission after the fact, and moving an
    admitted or queued pod out of its class or group; no side effects."""
    if ctx.policy.is_controller(username):
        return Verdict(outcome=Outcome.PASS)
    changed = changed_owned(old, new)
    if changed:
        return Verdict(outcome=Outcome.DENIED, message=wording.annotation_change_denied(changed))
    if tol.added_reservation_tolerations(old, new):
        return Verdict(outcome=Outcome.DENIED, message=wording.toleration_denied())
    held = _held(old, ctx)
    if held is not None:
        before, after = labels_of(old), labels_of(new)
        keys = [vocab.GPU_CLASS_LABEL]
        group = ctx.policy.rules.required_group_label
        if group is not None:
            keys.append(group)
        for key in keys:
            if before.get(key) != after.get(key):
                return Verdict(
                    outcome=Outcome.DENIED, message=wording.label_change_denied(key, held)
                )
    return Verdict(outcome=Outcome.PASS)
