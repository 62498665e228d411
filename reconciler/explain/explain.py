"""Why is my pod pending: what holds a GPU pod and what would release it, in plain words.

Pure functions over a ``Scene`` — the pod, its Events from the reservation system,
its owner's GPUReservations and other GPU pods, read with the user's own credentials
(``reconciler.cli`` is the shell). No side effects.

``STATES`` is a table, tried in order: the first state whose test holds describes the
pod (a headline, what holds it, what would release it, and a wait estimate when one
is known). ``NOTES`` are added whenever they apply (a termination warning, the
reservation system's newest Event, reservations that could not be read). A new state
— an on-demand lease being requested, a preemption — is a new row.

The route of a waiting pod is computed here with ``shared.policy.routing.route``, the
function the reconciler uses, over the owner's reservations and the default matching
rules (the cluster's settings are not readable with a user's credentials); the
reservation system's own newest Event on the pod, which was decided with the real
settings, is always shown next to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo

from reconciler.base.apphealth import Health
from reconciler.base.pods import PodView
from shared import vocab
from shared.clock import parse_utc
from shared.model import GPUReservation
from shared.policy import noshow, statuses, verdict, wording
from shared.policy.matching import MatchRules
from shared.policy.routing import Path, Route, Wait, free_gpus, route
from shared.policy.wording import when


@dataclass(frozen=True)
class Said:
    """One Event the reservation system wrote on the pod."""

    reason: str
    message: str
    at: datetime | None
    kind: str = "Normal"


@dataclass(frozen=True)
class Controller:
    """The controller's leader Lease as the user reads it (``vocab.LEADER_LEASE_NAME``
    in the controller namespace): who leads, when it last renewed, for how long a renew
    counts, and the reservation app's health the leader publishes on it."""

    #: False: there is no such Lease (no leader has ever run).
    found: bool = True
    holder: str | None = None
    renewed: datetime | None = None
    duration_s: float = 0.0
    app: Health | None = None

    def running(self, now: datetime) -> bool:
        """A holder whose last renew is younger than its lease duration (the user's
        clock against the holder's renew: a skew shifts the verdict by as much)."""
        if not self.found or not self.holder or self.renewed is None:
            return False
        return (now - self.renewed).total_seconds() < self.duration_s


@dataclass(frozen=True)
class Scene:
    """Everything ``explain`` looks at; built by the shell."""

    key: str
    #: The pod's slim view; None when it is not a GPU pod (no class label, no GPUs).
    pod: PodView | None
    now: datetime
    zone: ZoneInfo | None = None
    #: The PodScheduled=False message of the scheduler, when it gave one.
    unschedulable: str | None = None
    #: The reservation system's Events on the pod, oldest first.
    said: tuple[Said, ...] = ()
    #: The owner's GPUReservations; None when they could not be read (``unreadable``).
    reservations: tuple[GPUReservation, ...] | None = ()
    unreadable: str | None = None
    #: The owner's other GPU pods (holders of a full booking are named from these).
    neighbours: tuple[PodView, ...] = ()
    rules: MatchRules = field(default_factory=MatchRules)
    #: The controller's Lease; None when it could not be read (nothing is said then).
    controller: Controller | None = None


@dataclass(frozen=True)
class Finding:
    """What ``explain`` says: a state name, a headline and the lines under it."""

    state: str
    headline: str
    lines: tuple[str, ...] = ()
    #: The reservation concerned, when there is one.
    reservation: str | None = None
    #: When the pod is expected to start (or, for a running pod, lose its guarantee).
    estimate: datetime | None = None


@dataclass(frozen=True)
class State:
    """One row of the table: a name, when it applies, and what it says."""

    name: str
    applies: Callable[[Scene], bool]
    describe: Callable[[Scene], Finding]


# --- small readers ----------------------------------------------------------------------


def _instant(pod: PodView, key: str) -> datetime | None:
    text = pod.annotations.get(key)
    try:
        return parse_utc(text) if text else None
    except ValueError:
        return None


def _relative(instant: datetime, now: datetime) -> str:
    minutes = round((instant - now).total_seconds() / 60)
    if minutes == 0:
        return "now"
    span = abs(minutes)
    text = f"{span} min" if span < 120 else f"{span // 60} h {span % 60} min"
    return f"in {text}" if minutes > 0 else f"{text} ago"


def at(instant: datetime, scene: Scene) -> str:
    """``2026-12-03 14:00 UTC (in 9 min)``."""
    return f"{when(instant, scene.zone)} ({_relative(instant, scene.now)})"


def _pod(scene: Scene) -> PodView:
    assert scene.pod is not None
    return scene.pod


def _owned(scene: Scene) -> tuple[GPUReservation, ...]:
    return scene.reservations or ()


def route_of(scene: Scene) -> Route:
    """The route the reconciler would give the pod over the owner's reservations
    (a booking declared a no-show is out of matching, R14)."""
    owned = _owned(scene)
    return route(
        _pod(scene).profile, owned, scene.now, scene.rules, no_shows=noshow.declared(owned)
    )


def _find(scene: Scene, name: str | None) -> GPUReservation | None:
    return next((r for r in _owned(scene) if r.name == name), None)


def _waiting(scene: Scene, wait: Wait) -> bool:
    if scene.reservations is None:
        return False
    found = route_of(scene)
    return found.path is Path.QUEUE and found.wait is wait


def _on_path(scene: Scene, path: Path) -> bool:
    return scene.reservations is not None and route_of(scene).path is path


def _gpus(n: int) -> str:
    """``1 GPU``, ``2 GPUs``."""
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _booking(res: GPUReservation, scene: Scene) -> str:
    f = res.facts
    return f"{res.name} ({f.gpu_class_name}, {_gpus(f.gpu_count)}, {wording.window(f, scene.zone)})"


def _down(scene: Scene) -> bool:
    """Whether the controller is known not to run (no live leader on its Lease)."""
    return scene.controller is not None and not scene.controller.running(scene.now)


def _app_down(scene: Scene) -> Health | None:
    """The app's outage as the running leader published it (None: answering, unknown,
    or the controller not running: its last word is stale then)."""
    c = scene.controller
    if c is None or not c.running(scene.now) or c.app is None or c.app.ok:
        return None
    return c.app


def _untolerated(scene: Scene) -> list[tuple[str, str]]:
    """The pool taint of the pod's own GPU class (``gpu-class=<class>``) when the
    scheduler names it as untolerated: a toleration only the user can add. The
    reservation taint is admission's to grant, and other classes' or unrelated taints
    are nodes the pod is not meant for: neither is named as something to add."""
    cls = _pod(scene).profile.gpu_class
    if not scene.unschedulable or not cls:
        return []
    named = verdict.named_taints(verdict.filters_part(scene.unschedulable))
    return [(vocab.GPU_CLASS_LABEL, cls)] if (vocab.GPU_CLASS_LABEL, cls) in named else []


def _toleration_lines(scene: Scene, taints: list[tuple[str, str]]) -> list[str]:
    """What the pod lacks and how to add it."""
    return [
        f"It does not tolerate the taint {key}={value} that the nodes of its GPU class "
        f"carry: add to the pod's spec.tolerations {{key: {key}, operator: Equal, value: "
        f"{value}}} (kubectl edit pod can add a toleration to a pending pod; add it to "
        "your manifest too)."
        for key, value in taints
    ]


# --- the states -----------------------------------------------------------------------------


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
    pod = _pod(scene)
    return Finding("finished", f"finished ({pod.phase}): it holds no GPUs any more")


def _deleting(scene: Scene) -> Finding:
    return Finding("deleting", "being deleted: its GPUs are released once it is gone")


def _guarantee_line(pod: PodView, scene: Scene) -> tuple[str, datetime | None]:
    until = _instant(pod, vocab.GUARANTEED_UNTIL)
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
    pod = _pod(scene)
    guarantee, until = _guarantee_line(pod, scene)
    lines = [
        f"The reservation system admitted it under {pod.reference}; it now waits for the "
        "Kubernetes scheduler to find a node with free GPUs.",
    ]
    if scene.unschedulable:
        lines.append(f"The scheduler says: {scene.unschedulable}")
    taints = _untolerated(scene)
    if taints:
        lines += _toleration_lines(scene, taints)
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
    pod = _pod(scene)
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
    pod = _pod(scene)
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
            f"Your booking {_booking(res, scene)} can take it: the reservation system "
            "admits the pod within seconds.",
        ),
        res.name,
        scene.now,
    )


def _held(scene: Scene) -> str:
    """How Kubernetes holds a queued pod meanwhile: a scheduling gate, or nothing."""
    gates = _pod(scene).gates
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
            f"Held until the window of {_booking(res, scene)} opens.",
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
        key=lambda p: (_instant(p, vocab.GUARANTEED_UNTIL) or res.facts.end, p.name),
    )


def _queued_full(scene: Scene) -> Finding:
    res = route_of(scene).reservation
    assert res is not None
    pod = _pod(scene)
    holders = _holders(scene, res)
    named = [
        f"{p.name} ({_gpus(p.gpus)}, guaranteed until "
        f"{when(_instant(p, vocab.GUARANTEED_UNTIL) or res.facts.end, scene.zone)})"
        for p in holders
    ]
    ends = [_instant(p, vocab.GUARANTEED_UNTIL) or res.facts.end for p in holders]
    soonest = min(ends) if ends else None
    held = "held by your pods " + ", ".join(named) if named else "claimed by admissions in progress"
    lines = [
        f"Your booking {_booking(res, scene)} is open but full: {res.used_gpus} of its "
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
            wording.reservation_too_small(res, _pod(scene).gpus),
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
    pod = _pod(scene)
    found = route_of(scene)
    status = statuses.unmatched(
        pod.profile,
        found,
        _owned(scene),
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
    return _pod(scene).admitted


def _since(scene: Scene) -> str:
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
        f"({_since(scene)})",
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
    State("finished", lambda s: _pod(s).finished, _finished),
    State("deleting", lambda s: _pod(s).deleting, _deleting),
    State(
        "admitted-waiting-for-scheduler",
        lambda s: _admitted(s) and _pod(s).node is None,
        _admitted_waiting,
    ),
    State("admitted", _admitted, _running),
    State("running-outside-bookings", lambda s: _pod(s).node is not None, _outside),
    State("controller-not-running", _down, _controller_down),
    State("reservations-unreadable", lambda s: s.reservations is None, _unknown),
    State("admittable-now", lambda s: _on_path(s, Path.ADMIT), _admit_now),
    State("queued-for-window", lambda s: _waiting(s, Wait.OPENS_LATER), _queued_window),
    State("booking-full", lambda s: _waiting(s, Wait.FULL), _queued_full),
    State("booking-too-small", lambda s: _waiting(s, Wait.TOO_SMALL), _too_small),
    State("on-demand", lambda s: _on_path(s, Path.JIT), _jit),
    State("no-booking", lambda s: True, _no_booking),
)
#: The states ``controller-not-running`` looks past for what would happen once it runs.
_AFTER_DOWN = next(i for i, s in enumerate(STATES) if s.name == "controller-not-running") + 1


# --- notes ------------------------------------------------------------------------------------


def _warning(scene: Scene) -> str | None:
    pod = scene.pod
    if pod is None or pod.finished:
        return None
    kill = _instant(pod, vocab.TERMINATION_WARNING_AT)
    if kill is None:
        return None
    risk = pod.annotations.get(vocab.TERMINATION_WARNING_RISK, "unknown")
    message = pod.annotations.get(vocab.TERMINATION_WARNING_MESSAGE)
    text = f"At risk of preemption from {at(kill, scene)} (risk {risk}): checkpoint before then."
    return f"{text} {message}" if message else text


def _state_began(scene: Scene) -> tuple[datetime, str] | None:
    """When the state the pod is in began, and what began it, when known: its
    admission, or the last change of the booking it waits for."""
    pod = scene.pod
    if pod is None:
        return None
    if pod.admitted:
        since = pod.admitted_at
        return (since, "it was admitted") if since is not None else None
    if pod.node is not None or scene.reservations is None:
        return None
    res = route_of(scene).reservation
    if res is None:
        return None
    return res.facts.updated_at, f"booking {res.name} was made or last changed"


def _newest(scene: Scene) -> str | None:
    if not scene.said:
        return None
    last = scene.said[-1]
    stamp = f" ({when(last.at, scene.zone)})" if last.at else ""
    began = _state_began(scene)
    if last.at is not None and began is not None and last.at < began[0]:
        return (
            f"Earlier — before {began[1]} at {when(began[0], scene.zone)}, no longer "
            f"current — the reservation system said{stamp}: {last.reason}: {last.message}"
        )
    return f"The reservation system said{stamp}: {last.reason}: {last.message}"


def _taints(scene: Scene) -> str | None:
    """An unadmitted pod the scheduler refuses for a taint it does not tolerate (the
    admitted one is told in its state)."""
    pod = scene.pod
    if pod is None or pod.admitted or pod.node is not None or pod.finished:
        return None
    lines = _toleration_lines(scene, _untolerated(scene))
    return " ".join(lines) if lines else None


def _outage(scene: Scene) -> str | None:
    pod = scene.pod
    app = _app_down(scene)
    if pod is None or app is None or pod.admitted or pod.node is not None or pod.finished:
        return None
    return (
        f"The reservation app has been unreachable since {at(app.since, scene)}, as the "
        "controller sees it: bookings made or changed meanwhile are not seen yet, and no "
        "on-demand lease can be granted; a lease is requested again as soon as it answers."
    )


def _stopped(scene: Scene) -> str | None:
    """An admitted pod while no controller runs: nothing is kept up meanwhile."""
    pod = scene.pod
    if pod is None or not pod.admitted or pod.finished or not _down(scene):
        return None
    return (
        f"The controller is not running ({_since(scene)}): guarantees, warnings and "
        "preemption are not kept up until it runs again."
    )


def _unreadable(scene: Scene) -> str | None:
    if scene.reservations is not None:
        return None
    return f"Your GPUReservations could not be read: {scene.unreadable or 'unknown error'}."


NOTES: tuple[Callable[[Scene], str | None], ...] = (
    _stopped,
    _taints,
    _outage,
    _warning,
    _newest,
    _unreadable,
)


def explain(scene: Scene) -> Finding:
    """The first state of ``STATES`` that applies, with every note that applies."""
    state = next(s for s in STATES if s.applies(scene))
    found = state.describe(scene)
    notes = tuple(n for n in (note(scene) for note in NOTES) if n)
    return Finding(
        found.state, found.headline, found.lines + notes, found.reservation, found.estimate
    )


def render(scene: Scene, found: Finding) -> str:
    """The text ``explain`` prints."""
    return "\n".join([f"{scene.key}: {found.headline}", *(f"  {line}" for line in found.lines)])


# --- list ---------------------------------------------------------------------------------


def table(rows: Sequence[Sequence[str]]) -> str:
    """Rows as left-aligned columns (kubectl's style)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def bookings(
    reservations: Sequence[GPUReservation],
    now: datetime,
    zone: ZoneInfo | None,
    owners: bool = False,
) -> str:
    """The owner's bookings: name, class, kind, GPUs used/total, window, phase (with an
    OWNER column first when ``owners``: several users' bookings)."""
    rows = [["OWNER"] * owners + ["NAME", "CLASS", "KIND", "GPUS", "START", "END", "PHASE"]]
    for res in sorted(reservations, key=lambda r: (r.facts.start, r.facts.id)):
        f = res.facts
        rows.append(
            [f.owner] * owners
            + [
                res.name,
                f.gpu_class_name,
                f.kind.value,
                f"{res.used_gpus}/{f.gpu_count}",
                when(f.start, zone),
                when(f.end, zone),
                f.phase(now).value,
            ]
        )
    return table(rows)


def pods(scenes: Sequence[Scene], namespaces: bool = False) -> str:
    """One line per GPU pod: its state, reservation and estimate (with a NAMESPACE
    column first when ``namespaces``, as ``kubectl get -A``)."""
    rows = [["NAMESPACE"] * namespaces + ["POD", "STATE", "RESERVATION", "ESTIMATE"]]
    for scene in scenes:
        found = explain(scene)
        estimate = ""
        if found.estimate is not None:
            admitted = scene.pod is not None and scene.pod.admitted
            label = "guaranteed until" if admitted else "starts"
            label = "earliest" if found.state == "booking-full" else label
            estimate = f"{label} {when(found.estimate, scene.zone)}"
        name = scene.pod.name if scene.pod else scene.key
        where = [scene.key.partition("/")[0]] * namespaces
        rows.append([*where, name, found.state, found.reservation or "", estimate])
    return table(rows)
