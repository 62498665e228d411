"""The scheduler loop: watches pods and nodes, binds what fits, explains what does not.

An HTTP client of the API emulator like kube-scheduler: binds through
``POST pods/<name>/binding`` and writes ``PodScheduled=False/Unschedulable`` through
``pods/<name>/status``. Decisions come from ``scheduling.schedule`` over the informers'
caches; pods it has just bound are "assumed" on their node until the watch shows the
binding, so two passes in quick succession never overfill a node. A pass runs on every
change and at least every ``RESYNC_S`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from typing import Any

from sandbox.cluster import events
from sandbox.cluster.informer import Informer
from sandbox.cluster.scheduling import DEFAULT_SCHEDULER, Placement, schedule
from shared.clock import Clock, format_utc
from shared.errors import Conflict, KubeError, NotFound
from shared.gateway import Gateway
from shared.resources import PODS

log = logging.getLogger(__name__)

#: Wall seconds between passes when nothing changes.
RESYNC_S = 5.0
REASON_UNSCHEDULABLE = "Unschedulable"


def pod_scheduled(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's PodScheduled condition, if any."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return dict(condition)
    return None


def with_condition(pod: dict[str, Any], condition: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's conditions with ``condition`` replacing the one of its type."""
    others = [
        c
        for c in (pod.get("status") or {}).get("conditions") or []
        if c.get("type") != condition["type"]
    ]
    return [*others, condition]


class Scheduler:
    """Binds Pending pods; see the module docstring."""

    def __init__(self, gateway: Gateway, clock: Clock, pods: Informer, nodes: Informer) -> None:
        self._gateway = gateway
        self._clock = clock
        self._pods = pods
        self._nodes = nodes
        self._wake = asyncio.Event()
        pods.subscribe_to(self._wake)
        nodes.subscribe_to(self._wake)
        self._assumed: dict[str, str] = {}

    async def run(self) -> None:
        """Schedule until cancelled."""
        await self._pods.synced.wait()
        await self._nodes.synced.wait()
        while True:
            self._wake.clear()
            try:
                await self.run_once()
            except KubeError as exc:
                log.warning("scheduling pass failed: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), RESYNC_S)

    async def run_once(self) -> None:
        """One pass over the cached pods and nodes."""
        for placement in schedule(self._nodes.snapshot(), self._with_assumed()):
            if placement.node is not None:
                await self._bind(placement.pod, placement.node)
            else:
                await self._unschedulable(placement)

    def _with_assumed(self) -> list[dict[str, Any]]:
        pods = []
        live = set()
        for pod in self._pods.snapshot():
            uid = str(pod["metadata"].get("uid", ""))
            node = self._assumed.get(uid)
            if node is not None and not pod["spec"].get("nodeName"):
                live.add(uid)
                pod = copy.deepcopy(pod)
                pod["spec"]["nodeName"] = node
            pods.append(pod)
        self._assumed = {uid: n for uid, n in self._assumed.items() if uid in live}
        return pods

    async def _bind(self, pod: dict[str, Any], node: str) -> None:
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = PODS.path(meta["namespace"], meta["name"], "binding")
        try:
            await self._gateway.request("POST", path, None, body)
        except (Conflict, NotFound) as exc:
            log.info("binding %s/%s refused: %s", meta["namespace"], meta["name"], exc)
            return
        self._assumed[str(meta["uid"])] = node
        message = f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}"
        await events.record(
            self._gateway, self._clock, pod, DEFAULT_SCHEDULER, "Normal", "Scheduled", message
        )

    async def _unschedulable(self, placement: Placement) -> None:
        pod = placement.pod
        current = pod_scheduled(pod) or {}
        if (current.get("reason"), current.get("message")) == (
            REASON_UNSCHEDULABLE,
            placement.message,
        ):
            return
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": REASON_UNSCHEDULABLE,
            "message": placement.message,
            "lastProbeTime": None,
            "lastTransitionTime": format_utc(self._clock.now()),
        }
        patch = {"status": {"conditions": with_condition(pod, condition)}}
        meta = pod["metadata"]
        try:
            await self._gateway.patch(
                PODS, meta["name"], patch, meta["namespace"], "merge", subresource="status"
            )
        except NotFound:
            return
        await events.record(
            self._gateway,
            self._clock,
            pod,
            DEFAULT_SCHEDULER,
            "Warning",
            "FailedScheduling",
            placement.message,
        )
