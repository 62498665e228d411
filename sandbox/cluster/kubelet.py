"""The kubelet emulation: one kubelet for every node, an HTTP client of the emulator.

- A node without a Ready condition gets ``Ready=True`` (reason KubeletReady), as a
  kubelet registering it would post; nodes whose Ready condition is set are left alone
  (a scenario may declare a node NotReady).
- A bound Pending pod — bound by the scheduler, or created with ``spec.nodeName`` — is
  admitted first, oldest first, against the pods started on its node before
  (``admission``: resources, node affinity, NoExecute taints only); admitted, it is
  started at once: phase Running, Ready, container statuses, a 127.x pod IP; refused,
  it goes Failed with the kubelet's reason (``OutOfcpu``, ``OutOfnvidia.com/gpu``, …)
  and a Warning Event. A pod bound to a node that does not exist stays Pending.
- An ephemeral container added to a running pod (``kubectl debug``) is reported
  running in ``ephemeralContainerStatuses``.
- A running pod annotated ``vocab.SANDBOX_RUN_SECONDS`` finishes with Succeeded that
  many seconds (sandbox clock) after its ``startTime``.
- A pod of our own image (``processes.is_local``) is run as local processes by the
  ``ProcessRuntime`` instead: it writes that pod's status as its processes go; on
  deletion its processes get SIGTERM, SIGKILL after the grace period, then the pod is
  removed; the processes of a pod gone from the API are killed.
- Pod IPs come from the sandbox's own block (``podnet.Block``) when it has one.
- A terminating pod is removed (DELETE, grace 0, uid precondition) once its
  ``deletionGracePeriodSeconds`` have passed since the kubelet saw the deletion, if it
  is bound and still running; at once otherwise. A repeat delete with a shorter grace
  (the API server lowers ``deletionGracePeriodSeconds``) brings the removal forward to
  now plus the new grace when that is sooner; nothing ever puts it off (the kubelet's
  effective grace period only decreases: ``calculateEffectiveGracePeriod`` in
  pod_workers.go).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, NamedTuple

from sandbox.cluster import admission, events
from sandbox.cluster.passes import Cache, Passes, snapshot
from sandbox.cluster.podnet import Block
from sandbox.cluster.podstatus import (
    missing_ephemeral,
    pod_ip,
    rejected_status,
    running_status,
    succeeded_status,
    with_ephemeral_running,
)
from sandbox.cluster.processes import ProcessRuntime, is_local
from sandbox.cluster.requests import Resources, pod_requests
from sandbox.cluster.scheduler import with_condition
from sandbox.cluster.scheduling import TERMINAL_PHASES
from shared import vocab
from shared.clock import Clock, format_utc, parse_utc
from shared.errors import Conflict, KubeError, NotFound
from shared.gateway import Gateway
from shared.resources import NODES, PODS
from shared.watch import key_of

log = logging.getLogger(__name__)


def run_seconds(pod: dict[str, Any]) -> float | None:
    """The pod's run duration annotation, when it is a number >= 0."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        value = float(annotations[vocab.SANDBOX_RUN_SECONDS])
    except (KeyError, ValueError):
        return None
    return value if value >= 0 else None


#: The Events' reporting component (a kubelet's ``source.component``).
KUBELET = "kubelet"


def _age(pod: dict[str, Any]) -> tuple[str, str]:
    """The order a kubelet admits pods in: oldest first (``HandlePodAdditions``)."""
    meta = pod.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))


def _charge(usage: dict[str, tuple[Resources, int]], node: str, wanted: Resources) -> None:
    used, count = usage.get(node, ({}, 0))
    total = dict(used)
    for resource, amount in wanted.items():
        total[resource] = total.get(resource, Decimal(0)) + amount
    usage[node] = (total, count + 1)


class _Timer(NamedTuple):
    """A pod's one pending action: what for, when it is due, the task waiting for it."""

    purpose: str
    deadline: datetime
    task: asyncio.Task[None]


def has_ready_condition(node: dict[str, Any]) -> bool:
    """Whether anyone has reported the node's readiness yet."""
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" for c in conditions)


class Kubelet(Passes):
    """Runs pods on every node; see the module docstring."""

    what = "kubelet"

    def __init__(
        self,
        gateway: Gateway,
        clock: Clock,
        pods: Cache,
        nodes: Cache,
        runtime: ProcessRuntime | None = None,
        block: Block | None = None,
    ) -> None:
        super().__init__(gateway, clock, pods, nodes)
        self.runtime = runtime
        self._block = block
        self._timers: dict[str, _Timer] = {}
        self._ips = itertools.count()
        self._started: set[str] = set()
        #: Pods this kubelet refused (their Failed status may not be back yet).
        self._rejected: set[str] = set()

    async def run(self) -> None:
        """Run pods until cancelled; pending timers end with the loop."""
        try:
            await super().run()
        finally:
            for timer in self._timers.values():
                timer.task.cancel()

    async def run_once(self) -> None:
        """Register nodes, then bring every pod one step towards its goal."""
        for node in snapshot(self._nodes):
            if not has_ready_condition(node):
                await self._report_ready(node)
        live = set()
        pods = sorted(snapshot(self._pods), key=_age)
        nodes = {str(n["metadata"]["name"]): n for n in snapshot(self._nodes)}
        usage = self._usage(pods)
        for pod in pods:
            live.add(str(pod["metadata"].get("uid", "")))
            await self._sync(pod, nodes, usage)
        for uid in set(self._timers) - live:
            self._timers.pop(uid).task.cancel()
        self._started &= live
        if self.runtime is not None:
            self.runtime.forget(live)
        self._rejected &= live

    def _usage(self, pods: list[dict[str, Any]]) -> dict[str, tuple[Resources, int]]:
        """Per node, what the pods its kubelet admitted request, and how many they are:
        started (by this kubelet, or Running already) and not finished."""
        usage: dict[str, tuple[Resources, int]] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            started = str(pod["metadata"].get("uid", "")) in self._started or phase == "Running"
            if node and started and phase not in TERMINAL_PHASES:
                _charge(usage, str(node), pod_requests(pod))
        return usage

    async def _report_ready(self, node: dict[str, Any]) -> None:
        now = format_utc(self._clock.now())
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        patch = {"status": {"conditions": with_condition(node, ready)}}
        with contextlib.suppress(NotFound):
            await self._gateway.patch(
                NODES, node["metadata"]["name"], patch, None, "merge", subresource="status"
            )

    async def _sync(
        self,
        pod: dict[str, Any],
        nodes: dict[str, dict[str, Any]],
        usage: dict[str, tuple[Resources, int]],
    ) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        bound = bool(spec.get("nodeName"))
        if bound and vocab.MIRROR_POD_ANNOTATION in (meta.get("annotations") or {}):
            # A mirror pod is the API copy of a static pod from the node's manifest
            # directory; the sandbox's nodes have none, so every one is an orphan, which
            # a real kubelet deletes instead of running (a user may create a pod with
            # the annotation; no kubelet runs it).
            await self._remove(pod)
        elif meta.get("deletionTimestamp") and self._runs(pod):
            # Due at once, so a later pass never finds an earlier deadline: a grace the
            # API shortens after the runtime began terminating is not honoured (the
            # processes keep the grace ``_stop_and_remove`` read when it started).
            self._at(pod, "remove", self._clock.now(), self._stop_and_remove)
        elif meta.get("deletionTimestamp"):
            if not bound or phase in TERMINAL_PHASES:
                await self._remove(pod)
            else:
                self._at(pod, "remove", self._grace_deadline(meta), self._remove)
        elif bound and phase == "Pending":
            node = nodes.get(str(spec["nodeName"]))
            if node is not None:  # no such node: no kubelet, the pod stays Pending
                await self._admit(pod, node, usage)
        elif self._runs(pod):
            return  # the runtime writes its status
        elif phase == "Running" and missing_ephemeral(pod):
            now = format_utc(self._clock.now())
            await self._write_status(pod, with_ephemeral_running(pod, now))
        elif phase == "Running" and not self._timed(pod, "finish") and run_seconds(pod) is not None:
            started = parse_utc(
                (pod.get("status") or {}).get("startTime") or meta["creationTimestamp"]
            )
            deadline = started + timedelta(seconds=run_seconds(pod) or 0)
            self._at(pod, "finish", deadline, self._finish)

    def _runs(self, pod: dict[str, Any]) -> bool:
        """Whether the process runtime runs this pod."""
        uid = str(pod["metadata"].get("uid", ""))
        return self.runtime is not None and uid in self.runtime.runs

    async def _stop_and_remove(self, pod: dict[str, Any]) -> None:
        """SIGTERM the pod's processes, SIGKILL after its grace period, remove it."""
        assert self.runtime is not None
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        seconds = grace if isinstance(grace, int) else 30
        await self.runtime.terminate(pod, float(seconds))
        await self._remove(pod)

    def _grace_deadline(self, meta: dict[str, Any]) -> datetime:
        """Now plus the grace period, as a kubelet counts it from when it sees the delete.

        ``deletionTimestamp`` has whole-second resolution, so it is only the fallback.
        """
        grace = meta.get("deletionGracePeriodSeconds")
        if isinstance(grace, int):
            return self._clock.now() + timedelta(seconds=grace)
        return parse_utc(meta["deletionTimestamp"])

    def _timed(self, pod: dict[str, Any], purpose: str) -> bool:
        """Whether the pod has its ``purpose`` timer already (a pass over every pod on
        every change need not work out its deadline again)."""
        existing = self._timers.get(str(pod["metadata"].get("uid", "")))
        return existing is not None and existing.purpose == purpose

    def _at(
        self,
        pod: dict[str, Any],
        purpose: str,
        when: datetime,
        action: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        """Run ``action`` on the pod's latest state at ``when``: once per purpose, at the
        earliest ``when`` asked for it (a later one for the same purpose changes nothing;
        an earlier one replaces the timer, as a shortened grace period does)."""
        uid = str(pod["metadata"].get("uid", ""))
        existing = self._timers.get(uid)
        if existing is not None and existing.purpose == purpose and existing.deadline <= when:
            return
        if existing is not None:
            existing.task.cancel()
        task = asyncio.create_task(self._after(key_of(pod), when, action))
        self._timers[uid] = _Timer(purpose, when, task)

    async def _after(
        self, key: str, when: datetime, action: Callable[[dict[str, Any]], Awaitable[None]]
    ) -> None:
        await self._clock.sleep((when - self._clock.now()).total_seconds())
        pod = self._pods.items.get(key)
        if pod is None:
            return
        try:
            await action(pod)
        except KubeError as exc:
            log.warning("kubelet action on %s failed: %s", key, exc)
        self._wake.set()

    async def _admit(
        self, pod: dict[str, Any], node: dict[str, Any], usage: dict[str, tuple[Resources, int]]
    ) -> None:
        """Admit the pod against what the node's kubelet admitted before (``admission``),
        then start it; or reject it: phase Failed with the reason, and a Warning Event."""
        uid = str(pod["metadata"].get("uid", ""))
        if uid in self._started or uid in self._rejected:
            return
        name = str(node["metadata"]["name"])
        wanted = pod_requests(pod)
        used, count = usage.get(name, ({}, 0))
        rejection = admission.admit(pod, wanted, node, used, count)
        if rejection is None:
            _charge(usage, name, wanted)
            await self._start(pod)
            return
        self._rejected.add(uid)
        status = rejected_status(pod, rejection.reason, rejection.status_message)
        await self._write_status(pod, status)
        await events.record(
            self._gateway, self._clock, pod, KUBELET, "Warning", rejection.reason, rejection.message
        )

    async def _start(self, pod: dict[str, Any]) -> None:
        uid = str(pod["metadata"].get("uid", ""))
        if uid in self._started:
            return
        self._started.add(uid)
        index = next(self._ips)
        ip = self._block.address(index) if self._block is not None else pod_ip(index)
        if self.runtime is not None and is_local(pod):
            self.runtime.start(pod, ip)
            return
        status = running_status(pod, format_utc(self._clock.now()), ip)
        await self._write_status(pod, status)

    async def _finish(self, pod: dict[str, Any]) -> None:
        if (pod.get("status") or {}).get("phase") != "Running":
            return
        await self._write_status(pod, succeeded_status(pod, format_utc(self._clock.now())))

    async def _write_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(NotFound):
            await self._gateway.patch(
                PODS, meta["name"], {"status": status}, meta["namespace"], "merge", "status"
            )

    async def _remove(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(NotFound, Conflict):
            await self._gateway.delete(
                PODS, meta["name"], meta["namespace"], grace_period_s=0, uid=meta.get("uid")
            )
