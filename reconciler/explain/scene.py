"""What ``explain`` reads about one pod: the ``Scene`` (the pod, its Events, its owner's
reservations and GPU pods, the controller's heartbeat) and the answer's shape
(``Finding``, ``State``), with the small readings every state shares (the pod's route,
its bookings, whether the controller or the reservation app is down)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo

from reconciler.base.apphealth import Health
from reconciler.base.pods import PodView
from shared import vocab
from shared.model import GPUReservation
from shared.policy import noshow, verdict, wording
from shared.policy.matching import MatchRules
from shared.policy.routing import Path, Route, Wait, route
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


def pod_of(scene: Scene) -> PodView:
    assert scene.pod is not None
    return scene.pod


def owned_reservations(scene: Scene) -> tuple[GPUReservation, ...]:
    return scene.reservations or ()


def route_of(scene: Scene) -> Route:
    """The route the reconciler would give the pod over the owner's reservations
    (a booking declared a no-show is out of matching, R14)."""
    owned = owned_reservations(scene)
    return route(
        pod_of(scene).profile, owned, scene.now, scene.rules, no_shows=noshow.declared(owned)
    )


def _find(scene: Scene, name: str | None) -> GPUReservation | None:
    return next((r for r in owned_reservations(scene) if r.name == name), None)


def waits_for(scene: Scene, wait: Wait) -> bool:
    if scene.reservations is None:
        return False
    found = route_of(scene)
    return found.path is Path.QUEUE and found.wait is wait


def on_path(scene: Scene, path: Path) -> bool:
    return scene.reservations is not None and route_of(scene).path is path


def gpus_text(n: int) -> str:
    """``1 GPU``, ``2 GPUs``."""
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def booking_line(res: GPUReservation, scene: Scene) -> str:
    f = res.facts
    window = wording.window(f, scene.zone)
    return f"{res.name} ({f.gpu_class_name}, {gpus_text(f.gpu_count)}, {window})"


def is_down(scene: Scene) -> bool:
    """Whether the controller is known not to run (no live leader on its Lease)."""
    return scene.controller is not None and not scene.controller.running(scene.now)


def app_down(scene: Scene) -> Health | None:
    """The app's outage as the running leader published it (None: answering, unknown,
    or the controller not running: its last word is stale then)."""
    c = scene.controller
    if c is None or not c.running(scene.now) or c.app is None or c.app.ok:
        return None
    return c.app


def untolerated(scene: Scene) -> list[tuple[str, str]]:
    """The pool taint of the pod's own GPU class (``gpu-class=<class>``) when the
    scheduler names it as untolerated: a toleration only the user can add. The
    reservation taint is admission's to grant, and other classes' or unrelated taints
    are nodes the pod is not meant for: neither is named as something to add."""
    cls = pod_of(scene).profile.gpu_class
    if not scene.unschedulable or not cls:
        return []
    named = verdict.named_taints(verdict.filters_part(scene.unschedulable))
    return [(vocab.GPU_CLASS_LABEL, cls)] if (vocab.GPU_CLASS_LABEL, cls) in named else []


def toleration_lines(scene: Scene, taints: list[tuple[str, str]]) -> list[str]:
    """What the pod lacks and how to add it."""
    return [
        f"It does not tolerate the taint {key}={value} that the nodes of its GPU class "
        f"carry: add to the pod's spec.tolerations {{key: {key}, operator: Equal, value: "
        f"{value}}} (kubectl edit pod can add a toleration to a pending pod; add it to "
        "your manifest too)."
        for key, value in taints
    ]
