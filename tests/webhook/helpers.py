"""AdmissionReview builders and a webhook wired to the ledger test store."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from shared import model
from shared.clock import ManualClock
from shared.policy.matching import MatchRules
from tests.ledger.fakes import FakeStore
from tests.policy.builders import NOW
from webhook.cache import ReservationCache
from webhook.handler import Admission
from webhook.metrics import Metrics
from webhook.patch import apply
from webhook.settings import STRIP, PolicySettings

CONTROLLER_NS = "gpu-reservation-system"
CONTROLLER_SA = f"system:serviceaccount:{CONTROLLER_NS}:reconciler"
GATE = "galends.io/reservation"


def policy(**overrides: Any) -> PolicySettings:
    values: dict[str, Any] = {
        "rules": MatchRules(),
        "gate_name": None,
        "toleration_policy": STRIP,
        "controller_accounts": frozenset(),
        "namespace": CONTROLLER_NS,
    }
    values.update(overrides)
    return PolicySettings(**values)


def review(
    pod: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    user: str = "alice",
    dry_run: bool = False,
    uid: str | None = None,
) -> dict[str, Any]:
    meta = (pod or old or {}).get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    namespace = meta.get("namespace", "alice")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "name": meta.get("name", "") if pod else "",
            "operation": operation,
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": pod,
            "oldObject": old,
            "dryRun": dry_run,
        },
    }


def patch_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    encoded = doc["response"].get("patch")
    return json.loads(base64.b64decode(encoded)) if encoded else []


def patched(pod: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    return apply(pod, patch_of(doc))


class StoreGateway(FakeStore):
    """The ledger fake store; the cache only lists (no watch)."""

    async def watch(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover
        raise NotImplementedError


async def wired(
    *reservations: model.GPUReservation, synced: bool = True, **policy_overrides: Any
) -> tuple[Admission, StoreGateway]:
    """An ``Admission`` over a store holding ``reservations``, the cache listed."""
    store = StoreGateway(namespace=CONTROLLER_NS)
    for res in reservations:
        store.put(res)
    clock = ManualClock(NOW)
    cache = ReservationCache(store, CONTROLLER_NS, clock)  # type: ignore[arg-type]
    if synced:
        await cache.relist()
    admission = Admission(
        policy(**policy_overrides), cache, store, clock, Metrics(), ledger_deadline_s=5
    )
    return admission, store


async def call(admission: Admission, doc: dict[str, Any]) -> dict[str, Any]:
    status, answer = await admission.review(json.dumps(doc).encode())
    assert status == 200, answer
    return answer
