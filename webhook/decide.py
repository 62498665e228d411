"""The admission decision: a pure function of the request, the cache and the settings.

``decide`` returns a ``Verdict``; it performs no I/O and reads no clock. The shell
(``webhook.handler``) claims the budget through ``shared.ledger.claim`` when the
verdict is ``ADMIT``, then calls ``admit`` to stamp the pod — only after the claim
succeeded. DESIGN §4 is the table implemented here:

CREATE, for every pod:
- a request of a GPU resource that is not listed (``GPU_RESOURCE_WEIGHTS``) but lies
  under a GPU vendor's prefix is denied;
- forged controller-owned annotations are removed, self-declared reservation
  tolerations stripped (or the create denied, ``RESERVATION_TOLERATION_POLICY=deny``);
- a pod naming a reserved node in ``spec.nodeName`` (``Context.pinned``) is denied
  unless it is admitted now under an open booking of that node's class.

Then, for a GPU pod (one with a ``gpu-class`` label or a GPU request):
- a pod this webhook already admitted (reinvocation) is left exactly as it is;
- a pod that asks for no GPU is never admitted (NO_MATCH, saying so);
- otherwise the route (``shared.policy.routing``): ADMIT under an open booking, QUEUED
  (gated when a gate name is set, except for a booking too small to ever admit it),
  JIT, or NO_MATCH with reasons.

UPDATE (``webhook.update``) by anyone but the controller's service accounts: denied when it adds a
reservation toleration to any pod, changes a controller-owned annotation, or changes or
removes the ``gpu-class`` label (and the usage-group label when ``REQUIRED_GROUP_LABEL``
is set) of a pod that is admitted (it carries a booking reference) or queued (it
carries the scheduling gate).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from shared import vocab
from shared.model import GPUReservation, Hold, claim_key, parse_reference
from shared.policy import tolerations as tol
from shared.policy.annotations import admission_annotations
from shared.policy.gpus import GpuRequest, pod_gpus
from shared.policy.matching import PodProfile, annotations_of, labels_of, profile
from shared.policy.noshow import declared
from shared.policy.routing import Path, Route, Wait, route
from shared.policy.windows import guarantee_end
from webhook import wording
from webhook.patch import shallow
from webhook.settings import DENY
from webhook.update import changed_owned, decide_update
from webhook.verdict import Candidate, Context, Outcome, Pin, Verdict

__all__ = [
    "Candidate",
    "Context",
    "Outcome",
    "Pin",
    "Verdict",
    "admit",
    "changed_owned",
    "decide_create",
    "decide_update",
    "own_admission",
    "pinned_denial",
]

#: An unbound hold younger than this may be our own from the first round.
REINVOCATION_WINDOW = timedelta(minutes=2)
#: Starts the claim id stamped by a dry run, which writes no hold: its reinvocation
#: recognises the stamp by this mark (a dry-run answer grants nothing; a real request
#: still needs the hold).
DRY_RUN_CLAIM_PREFIX = "dry-run-"


def _governed(gpu_class: str | None, gpus: GpuRequest) -> bool:
    """A pod the reservation system routes: labelled, asking for GPUs, or unreadable."""
    return gpu_class is not None or gpus.count > 0 or not gpus.readable


# --- CREATE --------------------------------------------------------------------------


def _forged(pod: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in annotations_of(pod) if k in vocab.CONTROLLER_OWNED_ANNOTATIONS)


def _strip_annotations(edited: dict[str, Any], keys: Iterable[str]) -> None:
    notes = shallow(shallow(edited, "metadata", dict), "annotations", dict)
    for key in keys:
        notes.pop(key, None)


def _strip_tolerations(edited: dict[str, Any], indexes: list[int]) -> None:
    spec = shallow(edited, "spec", dict)
    spec["tolerations"] = [t for i, t in enumerate(spec["tolerations"]) if i not in indexes]


def own_admission(
    pod: Mapping[str, Any],
    prof: PodProfile,
    reservations: Iterable[GPUReservation],
    now: datetime,
    dry_run: bool = False,
) -> GPUReservation | None:
    """The reservation a first-round admission of this very pod claimed, if any.

    Reinvocation sees our own toleration and annotations. They are ours when the
    referenced reservation (the owner's) holds an unbound, recent hold with the pod's
    claim id, the pod's GPUs and its name (none for a ``generateName`` pod, in both
    rounds) — a claim copied from another pod, even one made for a ``generateName``
    pod whose hold has no name yet, fails one of these. A dry run wrote no hold: in a
    dry run a claim id with ``DRY_RUN_CLAIM_PREFIX`` stands for it (in a real request
    it matches no hold).
    """
    notes = annotations_of(pod)
    ref, claim = notes.get(vocab.BOOKING_REFERENCE, ""), notes.get(vocab.ADMISSION_CLAIM)
    if parse_reference(ref) is None or not claim or prof.gpu_class is None:
        return None
    res = next((r for r in reservations if r.name == ref and r.facts.owner == prof.owner), None)
    if res is None or not any(tol.is_granted(t, prof.gpu_class) for t in tol.tolerations_of(pod)):
        return None
    if dry_run and claim.startswith(DRY_RUN_CLAIM_PREFIX):
        return res
    name = _meta(pod).get("name") or None
    own = [h for h in res.holds if _is_own(h, claim, prof.gpus.count, name, now)]
    return res if own else None


def _is_own(hold: Hold, claim: str, gpus: int, name: str | None, now: datetime) -> bool:
    """The hold is this very request's first round: same claim and GPUs, and the same
    pod identity — the name the first round saw, which for a ``generateName`` pod is
    none (the name is generated after admission, so the reinvoked round has none
    either). A copy of a created pod carries its generated name and fails this."""
    fresh = not hold.bound and now - hold.at <= REINVOCATION_WINDOW
    return fresh and hold.claim == claim_key(claim) and hold.gpus == gpus and hold.pod == name


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def node_name(pod: Mapping[str, Any]) -> str | None:
    """The pod's ``spec.nodeName`` when it names a node."""
    spec = pod.get("spec")
    name = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) and name else None


def _sanitise(pod: dict[str, Any], ctx: Context) -> tuple[dict[str, Any], list[str], str | None]:
    """(pod as edited, warnings, denial message): forged state removed or refused.

    The pod comes back as it was — the caller's own object, which nobody may edit in
    place — when there is nothing to remove (most pods); otherwise a copy of the maps
    and lists on the way to what was removed (``webhook.patch.shallow``)."""
    forged = _forged(pod)
    declared = tol.reservation_tolerations(pod)
    if not forged and not declared:
        return pod, [], None
    edited, warnings = dict(pod), []
    if forged:
        _strip_annotations(edited, forged)
        warnings.append(wording.annotations_removed(forged))
    if declared and ctx.policy.toleration_policy == DENY:
        return edited, warnings, wording.toleration_denied()
    if declared:
        _strip_tolerations(edited, declared)
        warnings.append(wording.toleration_removed())
    return edited, warnings, None


def _gated(pod: dict[str, Any], gate: str) -> dict[str, Any]:
    """``pod`` with the scheduling gate ``gate`` added (a copy along the path; the pod
    itself when it has the gate or a malformed ``schedulingGates``)."""
    spec = pod.get("spec")
    gates = spec.get("schedulingGates", []) if isinstance(spec, dict) else None
    if not isinstance(gates, list) or any(
        isinstance(g, Mapping) and g.get("name") == gate for g in gates
    ):
        return pod
    edited = dict(pod)
    shallow(shallow(edited, "spec", dict), "schedulingGates", list).append({"name": gate})
    return edited


def _queued(
    found: Route, gpus: int, edited: dict[str, Any], notes: tuple[str, ...], ctx: Context
) -> Verdict:
    res = found.reservation
    assert res is not None
    assert found.wait is not None
    if found.wait is Wait.TOO_SMALL:
        text = wording.too_small(res, gpus)
        return Verdict(
            outcome=Outcome.QUEUED,
            edited=edited,
            warnings=(*notes, text),
            gpus=gpus,
            reservation=res.name,
            notes=notes,
        )
    gate = ctx.policy.gate_name
    if gate:
        edited = _gated(edited, gate)  # never in place: it may be the request's own pod
    if found.wait is Wait.OPENS_LATER:
        text = wording.opens_later(res, bool(gate), ctx.zone)
    else:
        text = wording.full(res, bool(gate))
    return Verdict(
        outcome=Outcome.QUEUED,
        edited=edited,
        warnings=(*notes, text),
        gpus=gpus,
        reservation=res.name,
        notes=notes,
    )


def _candidates(
    found: Route, pool: list[GPUReservation], no_shows: frozenset[int], ctx: Context
) -> tuple[Candidate, ...]:
    facts = [r.facts for r in pool]
    use_group = ctx.policy.rules.use_group
    return tuple(
        Candidate(r, guarantee_end(r.facts, facts, ctx.now, use_group=use_group, no_shows=no_shows))
        for r in found.candidates
    )


def _routed(
    prof: PodProfile,
    pool: list[GPUReservation],
    edited: dict[str, Any],
    notes: tuple[str, ...],
    ctx: Context,
) -> Verdict:
    """The route's verdict; ``notes`` are the warnings about removed forgeries."""
    no_shows = declared(pool)
    found = route(prof, pool, ctx.now, ctx.policy.rules, no_shows=no_shows, exclude=ctx.exclude)
    gpus = prof.gpus.count
    if found.path is Path.ADMIT:
        cands = _candidates(found, pool, no_shows, ctx)
        return Verdict(
            outcome=Outcome.ADMIT,
            edited=edited,
            warnings=notes,
            candidates=cands,
            gpus=gpus,
            notes=notes,
        )
    if found.path is Path.QUEUE:
        return _queued(found, gpus, edited, notes, ctx)
    if found.path is Path.JIT:
        return Verdict(
            outcome=Outcome.JIT,
            edited=edited,
            warnings=(*notes, wording.jit()),
            gpus=gpus,
            notes=notes,
        )
    text = wording.no_match(found.misses)
    return Verdict(
        outcome=Outcome.NO_MATCH, edited=edited, warnings=(*notes, text), gpus=gpus, notes=notes
    )


def decide_create(
    pod: dict[str, Any], namespace: str, reservations: Iterable[GPUReservation], ctx: Context
) -> Verdict:
    """The CREATE verdict (module docstring); no side effects.

    A plain pod (no ``gpu-class`` label, no GPU request) is told apart first, from
    its label and GPU count alone: it is never our admission and is never routed, so
    the rest of its profile is not read."""
    gpus, labels = pod_gpus(pod, ctx.policy.rules.gpu_resources), labels_of(pod)
    if gpus.unlisted:
        return Verdict(outcome=Outcome.DENIED, message=wording.unlisted_resources(gpus.unlisted))
    if not _governed(labels.get(vocab.GPU_CLASS_LABEL) or None, gpus):
        edited, warnings, denial = _sanitise(pod, ctx)
        if denial is not None:
            return Verdict(
                outcome=Outcome.DENIED, edited=None, warnings=tuple(warnings), message=denial
            )
        plain = Verdict(
            outcome=Outcome.PASS, edited=edited, warnings=tuple(warnings), notes=tuple(warnings)
        )
        return _pinned(plain, ctx)
    prof = profile(pod, ctx.policy.rules, namespace or None, gpus=gpus, labels=labels)
    pool = list(reservations)
    mine = own_admission(pod, prof, pool, ctx.now, ctx.dry_run)
    if mine is not None:
        if ctx.pinned is not None and mine.facts.gpu_class not in ctx.pinned.classes:
            return _pinned(Verdict(outcome=Outcome.NO_MATCH), ctx)
        text = wording.admitted(mine, _until(mine, pool, ctx), ctx.zone)
        return Verdict(
            outcome=Outcome.ALREADY_ADMITTED, edited=None, warnings=(text,), reservation=mine.name
        )
    edited, warnings, denial = _sanitise(pod, ctx)
    if denial is not None:
        return Verdict(
            outcome=Outcome.DENIED, edited=None, warnings=tuple(warnings), message=denial
        )
    notes = tuple(warnings)
    if gpus.readable and gpus.count == 0:
        verdict = Verdict(
            outcome=Outcome.NO_MATCH,
            edited=edited,
            warnings=(*notes, wording.no_gpus()),
            notes=notes,
        )
    else:
        verdict = _routed(prof, pool, edited, notes, ctx)
    return _pinned(verdict, ctx)


def _pinned(verdict: Verdict, ctx: Context) -> Verdict:
    """``verdict`` for a pod naming a reserved node (``ctx.pinned``): kept when it is an
    admission under a booking of the node's class (only such candidates are kept) or a
    denial; any other answer becomes a denial."""
    pin = ctx.pinned
    if pin is None or verdict.outcome in (Outcome.DENIED, Outcome.ALREADY_ADMITTED):
        return verdict
    if verdict.outcome is Outcome.ADMIT:
        kept = tuple(c for c in verdict.candidates if c.reservation.facts.gpu_class in pin.classes)
        if kept:
            return replace(verdict, candidates=kept)
    return pinned_denial(pin, verdict.notes)


def pinned_denial(pin: Pin, notes: tuple[str, ...] = ()) -> Verdict:
    """The denial of a create that names reserved node ``pin.node`` without admission."""
    return Verdict(
        outcome=Outcome.DENIED, edited=None, warnings=notes, message=wording.pinned_denied(pin.node)
    )


def _until(res: GPUReservation, pool: list[GPUReservation], ctx: Context) -> datetime:
    facts = [r.facts for r in pool]
    return guarantee_end(res.facts, facts, ctx.now, use_group=ctx.policy.rules.use_group)


def admit(
    edited: dict[str, Any], cand: Candidate, claim: str, ctx: Context
) -> tuple[dict[str, Any], str]:
    """The pod stamped as admitted under ``cand`` with ``claim``, and its warning.

    Adds the granted toleration and every admission annotation, and removes the
    scheduling gate if the pod carries it. Call only after the claim succeeded. A dry
    run's claim id is marked (``DRY_RUN_CLAIM_PREFIX``).
    """
    if ctx.dry_run:
        claim = DRY_RUN_CLAIM_PREFIX + claim
    stamped = dict(edited)  # a copy along each path edited; the rest is shared
    res = cand.reservation
    spec = shallow(stamped, "spec", dict)
    # a malformed tolerations value (validation would refuse it) is replaced
    shallow(spec, "tolerations", list).append(tol.granted_toleration(res.facts.gpu_class))
    notes = admission_annotations(
        res.facts,
        claim=claim,
        guaranteed_until=cand.guaranteed_until,
        now=ctx.now,
        admitted_at=ctx.now,
    )
    shallow(shallow(stamped, "metadata", dict), "annotations", dict).update(notes)
    gate = ctx.policy.gate_name
    if gate and isinstance(spec.get("schedulingGates"), list):
        spec["schedulingGates"] = [
            g
            for g in spec["schedulingGates"]
            if not (isinstance(g, Mapping) and g.get("name") == gate)
        ]
    return stamped, wording.admitted(res, cand.guaranteed_until, ctx.zone)
