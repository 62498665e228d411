"""Events the scheduler and kubelet write (classic core/v1 Events, as their recorders do)."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from shared.clock import Clock, format_utc
from shared.errors import KubeError
from shared.gateway import Gateway
from shared.resources import EVENTS

log = logging.getLogger(__name__)


async def record(
    gateway: Gateway,
    clock: Clock,
    pod: dict[str, Any],
    component: str,
    kind: str,
    reason: str,
    message: str,
) -> None:
    """Write one Event about ``pod``; a failure is logged, never raised."""
    meta = pod.get("metadata") or {}
    now = format_utc(clock.now())
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta.get('name')}.{secrets.token_hex(8)}"},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message[:1024],
        "type": kind,
        "source": {"component": component},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        await gateway.create(EVENTS, event, namespace=meta.get("namespace"))
    except KubeError as exc:
        log.warning("could not record event %s: %s", reason, exc)
