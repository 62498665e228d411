"""The states a GPU pod can be in, as ``explain`` tells them: ``STATES``, tried in
order, each a test and the ``Finding`` it gives (a headline, what holds the pod, what
would release it, a wait estimate when one is known). A new state is a new row."""

from __future__ import annotations

from datetime import datetime

from reconciler.base.pods import PodView, instant_of
from reconciler.explain.scene import (
    Finding,
    Scene,
    State,
    at,
    booking_line,
    gpus_text,
    is_down,
    on_path,
    owned_reservations,
    pod_of,
    route_of,
    toleration_lines,
    untolerated,
    waits_for,
)
from shared import vocab
from shared.model import GPUReservation
from shared.policy import statuses, wording
from shared.policy.routing import Path, Wait, free_gpus
from shared.policy.wording import when


def _not_gpu(scene: Scene) -> Finding:
    return Finding(
        "not-a-gpu-pod",
        "not a GPU pod: the reservation system leaves it alone",
        (
            f"It has no {vocab.GPU_CLASS_LABEL} label and requests no {vocab.GPU_RESOURCE}; "
            "nothing here holds it.",
        ),
    )


def _finished(scene: Scene) -> Finding:
    pod = pod_of(scene)
    return Finding("finished", f"finished ({pod.phase}): it holds no GPUs any more")


def _deleting(scene: Scene) -> Finding:
    return Finding("deleting", "being deleted: its GPUs are released once it is gone")


def _guarantee_line(pod: PodView, scene: Scene) -> tuple[str, datetime | None]:
    until = instant_of(pod, vocab.GUARANTEED_UNTIL)
    status = pod.annotations.get(vocab.GUARANTEE_STATUS)
    if until is None:
        return "Its guarantee is not recorded.", None
    if status == vocab.GUARANTEE_STATUS_OVERSTAY or until <= scene.now:
        return (
            f"Its guarantee ended {at(until, scene)}: it may be preempted whenever a "
            "booking needs its GPUs.",
            None,
        )
    return f"Its runtime is guaranteed until {at(until, scene)}.", until


def _admitted_waiting(scene: Scene) -> Finding:
    pod = pod_of(scene)
    guarantee, until = _guarantee_line(pod, scene)
    lines = [
        f"The reservation system admitted it under {pod.reference}; it now waits for the "
        "Kubernetes scheduler to find a node with free GPUs.",
    ]
    if scene.unschedulable:
        lines.append(f"The scheduler says: {scene.unschedulable}")
    taints = untolerated(scene)
    if taints:
        lines += toleration_lines(scene, taints)
        lines.append(
            "Released by: that toleration; free GPUs alone will not place it on those nodes."
        )
    else:
        lines.append(
            "Released by: a node of its class with enough free GPUs (pods of other users "
            "finishing, or being preempted for your booking)."
        )
    lines.append(guarantee)
    return Finding(
        "admitted-waiting-for-scheduler",
        f"admitted under {pod.reference}, waiting for the scheduler",
        tuple(lines),
        pod.reference,
        until,
    )


def _running(scene: Scene) -> Finding:
    pod = pod_of(scene)
    guarantee, until = _guarantee_line(pod, scene)
    where = f" on node {pod.node}" if pod.node else ""
    return Finding(
        "admitted",
        f"admitted under {pod.reference}{where} ({pod.phase})",
        (guarantee,),
        pod.reference,
        until,
    )


#: Events that tell an unplaced pod it waits for a booking (stale once it is placed).
_WAITING_REASONS = frozenset({vocab.REASON_WAITING_FOR_RESERVATION, vocab.REASON_RESERVATION_FULL})


def _outside(scene: Scene) -> Finding:
    """Bound to a node without an admission: the scheduler placed it where its own
    tolerations let it (an ordinary pool of its class). The queue never admits a placed
    pod (its spec can no longer move it), so it is not waiting for anything."""
    pod = pod_of(scene)
    where = "" if pod.declared else ", outside the reserved pool"
    lines = [
        "No booking admitted it: the scheduler placed it on a node its own tolerations "
        f"allow{where}, so it runs without a runtime guarantee. A pod already placed is "
        "never admitted, so it is not waiting for a booking.",
    ]
    if scene.said and scene.said[-1].reason in _WAITING_REASONS:
        lines.append(
            f"Its newest Event ({scene.said[-1].reason}, below) was written before it was "
            "placed and no longer applies."
        )
    if pod.declared:
        lines.append(
            f"It tolerates the {vocab.RESERVATION_TAINT_KEY} taint without an admission: "
            f"the reservation system evicts such a pod ({vocab.REASON_UNADMITTED_TOLERATION})."
        )
    found = route_of(scene) if scene.reservations is not None else None
    if found is not None and found.reservation is not None and found.wait is not Wait.TOO_SMALL:
        lines.append(_rerun(found.reservation, scene))
    return Finding(
        "running-outside-bookings",
        f"on node {pod.node} without a booking ({pod.phase}): not admitted, not waiting",
        tuple(lines),
    )


def _rerun(res: GPUReservation, scene: Scene) -> str:
    """How to get the pod under ``res`` instead: recreate it while ``res`` is open."""
    start = res.facts.start
    when_open = "now" if start <= scene.now else f"once it opens, {at(start, scene)}"
    return (
        f"To run under your booking {res.name} instead, delete the pod and create it again "
        f"{when_open}: a pod created while its booking is open with room is admitted at "
        "creation."
    )


def _unknown(scene: Scene) -> Finding:
    return Finding(
        "reservations-unreadable",
        "not admitted; your reservations could not be read",
        ("What the reservation system last said on the pod is below.",),
    )


def _admit_now(scene: Scene) -> Finding:
    res = route_of(scene).reservation
    assert res is not None
    return Finding(
        "admittable-now",
        f"not admitted yet, but {res.name} is open with room",
        (
            f"Your booking {booking_line(res, scene)} can take it: the reservation system "
            "admits the pod within seconds.",
        ),
        res.name,
        scene.now,
    )


def _held(scene: Scene) -> str:
    """How Kubernetes holds a queued pod meanwhile: a scheduling gate, or nothing."""
    gates = pod_of(scene).gates
    if gates:
        return (
            f"Kubernetes shows it Pending (SchedulingGated: {', '.join(gates)}): the "
            "scheduler leaves it alone until the reservation system admits it."
        )
    return (
        "It carries no scheduling gate: should a node its own tolerations allow have room "
        "first (an ordinary pool of its class), the scheduler places it there and it runs "
        "without the booking."
    )


def _queued_window(scene: Scene) -> Finding:
    res = route_of(scene).reservation
    assert res is not None
    start = res.facts.start
    return Finding(
        "queued-for-window",
        f"waiting for your booking {res.name}, which opens {at(start, scene)}",
        (
            f"Held until the window of {booking_line(res, scene)} opens.",
            _held(scene),
            f"Released by: the window opening at {when(start, scene.zone)}; the pod is "
            "admitted at that moment, nothing to do.",
        ),
        res.name,
        start,
    )


def _holders(scene: Scene, res: GPUReservation) -> list[PodView]:
    return sorted(
        (p for p in scene.neighbours if p.reference == res.name and not p.finished),
        key=lambda p: (instant_of(p, vocab.GUARANTEED_UNTIL) or res.facts.end, p.name),
    )


def _queued_full(scene: Scene) -> Finding:
    res = route_of(scene).reservation
    assert res is not None
    pod = pod_of(scene)
    holders = _holders(scene, res)
    named = [
        f"{p.name} ({gpus_text(p.gpus)}, guaranteed until "
        f"{when(instant_of(p, vocab.GUARANTEED_UNTIL) or res.facts.end, scene.zone)})"
        for p in holders
    ]
    ends = [instant_of(p, vocab.GUARANTEED_UNTIL) or res.facts.end for p in holders]
    soonest = min(ends) if ends else None
    held = "held by your pods " + ", ".join(named) if named else "claimed by admissions in progress"
    lines = [
        f"Your booking {booking_line(res, scene)} is open but full: {res.used_gpus} of its "
        f"{res.facts.gpu_count} GPUs are {held}; the pod needs {pod.gpus} "
        f"({max(free_gpus(res), 0)} free).",
        _held(scene),
        "Released by: one of those pods finishing or being deleted "
        "(kubectl delete pod <name>); the pod is admitted at once.",
    ]
    if soonest is not None:
        lines.append(
            f"Estimate: the earliest a holder's guarantee ends is {at(soonest, scene)} "
            "(a holder may run on past it)."
        )
    return Finding(
        "booking-full", f"waiting: your booking {res.name} is full", tuple(lines), res.name, soonest
    )


def _too_small(scene: Scene) -> Finding:
    res = route_of(scene).reservation
    assert res is not None
    return Finding(
        "booking-too-small",
        f"never admitted as it is: {res.name} holds fewer GPUs than the pod requests",
        (
            wording.reservation_too_small(res, pod_of(scene).gpus),
            "Released by: recreating the pod with fewer GPUs, or a bigger booking.",
        ),
        res.name,
    )


#: The Events the lease path writes on a candidate.
ONDEMAND_REASONS = (
    vocab.REASON_ONDEMAND_LEASE_DENIED,
    vocab.REASON_ONDEMAND_LEASE_REJECTED,
    vocab.REASON_ONDEMAND_LEASE_DELAYED,
    vocab.REASON_ONDEMAND_ADMISSION_PAUSED,
    vocab.REASON_NO_MATCHING_NODE,
    vocab.REASON_WAITING_FOR_NODE,
)


def _jit(scene: Scene) -> Finding:
    told = [r for r in dict.fromkeys(s.reason for s in scene.said) if r in ONDEMAND_REASONS]
    if told:
        said = f"What came of it is in its Events ({', '.join(told)}; the newest is below)."
    else:
        said = (
            "No lease Event is on it yet: the scheduler may not have judged it, or the "
            "request is still on its way."
        )
    return Finding(
        "on-demand",
        "no booking is open: the pod is eligible for an on-demand lease",
        (
            "The reservation system requests a just-in-time lease for it when the "
            "scheduler cannot place it.",
            said,
            f"Once granted, its {vocab.BOOKING_REFERENCE} and {vocab.RESERVATION_KIND} "
            "annotations name the lease.",
            "Released by: a granted lease, or a booking for this GPU class.",
        ),
    )


def _no_booking(scene: Scene) -> Finding:
    pod = pod_of(scene)
    found = route_of(scene)
    status = statuses.unmatched(
        pod.profile,
        found,
        owned_reservations(scene),
        scene.now,
        scene.rules,
        known_classes=None,
        contact=None,
        zone=scene.zone,
    )
    return Finding(
        "no-booking",
        "not admitted: no booking matches and no lease can be requested",
        (status.message, "Released by: a booking in the reservation app that matches the pod."),
    )


def _admitted(scene: Scene) -> bool:
    return pod_of(scene).admitted


def running_since(scene: Scene) -> str:
    c = scene.controller
    if c is None or not c.found:
        return "no leader has ever run"
    if c.renewed is None:
        return "no leader has renewed its Lease"
    return f"no leader since {at(c.renewed, scene)}"


def _controller_down(scene: Scene) -> Finding:
    """Nothing admits, queues or requests a lease while no controller runs: what would
    happen once it does is said as that, not as a promise."""
    later = next(s for s in STATES[_AFTER_DOWN:] if s.applies(scene)).describe(scene)
    found = scene.controller is None or scene.controller.found
    where = "its leader Lease is not renewed" if found else "its leader Lease does not exist"
    return Finding(
        "controller-not-running",
        f"not admitted, and nothing will admit it now: the controller is not running "
        f"({running_since(scene)})",
        (
            f"The reservation system's controller runs nowhere ({where}): no pod is "
            "admitted, queued or given a lease until it runs again.",
            f"Once it runs: {later.headline}.",
            "Released by: the controller running again; tell your cluster's operators.",
        ),
        later.reservation,
    )


STATES: tuple[State, ...] = (
    State("not-a-gpu-pod", lambda s: s.pod is None, _not_gpu),
    State("finished", lambda s: pod_of(s).finished, _finished),
    State("deleting", lambda s: pod_of(s).deleting, _deleting),
    State(
        "admitted-waiting-for-scheduler",
        lambda s: _admitted(s) and pod_of(s).node is None,
        _admitted_waiting,
    ),
    State("admitted", _admitted, _running),
    State("running-outside-bookings", lambda s: pod_of(s).node is not None, _outside),
    State("controller-not-running", is_down, _controller_down),
    State("reservations-unreadable", lambda s: s.reservations is None, _unknown),
    State("admittable-now", lambda s: on_path(s, Path.ADMIT), _admit_now),
    State("queued-for-window", lambda s: waits_for(s, Wait.OPENS_LATER), _queued_window),
    State("booking-full", lambda s: waits_for(s, Wait.FULL), _queued_full),
    State("booking-too-small", lambda s: waits_for(s, Wait.TOO_SMALL), _too_small),
    State("on-demand", lambda s: on_path(s, Path.JIT), _jit),
    State("no-booking", lambda s: True, _no_booking),
)


#: The states ``controller-not-running`` looks past for what would happen once it runs.
_AFTER_DOWN = next(i for i, s in enumerate(STATES) if s.name == "controller-not-running") + 1
