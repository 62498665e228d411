"""A small world for the guarantee keeper, the re-linker and the evictor.

The kube is ``tests.fakekube.FakeKube`` (pod JSON Patch with ``test`` as a 422, DELETE
with a uid precondition, Events listed by field selectors). ``Emitter`` is the Event
writer's stand-in: it records and stores each Event in the kube.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import datetime, timedelta
from typing import Any

from reconciler.admission.evicting import PassContext
from reconciler.admission.guarantees import GuaranteeKeeper
from reconciler.admission.relink import Relinker
from reconciler.base.pods import PodView, project_pod
from reconciler.queue.evict import Evictor
from shared import model, vocab
from shared.clock import ManualClock
from shared.model import Hold
from shared.policy.matching import MatchRules
from shared.policy.tolerations import granted_toleration
from shared.resources import EVENTS, GPU_RESERVATIONS, PODS
from tests.fakekube import FakeKube
from tests.policy.builders import PodBuilder
from tests.reconciler.builders import NS, START

H = timedelta(hours=1)


class Emitter:
    """Records every Event and stores it (so a later process can find it)."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        self.sent: list[tuple[str, str, str]] = []
        self._seq = itertools.count()

    async def __call__(
        self, gateway: Any, pod: PodView, reason: str, message: str, *, now: datetime
    ) -> bool:
        self.sent.append((pod.key, reason, message))
        event = {
            "metadata": {"name": f"{pod.name}.{next(self._seq)}", "namespace": pod.namespace},
            "involvedObject": {"kind": "Pod", "name": pod.name, "uid": pod.uid},
            "reason": reason,
            "message": message,
        }
        self.kube.add(EVENTS, event, pod.namespace)
        return True

    def reasons(self) -> list[str]:
        return [r for _, r, _ in self.sent]


def facts(
    rid: int,
    start: datetime = START,
    end: datetime | None = None,
    *,
    gpus: int = 2,
    owner: str = "alice",
    state: model.State = model.State.ACTIVE,
    cancel_reason: str | None = None,
) -> model.ReservationFacts:
    return model.ReservationFacts(
        rid,
        owner,
        "a100",
        "A100",
        gpus,
        model.Kind.BOOKING,
        start,
        end or start + H,
        state,
        START,
        cancel_reason=cancel_reason,
    )


def raw_pod(
    name: str,
    ref: str | None,
    *,
    gpus: int = 1,
    ns: str = "alice",
    node: str | None = "gpu-1",
    claim: str | None = None,
    notes: dict[str, str] | None = None,
) -> dict[str, Any]:
    annotations = dict(notes or {})
    if ref:
        annotations[vocab.BOOKING_REFERENCE] = ref
        annotations[vocab.ADMISSION_CLAIM] = claim or f"claim-{name}"
    pod = PodBuilder(name, ns).uid(f"uid-{name}").cls("a100").gpus(str(gpus))
    return pod.notes(annotations).tolerate(**granted_toleration("a100")).on(node).build()


class World:
    """Kube + caches read from it + the three upholders on a manual clock."""

    def __init__(self, now: datetime, *, adoption: bool = True) -> None:
        self.kube = FakeKube()
        self.clock = ManualClock(now)
        self.emit = Emitter(self.kube)
        self.rules = MatchRules()
        self.adoption = adoption
        #: EVICTION_GRACE_SECONDS of the passes.
        self.grace_s = 60
        self.build()

    def build(self) -> None:
        """(Re)create the upholders: a restart loses everything in memory."""
        args = (self.pods, self.reservations, lambda: True)
        self.keeper = GuaranteeKeeper(self.kube, self.clock, *args, use_group=False)
        self.relinker = Relinker(
            self.kube,
            NS,
            self.clock,
            self.emit,
            *args,
            rules=self.rules,
            enabled=self.adoption,
            zone=None,
        )
        #: Reasons reported to the evictions metric.
        self.counted: list[str] = []
        self.context = PassContext(
            self.kube, self.clock, self.emit, self.relinker, *args, grace_s=self.grace_s
        )
        self.evictor = Evictor(self.context, zone=None, on_evicted=self.counted.append)

    def book(self, f: model.ReservationFacts, holds: tuple[Hold, ...] = ()) -> None:
        res = model.GPUReservation(f, holds)
        key = (GPU_RESERVATIONS.plural, NS, res.name)
        if key in self.kube.objects:
            self.kube.objects[key]["spec"] = model.facts_to_spec(f)
        else:
            self.kube.add(GPU_RESERVATIONS, model.to_object(res, NS, self.clock.now()), NS)

    def add_pod(self, raw: dict[str, Any], hold_on: str | None = None) -> None:
        self.kube.add(PODS, raw, raw["metadata"]["namespace"])
        if hold_on is not None:
            notes = raw["metadata"]["annotations"]
            gpus = int(raw["spec"]["containers"][0]["resources"]["limits"][vocab.GPU_RESOURCE])
            hold = Hold(notes[vocab.ADMISSION_CLAIM], gpus, START, raw["metadata"]["name"])
            hold = Hold(hold.claim, hold.gpus, hold.at, hold.pod, raw["metadata"]["uid"])
            obj = self.kube.objects[(GPU_RESERVATIONS.plural, NS, hold_on)]
            res = model.from_object(obj)
            res = model.GPUReservation(res.facts, (*res.holds, hold))
            obj["status"] = model.status_of(res, self.clock.now())

    def pods(self) -> dict[str, PodView]:
        views = (project_pod(o, self.rules) for o in self.kube.items(PODS))
        return {v.key: v for v in views if v is not None}

    def reservations(self) -> dict[str, model.GPUReservation]:
        objs = (model.from_object(o) for o in self.kube.items(GPU_RESERVATIONS, NS))
        return {r.name: r for r in objs}

    def notes(self, name: str, ns: str = "alice") -> dict[str, str]:
        obj = self.kube.objects[(PODS.plural, ns, name)]
        return dict(obj["metadata"].get("annotations") or {})

    def exists(self, name: str, ns: str = "alice") -> bool:
        return (PODS.plural, ns, name) in self.kube.objects

    def patches(self) -> int:
        return sum(1 for verb, plural in self.kube.calls if (verb, plural) == ("patch", "pods"))


def run(coro: Any) -> Any:
    return asyncio.run(coro)
