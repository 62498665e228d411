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
from datetime import datetime
from zoneinfo import ZoneInfo

from reconciler.base.pods import instant_of
from reconciler.explain.scene import (
    Finding,
    Scene,
    app_down,
    at,
    is_down,
    route_of,
    toleration_lines,
    untolerated,
)
from reconciler.explain.states import STATES, running_since
from shared import vocab
from shared.model import GPUReservation
from shared.policy.wording import when

# --- small readers ----------------------------------------------------------------------


# --- the states -----------------------------------------------------------------------------


# --- notes ------------------------------------------------------------------------------------


def _warning(scene: Scene) -> str | None:
    pod = scene.pod
    if pod is None or pod.finished:
        return None
    kill = instant_of(pod, vocab.TERMINATION_WARNING_AT)
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
    lines = toleration_lines(scene, untolerated(scene))
    return " ".join(lines) if lines else None


def _outage(scene: Scene) -> str | None:
    pod = scene.pod
    app = app_down(scene)
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
    if pod is None or not pod.admitted or pod.finished or not is_down(scene):
        return None
    return (
        f"The controller is not running ({running_since(scene)}): guarantees, warnings and "
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
