"""Fluent builders for pods and reservations: the policy and webhook tests', the fault
harness's and the upholders' pods, and the preemption benchmark's."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from shared import model, vocab
from shared.clock import utc

NOW = utc(2026, 1, 5, 10)
HOUR = timedelta(hours=1)


def reservation(
    rid: int = 1,
    *,
    owner: str = "alice",
    gpu_class: str = "h100",
    gpus: int = 2,
    start: datetime | None = None,
    end: datetime | None = None,
    kind: model.Kind = model.Kind.BOOKING,
    state: model.State = model.State.ACTIVE,
    group: str | None = None,
    holds: tuple[int, ...] = (),
) -> model.GPUReservation:
    """A reservation open from NOW-1h to NOW+2h unless told otherwise."""
    facts = model.ReservationFacts(
        id=rid,
        owner=owner,
        gpu_class=gpu_class,
        gpu_class_name=gpu_class.upper(),
        gpu_count=gpus,
        kind=kind,
        start=start or NOW - HOUR,
        end=end or NOW + 2 * HOUR,
        state=state,
        updated_at=utc(2026, 1, 1),
        group=group,
    )
    hold_list = tuple(model.Hold(f"c{rid}-{i}", g, NOW) for i, g in enumerate(holds))
    return model.GPUReservation(facts, hold_list, resource_version="1")


class PodBuilder:
    """A pod dict built step by step: ``PodBuilder().gpus(1).label(...).build()``."""

    def __init__(self, name: str = "p", namespace: str = "alice") -> None:
        self.obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }

    def cls(self, value: str = "h100") -> PodBuilder:
        return self.label(vocab.GPU_CLASS_LABEL, value)

    def label(self, key: str, value: str) -> PodBuilder:
        self.obj["metadata"].setdefault("labels", {})[key] = value
        return self

    def annotate(self, key: str, value: str) -> PodBuilder:
        self.obj["metadata"].setdefault("annotations", {})[key] = value
        return self

    def notes(self, values: Mapping[str, str]) -> PodBuilder:
        """Every entry of ``values`` as an annotation (an empty map still writes the key)."""
        self.obj["metadata"].setdefault("annotations", {}).update(values)
        return self

    def uid(self, value: str) -> PodBuilder:
        self.obj["metadata"]["uid"] = value
        return self

    def on(self, node: str | None) -> PodBuilder:
        """Bound to ``node`` and Running; unbound and Pending when ``node`` is None."""
        if node:
            self.obj["spec"]["nodeName"] = node
        self.obj["status"] = {"phase": "Running" if node else "Pending"}
        return self

    def gpus(self, count: Any, section: str = "limits", index: int = 0) -> PodBuilder:
        container = self.obj["spec"]["containers"][index]
        container.setdefault("resources", {}).setdefault(section, {})[vocab.GPU_RESOURCE] = count
        return self

    def container(self, gpus: int | None = None, init: bool = False, **extra: Any) -> PodBuilder:
        key = "initContainers" if init else "containers"
        items = self.obj["spec"].setdefault(key, [])
        body: dict[str, Any] = {"name": f"{key[:4]}{len(items)}", "image": "busybox", **extra}
        if gpus is not None:
            body["resources"] = {"limits": {vocab.GPU_RESOURCE: str(gpus)}}
        items.append(body)
        return self

    def tolerate(self, **toleration: Any) -> PodBuilder:
        self.obj["spec"].setdefault("tolerations", []).append(toleration)
        return self

    def reservation_toleration(self, value: str = "h100") -> PodBuilder:
        return self.tolerate(
            key=vocab.RESERVATION_TAINT_KEY,
            operator="Equal",
            value=value,
            effect=vocab.TAINT_EFFECT_NO_SCHEDULE,
        )

    def gate(self, name: str) -> PodBuilder:
        self.obj["spec"].setdefault("schedulingGates", []).append({"name": name})
        return self

    def generate_name(self, prefix: str = "p-") -> PodBuilder:
        meta = self.obj["metadata"]
        meta.pop("name", None)
        meta["generateName"] = prefix
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self.obj)


def gpu_pod(gpus: int = 1, namespace: str = "alice", cls: str = "h100") -> PodBuilder:
    """A pod of ``namespace`` labelled with ``cls`` asking for ``gpus`` GPUs."""
    return PodBuilder(namespace=namespace).cls(cls).gpus(str(gpus))
