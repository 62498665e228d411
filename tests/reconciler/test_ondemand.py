"""The lease path's shell on the manual clock: a fake app, the in-memory Kubernetes API.

Covers what the sandbox scenarios cannot force cheaply: a refused admission patch
(compensating cancel, fresh key), a replayed cancelled lease, the no-verdict hold and
its fast path, a malformed app answer, the teardown, and ONDEMAND_LEASE_ENABLED=false.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from reconciler.admission.step import Admission
from reconciler.admission.waiting import Knowledge
from reconciler.base.caches import Caches
from reconciler.base.metrics import Metrics, QueueMetrics
from reconciler.base.mirroring import MirrorWriter
from reconciler.base.settings import load
from reconciler.ondemand.leaser import SETTLE_MAX_S, SETTLE_S, Leaser
from reconciler.queue.admit import Admitter
from shared import model, vocab
from shared.appclient import (
    AdmissionCandidate,
    BestEffortRequest,
    Cancelled,
    CancelReason,
    Fetched,
    GpuClass,
    Granted,
    LeaseRequest,
    ReplayedCancelled,
    Reservation,
    Selection,
)
from shared.appclient.outcomes import (
    CancelResult,
    Denial,
    Denied,
    LeaseResult,
    SelectionResult,
    Transient,
    TransientReason,
    WithheldPod,
)
from shared.clock import ManualClock
from shared.errors import Invalid, ServerError
from shared.gateway import WatchEvent
from shared.logs import fields_of
from shared.policy import ondemand as policy_ondemand
from shared.policy.ondemand import Held
from shared.resources import GPU_RESERVATIONS, NODES, PODS
from tests.cluster.builders import node as cluster_node
from tests.cluster.builders import reservation_taint
from tests.reconciler.builders import NS, START, relisting
from tests.reconciler.test_admit import Kube

UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/2 nodes are available: 2 node(s) had untolerated taint "
    "{gpu-class-reservation: a100}.",
}
A100 = GpuClass(id=2, name="A100", label_value="a100", total_gpus=16)


def row(rid: int, status: str = "active", kind: str = "on_demand") -> Reservation:
    return Reservation.model_validate(
        {
            "id": rid,
            "gpu_class_id": 2,
            "gpu_class": {"id": 2, "name": "A100", "label_value": "a100"},
            "date": START.date().isoformat(),
            "start_utc": START.isoformat(),
            "end_utc": (START + timedelta(seconds=4200)).isoformat(),
            "gpu_count": 1,
            "kind": kind,
            "status": status,
            "created_at": START.isoformat(),
            "updated_at": START.isoformat(),
            "user": {"id": 1, "username": "alice"},
            "group": {"id": 1, "name": "lab"},
        }
    )


class App:
    """The lease calls, answered from a script; every call recorded."""

    def __init__(self) -> None:
        self.asks: list[LeaseRequest | BestEffortRequest] = []
        self.cancels: list[tuple[int, CancelReason]] = []
        self.answers: list[LeaseResult] = []
        self.next_id = 10
        self.offered: list[list[str]] = []
        self.selection: SelectionResult | None = None

    async def create_lease(self, request: LeaseRequest) -> LeaseResult:
        self.asks.append(request)
        if self.answers:
            return self.answers.pop(0)
        self.next_id += 1
        return Granted(row(self.next_id))

    async def create_best_effort(self, request: BestEffortRequest) -> LeaseResult:
        self.asks.append(request)
        self.next_id += 1
        stub = row(self.next_id, kind="best_effort")
        return Granted(stub.model_copy(update={"end_utc": stub.start_utc}))  # zero-length

    async def cancel(self, reservation_id: int, reason: CancelReason) -> CancelResult:
        self.cancels.append((reservation_id, reason))
        return Cancelled(row(reservation_id, status="cancelled"))

    async def select_admissions(self, candidates: Sequence[AdmissionCandidate]) -> SelectionResult:
        self.offered.append([c.pod_uid for c in candidates])
        if self.selection is not None:
            return self.selection
        return Selection(tuple(c.pod_uid for c in candidates))


def node(name: str) -> dict[str, Any]:
    """A Ready reserved a100 node with 8 GPUs."""
    return cluster_node(name, gpus=8, taints=[reservation_taint("a100")])


def jit_pod(name: str = "job", verdict: bool = True) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending"}
    if verdict:
        status["conditions"] = [UNSCHEDULABLE]
    return {
        "metadata": {
            "name": name,
            "namespace": "alice",
            "uid": f"uid-{name}",
            "creationTimestamp": START.isoformat(),
            "labels": {vocab.GPU_CLASS_LABEL: "a100"},
            "annotations": {vocab.MINIMUM_RUNTIME_SECONDS: "3600", vocab.USAGE_GROUP: "lab"},
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": {vocab.GPU_RESOURCE: "1"}}}]},
        "status": status,
    }


class World:
    def __init__(self, kube: Kube | None = None, **env: str) -> None:
        """``kube``: the cluster of an earlier world (a restarted reconciler)."""
        self.kube = kube or Kube()
        self.clock = ManualClock(START + timedelta(seconds=1))
        base = {
            "RESERVATION_API_URL": "http://app",
            "RESERVATION_API_KEY": "k",
            "POD_NAMESPACE": NS,
            "EVENT_DISPLAY_TIMEZONE": "UTC",
        }
        self.settings, _ = load({**base, **env})
        self.caches = Caches(relisting(self.kube), self.settings, self.clock, lambda: {"a100"})
        self.app = App()
        metrics = QueueMetrics(CollectorRegistry())
        self.admission = Admission(
            self.kube,
            self.caches,
            self.settings,
            self.clock,
            metrics,
            Knowledge(lambda: True, lambda: {"a100"}),
        )
        self.admitter = Admitter(self.admission, self.caches, self.settings, self.clock, metrics)
        self.leaser = Leaser(
            self.app,
            self.kube,
            self.caches,
            self.admission,
            MirrorWriter(self.kube, NS, Metrics()),
            self.settings,
            self.clock,
            lambda: {2: A100},
            CollectorRegistry(),
            rand=lambda: 0.5,
        )

        self.kube.add(NODES, node("a100-r1"))

    def pod(self, name: str = "job") -> dict[str, Any]:
        return self.kube.objects[(PODS.plural, "alice", name)]

    async def step(self) -> None:
        for cache in (self.caches.pods, self.caches.nodes, self.caches.reservations):
            await cache.relist()
        await self.leaser.once()
        await asyncio.gather(*self.leaser._announcing)
        for cache in (self.caches.pods, self.caches.reservations):
            await cache.relist()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_granted_lease_is_mirrored_and_the_pod_admitted_and_announced() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, jit_pod(), "alice")
        await w.step()
        [ask] = w.app.asks
        assert isinstance(ask, LeaseRequest)
        assert (ask.idempotency_key, ask.username, ask.group_name) == ("uid-job", "alice", "lab")
        assert (ask.gpu_class_id, ask.gpu_count, ask.duration_seconds) == (2, 1, 3600 + 600)
        notes = w.pod()["metadata"]["annotations"]
        assert notes[vocab.BOOKING_REFERENCE] == "res-11"
        res = model.from_object(w.kube.objects[(GPU_RESERVATIONS.plural, NS, "res-11")])
        assert res.facts.kind is model.Kind.ON_DEMAND
        assert [h.pod for h in res.holds] == ["job"]
        assert [e["reason"] for e in w.kube.events()] == [vocab.REASON_RUNTIME_GUARANTEED]
        assert w.leaser.tracks == {}

    run(scenario())


class Overlapping(Kube):
    """Notes whether the pod was read while the lease's GPUReservation was being created."""

    read_during_create = False

    async def create(
        self, res: Any, body: dict[str, Any], namespace: str | None = None, dry_run: bool = False
    ) -> Any:
        if res is GPU_RESERVATIONS:
            reads = self.calls.count(("get", PODS.plural))
            for _ in range(20):  # the create's round trip: others may run meanwhile
                await asyncio.sleep(0)
            self.read_during_create = self.calls.count(("get", PODS.plural)) > reads
        return await super().create(res, body, namespace, dry_run)


def test_the_mirror_of_a_grant_and_the_pods_reread_go_side_by_side() -> None:
    async def scenario() -> None:
        w = World(Overlapping())
        w.kube.add(PODS, jit_pod(), "alice")
        await w.step()
        assert w.pod()["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == "res-11"
        assert isinstance(w.kube, Overlapping)
        assert w.kube.read_during_create
        assert w.kube.calls.count(("get", PODS.plural)) == 1  # the admission used that read

    run(scenario())


def test_a_refused_patch_cancels_the_lease_and_the_next_ask_uses_a_fresh_key() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, jit_pod(), "alice")
        w.kube.faults["patch pods"] = Invalid(422, "denied by a policy webhook")
        await w.step()
        assert w.app.cancels == [(11, CancelReason.CONTROLLER_REVOKED)]
        assert vocab.BOOKING_REFERENCE not in (w.pod()["metadata"].get("annotations") or {})
        res = model.from_object(w.kube.objects[(GPU_RESERVATIONS.plural, NS, "res-11")])
        assert res.facts.state is model.State.CANCELLED
        del w.kube.faults["patch pods"]
        await w.clock.advance(300)
        await w.step()
        assert [a.idempotency_key for a in w.app.asks] == ["uid-job", "uid-job.2"]
        assert w.pod()["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == "res-12"

    run(scenario())


def test_a_replayed_cancelled_lease_moves_to_the_next_key_at_once() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, jit_pod(), "alice")
        w.app.answers = [ReplayedCancelled(row(5, status="cancelled"))]
        await w.step()
        assert w.leaser.tracks["uid-job"].attempt == 2
        await w.step()
        assert [a.idempotency_key for a in w.app.asks] == ["uid-job", "uid-job.2"]
        assert w.pod()["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == "res-11"

    run(scenario())


def test_no_verdict_holds_until_the_scheduler_gives_one() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, jit_pod(verdict=False), "alice")
        await w.step()
        assert w.app.asks == []
        track = w.leaser.tracks["uid-job"]
        assert track.waiting_verdict
        assert track.due == w.clock.now() + timedelta(seconds=30)
        pod = w.pod()
        pod["status"]["conditions"] = [UNSCHEDULABLE]
        await w.kube.replace(PODS, "job", pod, "alice")
        await w.caches.pods.relist()  # R21: the verdict makes it due now
        assert w.leaser.tracks["uid-job"].due == w.clock.now()
        await w.step()
        assert len(w.app.asks) == 1

    run(scenario())


def test_a_verdict_arriving_while_the_batch_tells_its_holds_makes_the_pod_due_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batch vets on its snapshot and then tells its holds concurrently; a verdict
    the watch delivers in between must still find the track waiting for it (R21)."""

    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, jit_pod(verdict=False), "alice")
        for cache in (w.caches.pods, w.caches.nodes, w.caches.reservations):
            await cache.relist()

        def deliver() -> None:  # the watch event, after the vetting, before the holds
            pod = w.pod()
            pod["status"]["conditions"] = [UNSCHEDULABLE]
            pod["metadata"]["resourceVersion"] = "99"
            w.caches.pods.apply(WatchEvent("MODIFIED", pod))

        vet = policy_ondemand.preflight

        def vetting(*args: Any) -> Any:
            asyncio.get_running_loop().call_soon(deliver)
            return vet(*args)

        monkeypatch.setattr(policy_ondemand, "preflight", vetting)
        await w.leaser.once()
        assert w.app.asks == []
        assert w.leaser.tracks["uid-job"].due == w.clock.now()  # not in 30 s

    run(scenario())


def test_denial_is_told_once_and_a_malformed_answer_is_not() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, jit_pod(), "alice")
        w.app.answers = [
            Denied(Denial(detail="Only 1 GPU(s) available")),
            Transient(TransientReason.MALFORMED, "not JSON"),
        ]
        await w.step()
        await w.step()  # not due yet: no second ask
        assert len(w.app.asks) == 1
        told = w.kube.events(vocab.REASON_ONDEMAND_LEASE_DENIED)
        assert len(told) == 1
        assert "Only 1 GPU(s) available" in told[0]["message"]
        await w.clock.advance(300)
        await w.step()  # the malformed answer: logged, retried, no Event
        assert len(w.app.asks) == 2
        assert len(w.kube.events(vocab.REASON_ONDEMAND_LEASE_DENIED)) == 1
        await w.clock.advance(300)
        await w.step()
        assert w.pod()["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == "res-11"

    run(scenario())


def test_finished_pod_tears_its_lease_down_and_bookings_are_left_alone() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, jit_pod(), "alice")
        await w.step()
        pod = w.pod()
        pod["status"] = {"phase": "Succeeded"}
        await w.kube.replace(PODS, "job", pod, "alice")
        await w.step()
        assert w.app.cancels == [(11, CancelReason.POD_TERMINATED)]
        await w.step()
        assert len(w.app.cancels) == 1, "cancelled once"

    run(scenario())


def test_leases_disabled_means_no_loop() -> None:
    assert World(ONDEMAND_LEASE_ENABLED="false").leaser.loops() == []
    assert len(World().leaser.loops()) == 1


def test_delegated_selection_grants_in_order_and_withheld_denials_are_told() -> None:
    async def scenario() -> None:
        w = World(ONDEMAND_DELEGATE_ADMISSION="true")
        for name in ("a", "b", "c"):
            w.kube.add(PODS, jit_pod(name), "alice")
        no_room = Denial(retryable=False, code="not_a_member", detail="Not a member.")
        w.app.selection = Selection(
            ("uid-c", "uid-a", "uid-unknown"),
            (
                WithheldPod("uid-b", no_room),
                WithheldPod("uid-a", Denial(code="outranked")),
            ),
        )
        await w.step()
        assert w.app.offered == [["uid-a", "uid-b", "uid-c"]]
        assert [a.idempotency_key for a in w.app.asks] == ["uid-c", "uid-a"]
        told = w.kube.events(vocab.REASON_ONDEMAND_LEASE_DENIED)
        assert [e["involvedObject"]["name"] for e in told] == ["b"]
        assert "Waiting will not help" in told[0]["message"]
        assert w.leaser.tracks["uid-b"].errors == 1

    run(scenario())


def test_a_failed_selection_grants_every_eligible_candidate() -> None:
    async def scenario() -> None:
        w = World(ONDEMAND_DELEGATE_ADMISSION="true")
        w.kube.add(PODS, jit_pod(), "alice")
        w.app.selection = Transient(TransientReason.SERVER_ERROR, status=503)
        await w.step()
        assert len(w.app.asks) == 1

    run(scenario())


def test_a_candidate_left_gated_is_ungated_so_the_scheduler_can_judge_it() -> None:
    async def scenario() -> None:
        gate = vocab.SANDBOX_SCHEDULING_GATE
        w = World(POD_SCHEDULING_GATE_NAME=gate)
        pod = jit_pod(verdict=False)
        pod["spec"]["schedulingGates"] = [{"name": "other"}, {"name": gate}]
        w.kube.add(PODS, pod, "alice")
        await w.step()
        assert w.pod()["spec"]["schedulingGates"] == [{"name": "other"}]
        assert w.app.asks == []

    run(scenario())


def test_a_lost_patch_answer_keeps_the_lease_for_upkeep_to_settle() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, jit_pod(), "alice")
        w.kube.faults["patch pods"] = ServerError(503, "the answer was lost")
        await w.step()
        assert w.app.cancels == [], "the patch may still land: the lease stays"
        res = model.from_object(w.kube.objects[(GPU_RESERVATIONS.plural, NS, "res-11")])
        assert len(res.holds) == 1
        assert w.leaser.tracks["uid-job"].attempt == 1  # the next ask replays the key

    run(scenario())


def test_runtime_guarantee_none_with_best_effort_off_asks_a_lease_and_says_so() -> None:
    async def scenario() -> None:
        w = World()
        pod = jit_pod()
        pod["metadata"]["annotations"][vocab.RUNTIME_GUARANTEE] = vocab.RUNTIME_GUARANTEE_NONE
        w.kube.add(PODS, pod, "alice")
        for cache in (w.caches.pods, w.caches.reservations):
            await cache.relist()
        await w.admitter.once()  # the queue tells JIT pods their ignored annotations
        assert len(w.kube.events(vocab.REASON_ANNOTATION_IGNORED)) == 1
        await w.step()
        [ask] = w.app.asks
        assert isinstance(ask, LeaseRequest)

    run(scenario())


def test_best_effort_on_asks_a_stub_and_announces_best_effort_admitted() -> None:
    async def scenario() -> None:
        w = World(BEST_EFFORT_ENABLED="true")
        pod = jit_pod()
        pod["metadata"]["annotations"][vocab.RUNTIME_GUARANTEE] = vocab.RUNTIME_GUARANTEE_NONE
        w.kube.add(PODS, pod, "alice")
        await w.step()
        [ask] = w.app.asks
        assert isinstance(ask, BestEffortRequest)
        assert [e["reason"] for e in w.kube.events()] == [vocab.REASON_BEST_EFFORT_ADMITTED]

    run(scenario())


def test_a_pod_admitted_by_the_last_batch_is_not_asked_again_while_the_cache_lags() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, jit_pod(), "alice")
        for cache in (w.caches.pods, w.caches.nodes, w.caches.reservations):
            await cache.relist()
        await w.leaser.once()
        assert [a.idempotency_key for a in w.app.asks] == ["uid-job"]
        # The next batch comes before the pod cache shows the admission patch (its
        # watch lags): the pod still looks like a waiting candidate there.
        assert not w.caches.pods.items["alice/job"].admitted
        await w.leaser.once()
        assert [a.idempotency_key for a in w.app.asks] == ["uid-job"]
        assert w.app.cancels == []
        assert w.leaser.tracks == {}
        await w.caches.pods.relist()  # caught up: nothing is kept about the pod
        await w.step()
        assert w.leaser._placed == set()

    run(scenario())


def admitted_pod(name: str, ago_s: float, w: World) -> dict[str, Any]:
    """A pod admitted ``ago_s`` seconds ago under a lease, still Pending Unschedulable
    (the verdict it had before it carried the toleration)."""
    pod = jit_pod(name)
    at = (w.clock.now() - timedelta(seconds=ago_s)).isoformat()
    pod["metadata"]["annotations"].update({vocab.BOOKING_REFERENCE: "res-5", vocab.ADMITTED_AT: at})
    return pod


def test_a_holder_admitted_moments_ago_does_not_pause_the_class() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, admitted_pod("first", 1.0, w), "alice")
        w.kube.add(PODS, jit_pod(), "alice")
        await w.step()
        assert [a.idempotency_key for a in w.app.asks] == ["uid-job"]

    run(scenario())


def test_a_holder_the_scheduler_had_time_to_retry_pauses_the_class() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, admitted_pod("first", 60.0, w), "alice")
        w.kube.add(PODS, jit_pod(), "alice")
        await w.step()
        assert w.app.asks == []
        assert w.leaser.tracks["uid-job"].held is Held.STUCK_HOLDER

    run(scenario())


def test_the_settle_waits_for_the_schedulers_verdicts_within_its_bound() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, jit_pod(verdict=False), "alice")
        await w.caches.pods.relist()
        settle = asyncio.create_task(w.leaser._settle())
        await asyncio.sleep(0)  # it starts its first sleep now
        for _ in range(3):
            await w.clock.advance(0.1)
        assert not settle.done(), "a waiting pod has no verdict yet"
        pod = w.pod()
        pod["status"]["conditions"] = [UNSCHEDULABLE]
        await w.kube.replace(PODS, "job", pod, "alice")
        await w.caches.pods.relist()
        await w.clock.advance(0.1)  # the verdict was a trigger: one more quiet step
        await w.clock.advance(0.1)
        await asyncio.wait_for(settle, 30)

        w.kube.add(PODS, jit_pod("never", verdict=False), "alice")
        await w.caches.pods.relist()
        settle = asyncio.create_task(w.leaser._settle())
        await asyncio.sleep(0)  # it starts its first sleep now
        for _ in range(round(SETTLE_MAX_S / SETTLE_S) - 1):
            await w.clock.advance(SETTLE_S)
        assert not settle.done()
        await w.clock.advance(SETTLE_S)  # the bound: SETTLE_MAX_S
        await asyncio.wait_for(settle, 30)

    run(scenario())


def test_a_batch_that_asked_says_what_it_did_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, jit_pod("a"), "alice")
        w.kube.add(PODS, jit_pod("b", verdict=False), "alice")  # held: no verdict yet
        with caplog.at_level(logging.INFO, logger="reconciler.ondemand.leaser"):
            await w.step()
            await w.step()  # nothing due: no line
        lines = [fields_of(r) for r in caplog.records if r.getMessage() == "ondemand.batch"]
        assert lines == [
            {
                "batch": 1,
                "due": 2,
                "eligible": 1,
                "asked": 1,
                "admitted": 1,
                "settled_s": 0.0,
                "took_s": 0.0,
            }
        ]

    run(scenario())


def test_an_outage_is_told_once_and_the_ask_follows_the_app_answering_again() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, jit_pod(), "alice")
        w.app.answers = [
            Transient(TransientReason.SERVER_ERROR, "503", status=503),
            Transient(TransientReason.NETWORK, "connection refused"),
        ]
        await w.step()
        told = w.kube.events(vocab.REASON_ONDEMAND_LEASE_DELAYED)
        assert len(told) == 1
        assert told[0]["type"] == "Normal"
        assert "requested again as soon as it answers" in told[0]["message"]
        assert w.leaser.health.unreachable
        await w.clock.advance(300)
        await w.step()  # the same outage: asked again, not told again
        assert len(w.app.asks) == 2
        assert len(w.kube.events(vocab.REASON_ONDEMAND_LEASE_DELAYED)) == 1
        # The reservation poll gets an answer a moment later: the pod is due at once,
        # not at the end of its 2-5 minute retry.
        await w.clock.advance(1)
        w.leaser.health.note(Fetched(()))
        assert w.leaser._delay(60.0) == 0.0
        await w.step()
        assert len(w.app.asks) == 3
        assert w.pod()["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == "res-11"

    run(scenario())


def test_a_new_outage_is_told_again_and_a_malformed_answer_is_no_outage() -> None:
    async def scenario() -> None:
        w = World()
        w.kube.add(PODS, jit_pod(), "alice")
        w.app.answers = [
            Transient(TransientReason.TIMEOUT, "no answer"),
            Transient(TransientReason.MALFORMED, "not JSON"),
            Transient(TransientReason.NETWORK, "connection refused"),
        ]
        await w.step()
        await w.clock.advance(300)
        await w.step()  # an answer, though unreadable: the app is up, nothing told
        assert not w.leaser.health.unreachable
        assert len(w.kube.events(vocab.REASON_ONDEMAND_LEASE_DELAYED)) == 1
        await w.clock.advance(3600)  # past the throttle's restatement of the same words
        await w.step()  # a second outage: told again
        assert len(w.app.asks) == 3
        assert len(w.kube.events(vocab.REASON_ONDEMAND_LEASE_DELAYED)) == 2

    run(scenario())


def test_an_outage_is_not_told_with_denial_events_off() -> None:
    async def scenario() -> None:
        w = World(ONDEMAND_DENIAL_EVENT_ENABLED="false")
        w.kube.add(PODS, jit_pod(), "alice")
        w.app.answers = [Transient(TransientReason.NETWORK, "connection refused")]
        await w.step()
        assert w.leaser.health.unreachable
        assert w.kube.events(vocab.REASON_ONDEMAND_LEASE_DELAYED) == []
        w.leaser.health.note(Fetched(()))
        await w.step()  # still due at once after the answer
        assert len(w.app.asks) == 2

    run(scenario())
