"""The one Event writer: a core/v1 Event on a pod, logged, never raising.

The reconciler is the only component that writes Events (DESIGN §5). Each one:
- names the pod with its uid in ``involvedObject`` — ``kubectl describe pod`` only
  shows Events carrying the pod's uid (kubernetes-facts §5.3);
- is ``Warning`` when its reason is in ``vocab.WARNING_REASONS``, else ``Normal``
  (R40);
- comes from ``vocab.PRODUCT_NAME`` (``source.component`` and
  ``reportingComponent``), with ``firstTimestamp = lastTimestamp = now``, ``count 1``
  and no ``eventTime`` (classic style: only namespace consistency is validated);
- carries a message of at most 1024 characters.

Names follow client-go's ``<pod>.<hex nanoseconds>`` with a short random tail, so two
Events at the same instant (a manual clock) never collide. Sending is best-effort: a
failure is logged (``k8s.event_failed``) and reported as ``False``, never raised.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from reconciler.pods import PodView
from shared import vocab
from shared.clock import format_utc
from shared.errors import KubeError
from shared.gateway import Response
from shared.logs import log
from shared.policy.wording import clip
from shared.resources import EVENTS, PODS, Resource

_log = logging.getLogger(__name__)
NORMAL = "Normal"
WARNING = "Warning"
#: A pod name longer than this is cut in the Event's name (DNS subdomain ≤ 253).
_NAME_ROOM = 200


class EventGateway(Protocol):
    """What the writer needs of ``shared.gateway.Gateway``."""

    async def create(
        self,
        res: Resource,
        body: dict[str, Any],
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> Response:
        """POST a new object."""
        ...


def event_type(reason: str) -> str:
    """``Warning`` for the reasons R40 lists as warnings, else ``Normal``."""
    return WARNING if reason in vocab.WARNING_REASONS else NORMAL


def _identity(pod: PodView | Mapping[str, Any]) -> tuple[str, str, str]:
    if isinstance(pod, PodView):
        return pod.namespace, pod.name, pod.uid
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))


def event_name(pod_name: str, now: datetime) -> str:
    """``<pod>.<hex nanoseconds><random>``: unique even at one instant."""
    nanos = int(now.timestamp() * 1_000_000_000)
    return f"{pod_name[:_NAME_ROOM]}.{nanos:x}{uuid.uuid4().hex[:6]}"


def event_body(
    pod: PodView | Mapping[str, Any], reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """The core/v1 Event about ``pod`` (pure apart from the random name tail)."""
    namespace, name, uid = _identity(pod)
    involved = {"apiVersion": PODS.api_version, "kind": PODS.kind, "name": name, "uid": uid}
    return object_event_body(namespace, involved, reason, message, event_type(reason), now)


def object_event_body(
    namespace: str,
    involved: Mapping[str, str],
    reason: str,
    message: str,
    type_: str,
    now: datetime,
) -> dict[str, Any]:
    """The core/v1 Event about any object of ``namespace`` (``involved``: apiVersion,
    kind, name and, when known, uid)."""
    stamp = format_utc(now)
    return {
        "apiVersion": EVENTS.api_version,
        "kind": EVENTS.kind,
        "metadata": {"name": event_name(involved["name"], now), "namespace": namespace},
        "involvedObject": {**involved, "namespace": namespace},
        "reason": reason,
        "message": clip(message),
        "type": type_,
        "source": {"component": vocab.PRODUCT_NAME},
        "reportingComponent": vocab.PRODUCT_NAME,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


async def emit(
    gateway: EventGateway,
    pod: PodView | Mapping[str, Any],
    reason: str,
    message: str,
    *,
    now: datetime,
    on_sent: Callable[[str], None] | None = None,
) -> bool:
    """Write the Event; True when it was created. Never raises for API failures.

    ``on_sent`` is called with the reason after a successful write (metrics).
    """
    body = event_body(pod, reason, message, now)
    if not body["metadata"]["namespace"] or not body["involvedObject"]["uid"]:
        log(_log, logging.WARNING, "k8s.event_failed", reason=reason, error="pod without uid")
        return False
    return await send(gateway, body, on_sent)


async def send(
    gateway: EventGateway,
    body: dict[str, Any],
    on_sent: Callable[[str], None] | None = None,
) -> bool:
    """Create the Event ``body`` and log it; True when created. Never raises for API
    failures (logged as ``k8s.event_failed``)."""
    reason = body["reason"]
    namespace = body["metadata"]["namespace"]
    involved = body["involvedObject"]
    pod_name = involved["name"] if involved.get("kind") == PODS.kind else None
    try:
        await gateway.create(EVENTS, body, namespace)
    except KubeError as exc:
        log(
            _log,
            logging.WARNING,
            "k8s.event_failed",
            namespace=namespace,
            pod=pod_name,
            reason=reason,
            error=str(exc),
        )
        return False
    log(
        _log,
        logging.INFO,
        "k8s.event_emitted",
        namespace=namespace,
        pod=pod_name,
        object=None if pod_name else f"{involved.get('kind')}/{involved.get('name')}",
        uid=involved.get("uid"),
        reason=reason,
        type=body["type"],
        message=body["message"],
    )
    if on_sent is not None:
        on_sent(reason)
    return True
