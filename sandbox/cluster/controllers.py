"""Minimal kube-controller-manager controllers: ReplicaSet, Deployment, Job and the
garbage collector — HTTP clients of the emulator, like the scheduler and the kubelet.

Each reads shared caches (pods, ReplicaSets, Deployments, Jobs: list+watch, as
informers) and writes through its own ``ratelimit.LimitedClient`` (20 requests a
second, bursts of 30: kube-controller-manager's client defaults, one bucket per
controller). A pass runs after every change of the caches it reads, and at least every
``passes.RESYNC_S`` seconds.

- **ReplicaSet**: keeps ``spec.replicas`` active pods (neither finished nor being
  deleted) among the pods it controls (controller ownerReference), creating pods from
  the template (``generateName: <rs>-``) in slow-start batches of 1, 2, 4, … and at
  most 500 a pass, deleting the unassigned, Pending, unready and newest first; writes
  ``status`` (replicas, ready, available, observedGeneration). Pods it created or
  deleted are remembered until its cache shows them (the real controller's
  "expectations"), so a slow watch never makes it create twice.
- **Deployment**: the ReplicaSet ``<deployment>-<pod-template-hash>`` for the current
  template (labels, selector and template get ``pod-template-hash``; annotations
  ``deployment.kubernetes.io/revision``, ``desired-replicas``, ``max-replicas``) scaled
  to ``spec.replicas``; every older ReplicaSet scaled to 0 at once (RollingUpdate) or
  before the new one grows (Recreate) — a template change (``kubectl rollout
  restart``'s annotation included) rolls this way; ReplicaSets at 0 beyond
  ``revisionHistoryLimit`` deleted; ``status`` with replicas, updated, ready, available
  and unavailable counts, the Available and Progressing conditions ``kubectl rollout
  status`` reads, and ``collisionCount`` when a name is taken by a foreign ReplicaSet.
- **Job**: pods from the template (``generateName: <job>-``) until ``completions``
  pods Succeeded, at most ``parallelism`` at once (without ``completions``: until one
  succeeds); a Failed pod counts against ``backoffLimit``, past which the Job fails
  (``BackoffLimitExceeded``) and its active pods are deleted; ``suspend`` deletes the
  active pods; conditions ``SuccessCriteriaMet`` and ``Complete`` (or
  ``FailureTarget`` and ``Failed``), ``startTime``, ``completionTime``. Pods finish
  only when the sandbox kubelet finishes them (``sandbox.galends.io/run-seconds``).
- **Garbage collector**: a ReplicaSet, Job or pod whose owners (Deployments,
  ReplicaSets, Jobs) are all gone is deleted in the background (the owner confirmed
  gone by a GET first, as the real collector checks live); one whose owner is deleted
  with the ``orphan`` finalizer loses its ownerReference, then the finalizer is
  removed; an owner with ``foregroundDeletion`` has its dependents deleted and loses
  the finalizer once none is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterable
from typing import Any

from sandbox.cluster.passes import Cache, Woken, snapshot
from sandbox.cluster.ratelimit import LimitedClient
from sandbox.cluster.workloads import (
    BURST_REPLICAS,
    DEPLOYMENTS,
    DESIRED_REPLICAS,
    JOBS,
    MAX_REPLICAS,
    POD_TEMPLATE_HASH,
    REPLICASETS,
    REVISION,
    controller_uid,
    deletion_order,
    is_active,
    is_ready,
    owner_reference,
    pod_from_template,
    same_template,
    slow_start,
    template_hash,
)
from shared.clock import Clock, format_utc
from shared.errors import Conflict, NotFound
from shared.resources import PODS, Resource
from shared.watch import key_of

log = logging.getLogger(__name__)

Obj = dict[str, Any]
#: Seconds a creation or deletion is expected before it is forgotten (the real
#: controllers wait 5 minutes; the sandbox's watches are local and quick).
EXPECTATION_TTL_S = 30.0
ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
#: The owner kinds the garbage collector resolves: (apiVersion, kind) → resource.
OWNER_KINDS: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r for r in (DEPLOYMENTS, REPLICASETS, JOBS)
}


def _uid(obj: Obj) -> str:
    return str(obj["metadata"].get("uid", ""))


def _deleting(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _by_controller(objects: Iterable[Obj]) -> dict[str, list[Obj]]:
    found: dict[str, list[Obj]] = {}
    for obj in objects:
        owner = controller_uid(obj)
        if owner is not None:
            found.setdefault(owner, []).append(obj)
    return found


def _differs(current: Obj, wanted: Obj) -> bool:
    return any(current.get(k) != v for k, v in wanted.items())


class Expectations:
    """Pods an owner created or deleted that its cache does not show yet."""

    def __init__(self) -> None:
        self._creating: dict[str, dict[str, float]] = {}
        self._deleting: dict[str, dict[str, float]] = {}

    def created(self, owner: str, key: str) -> None:
        self._creating.setdefault(owner, {})[key] = time.monotonic()

    def deleted(self, owner: str, key: str) -> None:
        self._deleting.setdefault(owner, {})[key] = time.monotonic()

    def settle(self, owner: str, seen: set[str], active: set[str]) -> tuple[int, set[str]]:
        """Forget creations now seen and deletions no longer active (or too old);
        returns how many creations are still unseen and which deletions are pending."""
        fresh = time.monotonic() - EXPECTATION_TTL_S
        creating = {k: t for k, t in self._creating.get(owner, {}).items() if k not in seen}
        deleting = {k: t for k, t in self._deleting.get(owner, {}).items() if k in active}
        self._creating[owner] = {k: t for k, t in creating.items() if t > fresh}
        self._deleting[owner] = {k: t for k, t in deleting.items() if t > fresh}
        return len(self._creating[owner]), set(self._deleting[owner])

    def forget(self, live: set[str]) -> None:
        """Drop owners no longer present."""
        for book in (self._creating, self._deleting):
            for owner in set(book) - live:
                del book[owner]


class Controller(Woken):
    """A loop over some caches: ``run_once`` after every change and every RESYNC_S."""

    what = "controller"

    def __init__(self, client: LimitedClient, clock: Clock, *caches: Cache) -> None:
        super().__init__(*caches)
        self.client = client
        self.clock = clock

    async def _write_status(self, res: Resource, obj: Obj, wanted: Obj) -> None:
        """Merge ``wanted`` into the object's status when it differs."""
        if not _differs(obj.get("status") or {}, wanted):
            return
        meta = obj["metadata"]
        with contextlib.suppress(NotFound, Conflict):
            await self.client.patch(
                res, meta["name"], {"status": wanted}, meta["namespace"], "status"
            )


class PodOwner(Controller):
    """What the ReplicaSet and Job controllers share: keeping a number of active pods."""

    owner_res = REPLICASETS

    def __init__(self, client: LimitedClient, clock: Clock, owners: Cache, pods: Cache) -> None:
        super().__init__(client, clock, owners, pods)
        self.owners = owners
        self.pods = pods
        self.expectations = Expectations()

    async def manage(self, owner: Obj, want: int, owned: list[Obj]) -> None:
        """Create or delete pods until ``want`` of ``owned`` are active."""
        uid = _uid(owner)
        active = [p for p in owned if is_active(p)]
        unseen, deleting = self.expectations.settle(
            uid, {key_of(p) for p in owned}, {key_of(p) for p in active}
        )
        count = len(active) + unseen - len(deleting)
        if want > count:
            await self._create(owner, min(want - count, BURST_REPLICAS))
        elif want < count:
            candidates = sorted(
                (p for p in active if key_of(p) not in deleting), key=deletion_order
            )
            victims = candidates[: min(count - want, BURST_REPLICAS)]
            await asyncio.gather(*(self._delete(uid, p) for p in victims))

    async def _create(self, owner: Obj, count: int) -> None:
        uid, namespace = _uid(owner), owner["metadata"]["namespace"]
        body = pod_from_template(owner, self.owner_res)
        for size in slow_start(count):
            made = await asyncio.gather(
                *(self.client.create(PODS, body, namespace) for _ in range(size)),
                return_exceptions=True,
            )
            failed = [m for m in made if isinstance(m, BaseException)]
            for pod in made:
                if isinstance(pod, dict):
                    self.expectations.created(uid, key_of(pod))
            if failed:
                log.warning("%s %s: creating pods failed: %s", self.what, key_of(owner), failed[0])
                return

    async def _delete(self, owner_uid: str, pod: Obj) -> None:
        with contextlib.suppress(NotFound, Conflict):
            await self.client.delete(PODS, pod)
        self.expectations.deleted(owner_uid, key_of(pod))


class ReplicaSetController(PodOwner):
    """See the module docstring."""

    what = "replicaset controller"
    owner_res = REPLICASETS

    async def run_once(self) -> None:
        by_owner = _by_controller(snapshot(self.pods))
        owners = snapshot(self.owners)
        self.expectations.forget({_uid(r) for r in owners})
        for rs in owners:
            owned = by_owner.get(_uid(rs), [])
            if not _deleting(rs):
                await self.manage(rs, int((rs.get("spec") or {}).get("replicas") or 0), owned)
            active = [p for p in owned if is_active(p)]
            ready = sum(1 for p in active if is_ready(p))
            status: Obj = {
                "replicas": len(active),
                "fullyLabeledReplicas": len(active),
                "readyReplicas": ready,
                "availableReplicas": ready,
                "observedGeneration": rs["metadata"].get("generation"),
            }
            await self._write_status(REPLICASETS, rs, status)


class JobController(PodOwner):
    """See the module docstring."""

    what = "job controller"
    owner_res = JOBS

    async def run_once(self) -> None:
        by_owner = _by_controller(snapshot(self.pods))
        owners = snapshot(self.owners)
        self.expectations.forget({_uid(j) for j in owners})
        for job in owners:
            if not _deleting(job):
                await self._sync(job, by_owner.get(_uid(job), []))

    async def _sync(self, job: Obj, owned: list[Obj]) -> None:
        spec, status = job.get("spec") or {}, dict(job.get("status") or {})
        conditions = list(status.get("conditions") or [])
        finished = any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in conditions
        )
        active = [p for p in owned if is_active(p)]
        phases = [(p.get("status") or {}).get("phase") for p in owned]
        succeeded, failed = phases.count("Succeeded"), phases.count("Failed")
        now = format_utc(self.clock.now())
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism") or 0)
        if finished:
            want = 0
        elif failed > int(spec.get("backoffLimit") or 0):
            message = "Job has reached the specified backoff limit"
            for kind in ("FailureTarget", "Failed"):
                _add_condition(conditions, _condition(kind, "BackoffLimitExceeded", message, now))
            want = 0
        elif (completions is not None and succeeded >= int(completions)) or (
            completions is None and succeeded > 0 and not active
        ):
            message = "Reached expected number of succeeded pods"
            for kind in ("SuccessCriteriaMet", "Complete"):
                _add_condition(conditions, _condition(kind, "CompletionsReached", message, now))
            status["completionTime"] = now
            want = 0
        elif spec.get("suspend"):
            want = 0
        elif completions is None:
            want = parallelism if succeeded == 0 else len(active)
        else:
            want = min(parallelism, int(completions) - succeeded)
        await self.manage(job, want, owned)
        if not spec.get("suspend"):
            status.setdefault("startTime", now)
        status.update(
            active=len(active),
            ready=sum(1 for p in active if is_ready(p)),
            succeeded=succeeded,
            failed=failed,
            conditions=conditions,
        )
        if not conditions:
            del status["conditions"]
        await self._write_status(JOBS, job, status)


def _add_condition(conditions: list[Obj], condition: Obj) -> None:
    """Add ``condition`` unless one of its type is there (a pass may run before the
    cache shows the status the last one wrote)."""
    if not any(c.get("type") == condition["type"] for c in conditions):
        conditions.append(condition)


def _condition(kind: str, reason: str, message: str, now: str) -> Obj:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


class DeploymentController(Controller):
    """See the module docstring."""

    what = "deployment controller"

    def __init__(
        self, client: LimitedClient, clock: Clock, deployments: Cache, replicasets: Cache
    ) -> None:
        super().__init__(client, clock, deployments, replicasets)
        self.deployments = deployments
        self.replicasets = replicasets

    async def run_once(self) -> None:
        by_owner = _by_controller(snapshot(self.replicasets))
        for deployment in snapshot(self.deployments):
            if not _deleting(deployment):
                await self._sync(deployment, by_owner.get(_uid(deployment), []))

    async def _sync(self, deployment: Obj, owned: list[Obj]) -> None:
        spec = deployment.get("spec") or {}
        template = spec.get("template") or {}
        replicas = int(spec.get("replicas") or 0)
        new = next(
            (
                rs
                for rs in owned
                if same_template(template, (rs.get("spec") or {}).get("template") or {})
            ),
            None,
        )
        olds = [rs for rs in owned if rs is not new]
        if new is None:
            new = await self._new_replicaset(deployment, olds)
            if new is None:
                return
        old_pods = sum(int((rs.get("status") or {}).get("replicas") or 0) for rs in olds)
        recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
        for rs in olds:
            await self._scale(rs, 0)
        await self._scale(new, 0 if recreate and old_pods else replicas)
        await self._annotate(deployment, new)
        await self._clean(deployment, olds)
        await self._status(deployment, new, [new, *olds])

    async def _new_replicaset(self, deployment: Obj, olds: list[Obj]) -> Obj | None:
        meta, spec = deployment["metadata"], deployment.get("spec") or {}
        status = deployment.get("status") or {}
        collisions = int(status.get("collisionCount") or 0)
        digest = template_hash(spec.get("template") or {}, collisions)
        template = _with_hash(spec.get("template") or {}, digest)
        selector = dict(spec.get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), POD_TEMPLATE_HASH: digest}
        revision = 1 + max(
            (int(((rs["metadata"].get("annotations") or {}).get(REVISION)) or 0) for rs in olds),
            default=0,
        )
        replicas = int(spec.get("replicas") or 0)
        body: Obj = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{meta['name']}-{digest}",
                "namespace": meta["namespace"],
                "labels": template["metadata"]["labels"],
                "annotations": {
                    REVISION: str(revision),
                    DESIRED_REPLICAS: str(replicas),
                    MAX_REPLICAS: str(replicas + _surge(spec, replicas)),
                },
                "ownerReferences": [owner_reference(deployment, DEPLOYMENTS)],
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": spec.get("minReadySeconds", 0),
                "selector": selector,
                "template": template,
            },
        }
        try:
            return await self.client.create(REPLICASETS, body, meta["namespace"])
        except Conflict:
            taken = await self.client.get(REPLICASETS, body["metadata"]["name"], meta["namespace"])
            if controller_uid(taken) == _uid(deployment) and same_template(
                spec.get("template") or {}, (taken.get("spec") or {}).get("template") or {}
            ):
                return taken
            await self._write_status(DEPLOYMENTS, deployment, {"collisionCount": collisions + 1})
            return None

    async def _scale(self, rs: Obj, replicas: int) -> None:
        if int((rs.get("spec") or {}).get("replicas") or 0) == replicas:
            return
        meta = rs["metadata"]
        with contextlib.suppress(NotFound, Conflict):
            await self.client.patch(
                REPLICASETS, meta["name"], {"spec": {"replicas": replicas}}, meta["namespace"]
            )

    async def _annotate(self, deployment: Obj, new: Obj) -> None:
        revision = (new["metadata"].get("annotations") or {}).get(REVISION)
        current = (deployment["metadata"].get("annotations") or {}).get(REVISION)
        if revision is None or revision == current:
            return
        meta = deployment["metadata"]
        patch = {"metadata": {"annotations": {REVISION: revision}}}
        with contextlib.suppress(NotFound, Conflict):
            await self.client.patch(DEPLOYMENTS, meta["name"], patch, meta["namespace"])

    async def _clean(self, deployment: Obj, olds: list[Obj]) -> None:
        limit = int((deployment.get("spec") or {}).get("revisionHistoryLimit", 10))
        idle = [
            rs
            for rs in olds
            if not int((rs.get("spec") or {}).get("replicas") or 0)
            and not int((rs.get("status") or {}).get("replicas") or 0)
            and not _deleting(rs)
        ]
        idle.sort(key=lambda rs: int((rs["metadata"].get("annotations") or {}).get(REVISION) or 0))
        for rs in idle[: max(0, len(idle) - limit)]:
            with contextlib.suppress(NotFound, Conflict):
                await self.client.delete(REPLICASETS, rs)

    async def _status(self, deployment: Obj, new: Obj, sets: list[Obj]) -> None:
        spec = deployment.get("spec") or {}
        replicas = int(spec.get("replicas") or 0)

        def total(field: str) -> int:
            return sum(int((rs.get("status") or {}).get(field) or 0) for rs in sets)

        updated = int((new.get("status") or {}).get("replicas") or 0)
        available = total("availableReplicas")
        now = format_utc(self.clock.now())
        current = {
            c.get("type"): c for c in (deployment.get("status") or {}).get("conditions") or []
        }
        is_available = available >= replicas - _unavailable(spec, replicas)
        done = updated == replicas == total("replicas") and available >= replicas
        conditions = [
            _deployment_condition(
                current,
                "Available",
                is_available,
                "MinimumReplicasAvailable" if is_available else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if is_available
                else "Deployment does not have minimum availability.",
                now,
            ),
            _deployment_condition(
                current,
                "Progressing",
                True,
                "NewReplicaSetAvailable" if done else "ReplicaSetUpdated",
                f'ReplicaSet "{new["metadata"]["name"]}" '
                + ("has successfully progressed." if done else "is progressing."),
                now,
            ),
        ]
        status: Obj = {
            "observedGeneration": deployment["metadata"].get("generation"),
            "replicas": total("replicas"),
            "updatedReplicas": updated,
            "readyReplicas": total("readyReplicas"),
            "availableReplicas": available,
            "unavailableReplicas": max(0, total("replicas") - available),
            "conditions": conditions,
        }
        await self._write_status(DEPLOYMENTS, deployment, status)


def _with_hash(template: Obj, digest: str) -> Obj:
    copy: Obj = json.loads(json.dumps(template))
    meta = copy.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), POD_TEMPLATE_HASH: digest}
    return copy


def _percent_or_count(value: Any, replicas: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        try:
            share = int(value[:-1]) * replicas
        except ValueError:
            return 0
        return -(-share // 100) if round_up else share // 100
    return int(value or 0) if isinstance(value, int) else 0


def _surge(spec: Obj, replicas: int) -> int:
    rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    return _percent_or_count(rolling.get("maxSurge"), replicas, round_up=True)


def _unavailable(spec: Obj, replicas: int) -> int:
    rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    return _percent_or_count(rolling.get("maxUnavailable"), replicas, round_up=False)


def _deployment_condition(
    current: dict[Any, Obj], kind: str, ok: bool, reason: str, message: str, now: str
) -> Obj:
    status = "True" if ok else "False"
    before = current.get(kind) or {}
    if (before.get("status"), before.get("reason"), before.get("message")) == (
        status,
        reason,
        message,
    ):
        return before
    changed = before.get("status") != status
    return {
        "type": kind,
        "status": status,
        "lastUpdateTime": now,
        "lastTransitionTime": now if changed else before.get("lastTransitionTime", now),
        "reason": reason,
        "message": message,
    }


class GarbageCollector(Controller):
    """See the module docstring."""

    what = "garbage collector"

    def __init__(
        self,
        client: LimitedClient,
        clock: Clock,
        pods: Cache,
        replicasets: Cache,
        jobs: Cache,
        deployments: Cache,
    ) -> None:
        super().__init__(client, clock, pods, replicasets, jobs, deployments)
        self._sources: list[tuple[Resource, Cache]] = [
            (PODS, pods),
            (REPLICASETS, replicasets),
            (JOBS, jobs),
            (DEPLOYMENTS, deployments),
        ]

    async def run_once(self) -> None:
        owners: dict[str, tuple[Resource, Obj]] = {}
        for res, cache in self._sources:
            if (res.api_version, res.kind) in OWNER_KINDS:
                for obj in snapshot(cache):
                    owners[_uid(obj)] = (res, obj)
        referenced: set[str] = set()
        for res, cache in self._sources:
            for obj in snapshot(cache):
                refs = [
                    r
                    for r in obj["metadata"].get("ownerReferences") or []
                    if (r.get("apiVersion"), r.get("kind")) in OWNER_KINDS
                ]
                if refs:
                    referenced |= {str(r.get("uid")) for r in refs}
                    await self._dependent(res, obj, refs, owners)
        for res, owner in owners.values():
            finalizers = owner["metadata"].get("finalizers") or []
            done = [f for f in (ORPHAN, FOREGROUND) if f in finalizers]
            if _deleting(owner) and done and _uid(owner) not in referenced:
                kept = [f for f in finalizers if f not in done]
                meta = owner["metadata"]
                patch = {"metadata": {"finalizers": kept or None}}
                with contextlib.suppress(NotFound, Conflict):
                    await self.client.patch(res, meta["name"], patch, meta["namespace"])

    async def _dependent(
        self, res: Resource, obj: Obj, refs: list[Obj], owners: dict[str, tuple[Resource, Obj]]
    ) -> None:
        meta = obj["metadata"]
        orphaned: list[str] = []
        gone: list[str] = []
        doomed = False
        for ref in refs:
            uid = str(ref.get("uid"))
            found = owners.get(uid)
            if found is None:
                if not await self._exists(ref, meta["namespace"]):
                    gone.append(uid)
                continue
            finalizers = found[1]["metadata"].get("finalizers") or []
            if _deleting(found[1]) and ORPHAN in finalizers:
                orphaned.append(uid)
            elif _deleting(found[1]) and FOREGROUND in finalizers:
                doomed = True
        all_refs = meta.get("ownerReferences") or []
        remaining = [r for r in all_refs if str(r.get("uid")) not in {*orphaned, *gone}]
        if _deleting(obj):
            return
        if doomed or (gone and not remaining):
            with contextlib.suppress(NotFound, Conflict):
                await self.client.delete(res, obj)
        elif len(remaining) != len(all_refs):
            patch = {"metadata": {"ownerReferences": remaining or None}}
            with contextlib.suppress(NotFound, Conflict):
                await self.client.patch(res, meta["name"], patch, meta["namespace"])

    async def _exists(self, ref: Obj, namespace: str) -> bool:
        """Whether the owner a reference names exists, asked of the API (the cache may
        lag behind a dependent created just after its owner)."""
        res = OWNER_KINDS[(str(ref.get("apiVersion")), str(ref.get("kind")))]
        try:
            live = await self.client.get(res, str(ref.get("name")), namespace)
        except NotFound:
            return False
        return _uid(live) == str(ref.get("uid"))
