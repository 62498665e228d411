"""An in-memory GPUReservation store with the apiserver's optimistic concurrency."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from datetime import datetime
from typing import Any

from shared import model, vocab
from shared.clock import utc
from shared.errors import Conflict, Invalid, NotFound, ServerError
from shared.resources import Resource

NAMESPACE = vocab.PRODUCT_NAME
WINDOW_START = utc(2026, 1, 5, 9)
WINDOW_END = utc(2026, 1, 5, 12)
NOW = utc(2026, 1, 5, 10)


def facts(rid: int = 1, gpus: int = 8, **overrides: Any) -> model.ReservationFacts:
    values: dict[str, Any] = {
        "id": rid,
        "owner": "alice",
        "gpu_class": "a100",
        "gpu_class_name": "A100",
        "gpu_count": gpus,
        "kind": model.Kind.BOOKING,
        "start": WINDOW_START,
        "end": WINDOW_END,
        "state": model.State.ACTIVE,
        "updated_at": utc(2026, 1, 1),
    }
    values.update(overrides)
    return model.ReservationFacts(**values)


class FakeStore:
    """GET and PUT-status of GPUReservations, each write bumping a resourceVersion.

    ``yields`` decides how many times a call yields to the event loop before it acts
    (so tests can interleave concurrent claimers); ``fail_next`` injects errors; every
    successful write is passed to ``on_write`` (invariant checks).
    """

    def __init__(self, yields: Callable[[], int] = lambda: 0) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.rv = 0
        self.yields = yields
        self.fail_next: list[Exception] = []
        self.on_write: Callable[[dict[str, Any]], None] = lambda obj: None
        self.gets = 0
        self.writes = 0

    def put(self, res: model.GPUReservation, now: datetime = NOW) -> dict[str, Any]:
        self.rv += 1
        obj = model.to_object(res, NAMESPACE, now)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[res.name] = obj
        return copy.deepcopy(obj)

    def reservation(self, name: str) -> model.GPUReservation:
        return model.from_object(self.objects[name])

    def bump(self, name: str, change: Callable[[model.GPUReservation], model.GPUReservation]):
        """A write by someone else (a release, another replica)."""
        self.put(change(self.reservation(name)))

    async def _pause(self) -> None:
        for _ in range(self.yields()):
            await asyncio.sleep(0)
        if self.fail_next:
            raise self.fail_next.pop(0)

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        await self._pause()
        self.gets += 1
        if name not in self.objects:
            raise NotFound(404, f'{res.plural}.{res.group} "{name}" not found', "NotFound")
        return copy.deepcopy(self.objects[name])

    async def replace(
        self,
        res: Resource,
        name: str,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        await self._pause()
        assert subresource == "status", "ledger writes go to /status"
        current = self.objects.get(name)
        if current is None:
            raise NotFound(404, "gone", "NotFound")
        sent = body.get("metadata", {}).get("resourceVersion")
        if not sent:
            raise Invalid(422, "metadata.resourceVersion: Invalid value: 0x0", "Invalid")
        if sent != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "the object has been modified", "Conflict")
        self.rv += 1
        updated = copy.deepcopy(current)
        updated["status"] = copy.deepcopy(body["status"])
        updated["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[name] = updated
        self.writes += 1
        self.on_write(updated)
        return copy.deepcopy(updated)


def server_error() -> ServerError:
    return ServerError(503, "etcd unavailable")
