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

``Recorder`` correlates as client-go's recorder does (kubernetes-facts §5.4): an Event
identical to one it wrote (same object, type, reason, message and source) updates that
Event — ``count`` + 1 and a new ``lastTimestamp``, name and ``firstTimestamp`` kept —
instead of adding another, so ``kubectl describe`` shows ``(x3 over 20m)``. It remembers
the last 4,096 distinct Events; one that has expired meanwhile (the API server's
``--event-ttl``) is written anew. Similar Events with different messages are not
combined: the throttles of the callers already bound them.
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from reconciler.base.pods import PodView
from shared import vocab
from shared.clock import format_utc
from shared.errors import KubeError, NotFound
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


class RecorderGateway(EventGateway, Protocol):
    """What a ``Recorder`` needs besides: updating an Event it wrote."""

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: dict[str, Any] | list[dict[str, Any]],
        namespace: str | None = None,
        patch_type: Any = "json",
        subresource: str | None = None,
        read_answer: bool = True,
    ) -> dict[str, Any]:
        """PATCH one object."""
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
    body = pod_event(pod, reason, message, now)
    return body is not None and await send(gateway, body, on_sent)


def pod_event(
    pod: PodView | Mapping[str, Any], reason: str, message: str, now: datetime
) -> dict[str, Any] | None:
    """The Event about ``pod``; None (logged) when the pod has no namespace or uid, as
    ``kubectl describe`` would never show it."""
    body = event_body(pod, reason, message, now)
    if not body["metadata"]["namespace"] or not body["involvedObject"]["uid"]:
        log(_log, logging.WARNING, "k8s.event_failed", reason=reason, error="pod without uid")
        return None
    return body


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


#: How many distinct Events a recorder remembers (client-go's LRU size).
REMEMBERED = 4096


@dataclass
class _Written:
    """An Event the recorder wrote: where it is and how often it was seen."""

    namespace: str
    name: str
    count: int


def _identical(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two Events the same one (client-go's ``getEventKey``)."""
    involved = body["involvedObject"]
    return (
        body["metadata"]["namespace"],
        involved.get("kind"),
        involved.get("name"),
        involved.get("uid"),
        body["type"],
        body["reason"],
        body["message"],
        body.get("source", {}).get("component"),
    )


class Recorder:
    """Writes Events, folding identical ones into one with a count (see the module
    docstring). One per process; not shared between processes (after a restart the
    first repeat is a new Event, as with client-go)."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self._written: OrderedDict[tuple[Any, ...], _Written] = OrderedDict()
        self._room = remembered

    async def emit(
        self,
        gateway: RecorderGateway,
        pod: PodView | Mapping[str, Any],
        reason: str,
        message: str,
        *,
        now: datetime,
        on_sent: Callable[[str], None] | None = None,
    ) -> bool:
        """``emit``, correlated."""
        body = pod_event(pod, reason, message, now)
        return body is not None and await self.send(gateway, body, on_sent)

    async def send(
        self,
        gateway: RecorderGateway,
        body: dict[str, Any],
        on_sent: Callable[[str], None] | None = None,
    ) -> bool:
        """``send``, correlated: a repeat updates the Event written before."""
        key = _identical(body)
        seen = self._written.get(key)
        if seen is not None:
            self._written.move_to_end(key)
            repeated = await self._repeat(gateway, seen, body)
            if repeated is not None:
                if repeated and on_sent is not None:
                    on_sent(body["reason"])
                return repeated
            del self._written[key]  # expired: written anew below
        if not await send(gateway, body, on_sent):
            return False
        self._written[key] = _Written(body["metadata"]["namespace"], body["metadata"]["name"], 1)
        if len(self._written) > self._room:
            self._written.popitem(last=False)
        return True

    async def _repeat(
        self, gateway: RecorderGateway, seen: _Written, body: Mapping[str, Any]
    ) -> bool | None:
        """Count one more occurrence on the Event written before; None when it is gone."""
        change = {"count": seen.count + 1, "lastTimestamp": body["lastTimestamp"]}
        try:
            await gateway.patch(
                EVENTS, seen.name, change, seen.namespace, patch_type="merge", read_answer=False
            )
        except NotFound:
            return None
        except KubeError as exc:
            log(
                _log,
                logging.WARNING,
                "k8s.event_failed",
                namespace=seen.namespace,
                reason=body["reason"],
                error=str(exc),
            )
            return False
        seen.count += 1
        log(
            _log,
            logging.INFO,
            "k8s.event_repeated",
            namespace=seen.namespace,
            name=seen.name,
            reason=body["reason"],
            count=seen.count,
        )
        return True


class Emit(Protocol):
    """``emit`` (or ``Recorder.emit``): one Event on ``pod``; True when it was written."""

    def __call__(
        self, gateway: RecorderGateway, pod: PodView, reason: str, message: str, *, now: datetime
    ) -> Awaitable[bool]:
        """Send the Event."""
        ...
