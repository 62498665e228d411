"""GPUReservation builders, and a store of them on the one unit-test fake (``tests.fakekube``)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from shared import model, vocab
from shared.clock import utc
from shared.errors import Conflict, ServerError
from shared.resources import GPU_RESERVATIONS
from tests.fakekube import FakeKube

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


class FakeStore(FakeKube):
    """``tests.fakekube.FakeKube`` holding GPUReservations of one namespace, with helpers
    to store and read them as ``shared.model.GPUReservation``."""

    def __init__(self, yields: Callable[[], int] = lambda: 0, namespace: str = NAMESPACE) -> None:
        super().__init__(yields)
        self.namespace = namespace

    def put(self, res: model.GPUReservation, now: datetime = NOW) -> dict[str, Any]:
        """Store ``res`` as its object (test setup: no rules, no write counted), as the
        apiserver would hold it: a uid (kept from the stored object), a generation (1,
        or one more when the spec changed) and a ledger token (``res.token``, else a
        fresh one)."""
        if not res.token:
            res = replace(res, token=model.new_token())
        obj = model.to_object(res, self.namespace, now)
        old = self.objects.get((GPU_RESERVATIONS.plural, self.namespace, res.name))
        meta = obj["metadata"]
        if old is None:
            meta.update(uid=str(uuid.uuid4()), generation=1)
        else:
            generation = old["metadata"].get("generation", 1)
            meta.update(uid=old["metadata"].get("uid"), generation=generation)
            if old.get("spec") != obj["spec"]:
                meta["generation"] = generation + 1
        return self.add(GPU_RESERVATIONS, obj)

    def stored(self, name: str) -> dict[str, Any]:
        """The stored object itself (editing it edits the store)."""
        return self.objects[(GPU_RESERVATIONS.plural, self.namespace, name)]

    def reservation(self, name: str) -> model.GPUReservation:
        return model.from_object(self.stored(name))

    def bump(self, name: str, change: Callable[[model.GPUReservation], model.GPUReservation]):
        """A write by someone else (a release, another replica), taken as one that may
        take room from a claim: a new ledger token."""
        self.put(replace(change(self.reservation(name)), token=model.new_token()))


def server_error() -> ServerError:
    return ServerError(503, "etcd unavailable")


def inject_conflicts(store: FakeStore, rng: random.Random, rate: float) -> None:
    """Fail ``rate`` of ``store``'s status writes with a 409 before they reach it: claims
    write by JSON Patch, releases by PUT, and both meet the injected conflicts."""

    def flaky(inner: Any) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            if rng.random() < rate:
                raise Conflict(409, "injected", "Conflict")
            return await inner(*args, **kwargs)

        return call

    store.replace = flaky(store.replace)  # type: ignore[method-assign]
    store.patch = flaky(store.patch)  # type: ignore[method-assign]
