"""A small world for the guarantee keeper, the re-linker and the evictor.

``Kube`` adds to ``FakeKube`` what these need, with the real rules: pod JSON Patch
(a failed ``test`` is a 422), DELETE with a uid precondition (409 on mismatch), and
Events listed by ``involvedObject.uid`` / ``reason`` field selectors. ``Emitter`` is
the Event writer's stand-in: it records and stores each Event in the kube.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from datetime import datetime, timedelta
from typing import Any

import jsonpatch

from reconciler.evict import Evictor
from reconciler.guarantees import GuaranteeKeeper
from reconciler.pods import PodView, project_pod
from reconciler.relink import Relinker
from shared import model, vocab
from shared.clock import ManualClock
from shared.errors import Conflict, Invalid, NotFound
from shared.gateway import ListResult
from shared.model import Hold
from shared.policy.matching import MatchRules
from shared.policy.tolerations import granted_toleration
from shared.resources import EVENTS, GPU_RESERVATIONS, PODS, Resource
from tests.reconciler.builders import NS, START
from tests.reconciler.fakekube import FakeKube

H = timedelta(hours=1)


class Kube(FakeKube):
    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: str = "json",
        subresource: str | None = None,
    ) -> dict[str, Any]:
        self._check("patch", res)
        key = (res.plural, namespace, name)
        current = self.objects.get(key)
        if current is None:
            raise NotFound(404, "not found", "NotFound")
        try:
            new = jsonpatch.apply_patch(current, patch)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise Invalid(422, f"the patch failed: {exc}", "Invalid") from exc
        self.objects[key] = self._bump(new)
        return copy.deepcopy(new)

    async def delete(
        self, res: Resource, name: str, namespace: str | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        current = self.objects.get((res.plural, namespace, name))
        uid = kwargs.get("uid")
        if current is not None and uid and current["metadata"].get("uid") != uid:
            self._check("delete", res)
            raise Conflict(409, "Precondition failed: UID", "Conflict")
        return await super().delete(res, name, namespace, **kwargs)

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ListResult:
        got = await super().list_all(res, namespace, label_selector)
        if not field_selector:
            return got
        wanted = dict(part.split("=", 1) for part in field_selector.split(","))
        items = [o for o in got.items if all(_field(o, k) == v for k, v in wanted.items())]
        return ListResult(items, got.resource_version)


def _field(obj: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        obj = obj.get(part) or {}
    return obj


class Emitter:
    """Records every Event and stores it (so a later process can find it)."""

    def __init__(self, kube: Kube) -> None:
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
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "c",
                "image": "busybox",
                "resources": {"limits": {vocab.GPU_RESOURCE: str(gpus)}},
            }
        ],
        "tolerations": [granted_toleration("a100")],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{name}",
            "labels": {vocab.GPU_CLASS_LABEL: "a100"},
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


class World:
    """Kube + caches read from it + the three upholders on a manual clock."""

    def __init__(self, now: datetime, *, adoption: bool = True) -> None:
        self.kube = Kube()
        self.clock = ManualClock(now)
        self.emit = Emitter(self.kube)
        self.rules = MatchRules()
        self.adoption = adoption
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
        self.evictor = Evictor(
            self.kube,
            self.clock,
            self.emit,
            self.relinker,
            *args,
            zone=None,
            on_evicted=self.counted.append,
        )

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
