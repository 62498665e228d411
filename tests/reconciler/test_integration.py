"""The real reconciler process against the sandbox's Kubernetes and app emulators.

Each test starts the kube, cluster and app components and runs one or two
``python -m reconciler`` replicas as a cluster runs them: the chart's release, its
reconciler Deployment's pods run by the process kubelet (``sandbox.release_replicas``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import shutil
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox.release_replicas import ReconcilerPod, Reconcilers
from sandbox.runner import SandboxContext
from shared import ledger, model, vocab
from shared.clock import Clock
from shared.errors import NotFound
from shared.gateway import Gateway
from shared.resources import GPU_RESERVATIONS, LEASES, PODS
from tests.sandboxkit import book, emulators

#: The in-process emulators' uvicorn servers may drop a keep-alive transport of a
#: killed client without closing it at shutdown (teardown noise, not a product bug).
EMULATOR_TEARDOWN_NOISE = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
_log = logging.getLogger(__name__)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(90), *EMULATOR_TEARDOWN_NOISE]


def kubectl_sandbox_marks(timeout_s: int) -> list[pytest.MarkDecorator]:
    """The ``pytestmark`` of a sandbox scenario driven with the real kubectl: slow,
    bounded by ``timeout_s``, skipped where kubectl is not installed."""
    return [
        pytest.mark.kubectl,
        pytest.mark.slow,
        pytest.mark.timeout(timeout_s),
        pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
        *EMULATOR_TEARDOWN_NOISE,
    ]


class World:
    def __init__(
        self,
        ctx: SandboxContext,
        gateway: Gateway,
        http: httpx.AsyncClient,
        webhook_replicas: int | None = None,
    ) -> None:
        self.ctx, self.gateway, self.http = ctx, gateway, http
        self.reconcilers = Reconcilers(ctx, webhook_replicas)

    @property
    def app(self) -> str:
        return self.ctx.endpoints["app"]

    @property
    def replicas(self) -> list[ReconcilerPod]:
        return self.reconcilers.pods

    async def replica(self, label: str, push: bool = True, **env: str) -> ReconcilerPod:
        """One more pod of the chart's reconciler Deployment, its environment ``env``
        (``reconciler.extraEnv``: the same for every replica of a test); ``push``: the
        app emulator pushes its changes to it."""
        return await self.reconcilers.add(label, env, push)

    async def book(
        self, gpus: int = 2, start: str = "+0s", end: str = "+1h", gpu_class: str = "a100"
    ) -> int:
        return await book(self.http, self.app, gpus=gpus, start=start, end=end, gpu_class=gpu_class)

    async def cancel(self, rid: int) -> None:
        answer = await self.http.post(f"{self.app}/_sandbox/bookings/{rid}/cancel")
        assert answer.status_code == 200, answer.text

    async def get(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.gateway.get(GPU_RESERVATIONS, name, self.ctx.namespace)
        except NotFound:
            return None


#: How long a wait on a condition may take before the test fails (wall seconds). It is a
#: liveness bound, not a speed figure: CI runs two pytest workers on two cores shared
#: with other work, where a step that takes 0.3 s on a quiet machine can take ten times
#: as long. Latency figures are measured by the benchmarks (bench/), never by a test.
PATIENCE_S = 30.0


async def eventually(check: Callable[[], Awaitable[Any]], within_s: float) -> Any:
    """Poll ``check`` until it returns a truthy value, and return it.

    ``within_s`` is what the step takes on a quiet machine: a wait longer than that is
    logged (the captured log of a failing test shows where its time went), and the test
    fails only when the condition still does not hold after ``max(within_s,
    PATIENCE_S)``."""
    began = time.monotonic()
    patience = max(within_s, PATIENCE_S)
    while True:
        value = await check()
        waited = time.monotonic() - began
        if value:
            if waited > within_s:
                _log.info("slow wait: %.1f s for a step expected within %g s", waited, within_s)
            return value
        assert waited < patience, f"not within {patience:g} s (expected within {within_s:g} s)"
        await asyncio.sleep(0.05)


@asynccontextmanager
async def world(
    tmp_path: Path,
    clock: Clock | None = None,
    components: tuple[str, ...] = ("kube", "app"),
    scenario: dict[str, Any] | None = None,
    webhook_replicas: int = 1,
) -> AsyncIterator[World]:
    """The emulators (``tests.sandboxkit.emulators``) with the cluster (the process
    kubelet runs the chart's pods); the caller adds reconciler replicas, which install
    the chart's release. ``"webhook"`` in ``components``: the release's webhook runs with
    ``webhook_replicas`` pods; otherwise its Deployment is scaled to 0."""
    wanted = (*(c for c in components if c != "webhook"), "cluster")
    kit = emulators(
        tmp_path,
        tuple(dict.fromkeys(wanted)),
        clock=clock,
        scenario=scenario,
        kubeconfig="reconciler.kubeconfig",
    )
    async with kit as e:
        webhook = webhook_replicas if "webhook" in components else None
        w = World(e.ctx, e.gateway, e.http, webhook)
        try:
            yield w
        finally:
            await w.reconcilers.close()


async def leading(proc: ReconcilerPod) -> None:
    """Wait until the replica leads and its loops run (``leader.loops_started``)."""

    async def started() -> bool:
        return any(e.get("event") == "leader.loops_started" for e in proc.logs())

    await eventually(started, 5)


def phase_of(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else (obj.get("status") or {}).get("phase")


def test_booking_and_cancellation_arrive_by_push(tmp_path: Path) -> None:
    """Issue acceptance: a booking and its cancellation reach the mirror by the app's
    push, with no fetch in between (the poll is an hour apart). The "within 2 s" figure
    is measured by ``python -m bench push`` (bench/bench_push.py), not here."""

    async def scenario() -> None:
        async with world(tmp_path) as w:
            proc = await w.replica("r0", RESERVATION_FETCH_INTERVAL="3600")
            fetched = await eventually(lambda: _fetches(w, proc), 10)  # the startup sync's
            rid = await w.book(gpus=2)
            obj = await eventually(lambda: w.get(model.reference(rid)), 2.0)
            await eventually(lambda: _phase_is(w, rid, "Open"), 2.0)
            obj = await w.get(model.reference(rid))
            assert obj is not None
            spec, status = obj["spec"], obj["status"]
            assert (spec["owner"], spec["gpuClass"], spec["gpuCount"]) == ("alice", "a100", 2)
            assert spec["start"]
            assert spec["end"]
            assert (status["usedGpus"], status["phase"]) == (0, "Open")
            await w.cancel(rid)
            await eventually(lambda: _phase_is(w, rid, "Cancelled"), 2.0)
            assert await _fetches(w, proc) == fetched, "a fetch, not a push, brought them"
            assert [e for e in proc.logs() if e.get("event") == "push.applied"]

    asyncio.run(scenario())


async def _fetches(w: World, proc: ReconcilerPod) -> float:
    """The replica's full reservation fetches so far (every outcome)."""
    text = (await w.http.get(f"{proc.url}/metrics")).text
    prefix = "gpu_reservation_reservation_fetches_total{"
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def test_without_pushes_the_poll_brings_both(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with world(tmp_path) as w:
            await w.replica("r0", push=False, RESERVATION_FETCH_INTERVAL="1")
            rid = await w.book(gpus=1)
            await eventually(lambda: _phase_is(w, rid, "Open"), 3.0)
            await w.cancel(rid)
            await eventually(lambda: _phase_is(w, rid, "Cancelled"), 3.0)

    asyncio.run(scenario())


async def _phase_is(w: World, rid: int, phase: str) -> bool:
    return phase_of(await w.get(model.reference(rid))) == phase


def test_concurrent_claimers_never_exceed_the_budget(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with world(tmp_path) as w:
            await w.replica("r0")
            rid = await w.book(gpus=8)
            name = model.reference(rid)
            await eventually(lambda: _phase_is(w, rid, "Open"), 3.0)
            kubeconfig = str(tmp_path / "reconciler.kubeconfig")
            results: list[tuple[int, ledger.ClaimResult]] = []
            lock = threading.Lock()

            def claimer(seed: int) -> None:
                asyncio.run(_claims(kubeconfig, w.ctx.namespace, name, seed, results, lock))

            threads = [threading.Thread(target=claimer, args=(s,)) for s in range(3)]
            for thread in threads:
                thread.start()
            for thread in threads:
                await asyncio.to_thread(thread.join)
            assert len(results) == 200
            final = model.from_object(await w.gateway.get(GPU_RESERVATIONS, name, w.ctx.namespace))
            assert ledger.used(final) <= 8
            refused = [(g, r) for g, r in results if not r.admitted]
            assert refused, "the reservation never filled up"
            for gpus, result in refused:
                assert result.reason == "full", result
                assert result.reservation is not None
                assert ledger.used(result.reservation) + gpus > 8

    asyncio.run(scenario())


async def _claims(kubeconfig, namespace, name, seed, results, lock) -> None:
    rng = random.Random(seed)
    gateway = Gateway.from_kubeconfig(kubeconfig)
    mine: list[str] = []
    count = 67 if seed < 2 else 66
    try:
        for _ in range(count):
            gpus = rng.randint(1, 3)
            result = await ledger.claim(
                gateway,
                namespace,
                name,
                gpus,
                pod=None,
                now=datetime.now(UTC),
                deadline=time.monotonic() + 10,
            )
            with lock:
                results.append((gpus, result))
            if result.admitted and result.claim:
                mine.append(result.claim)
            if mine and rng.random() < 0.3:
                drop = {mine.pop(0)}
                await ledger.amend(
                    gateway,
                    namespace,
                    name,
                    functools.partial(_drop, gone=drop),
                    now=datetime.now(UTC),
                    deadline=time.monotonic() + 10,
                )
    finally:
        gateway.close()


def test_two_replicas_one_leads_and_the_other_takes_over(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with world(tmp_path) as w:
            a = await w.replica("ra")
            b = await w.replica("rb")

            async def leaders() -> list[str]:
                names = []
                for proc in (a, b):
                    if proc.running:
                        health = (await w.http.get(f"{proc.url}/health")).json()
                        if health["leader"]:
                            names.append(proc.name)
                return names

            first = await eventually(leaders, 6.0)
            assert len(first) == 1
            token = {"Authorization": f"Bearer {w.ctx.inbound_token}"}
            for proc in (a, b):
                assert (await w.http.get(f"{proc.url}/health")).status_code == 200
                push = await w.http.post(
                    f"{proc.url}/api/reservations/push", json={"reservations": []}, headers=token
                )
                assert push.status_code == 200
            leader, standby = (a, b) if first == [a.name] else (b, a)
            # Killed and gone (its pod removed without a shutdown): the Lease is left
            # to lapse. A leader the kubelet restarts keeps its pod's name and so its
            # Lease (``test_a_crashed_leader_restarts_and_keeps_its_lease``).
            await leader.kill()
            # Lease (4 s) plus one renew period (1 s) on a quiet machine; the bound itself
            # is checked on a virtual clock (tests/reconciler/test_leader.py).
            await eventually(lambda: _is_leader(w, standby), 4.0 + 1.5)

    asyncio.run(scenario())


def test_a_crashed_leader_restarts_and_keeps_its_lease(tmp_path: Path) -> None:
    """A leader SIGKILLed is restarted by the kubelet at once (its first restart has no
    back-off): the same pod, so the same identity, takes its own Lease back without
    waiting for it to lapse, and the pod shows the restart."""

    async def scenario() -> None:
        async with world(tmp_path) as w:
            proc = await w.replica("r0")
            await eventually(lambda: _is_leader(w, proc), 6.0)
            before = proc.pid
            lease = await w.gateway.get(LEASES, vocab.LEADER_LEASE_NAME, w.ctx.namespace)
            transitions = lease["spec"].get("leaseTransitions")
            proc.signal(signal.SIGKILL)

            async def restarted() -> bool:
                return proc.running and proc.pid != before

            await eventually(restarted, 5.0)

            async def leads_again() -> bool:
                with contextlib.suppress(httpx.HTTPError):  # until it listens again
                    return await _is_leader(w, proc)
                return False

            await eventually(leads_again, 5.0)
            lease = await w.gateway.get(LEASES, vocab.LEADER_LEASE_NAME, w.ctx.namespace)
            assert lease["spec"]["holderIdentity"] == proc.name
            assert lease["spec"].get("leaseTransitions") == transitions, "not a new holder"
            pod = await w.gateway.get(PODS, proc.name, w.ctx.namespace)
            status = pod["status"]["containerStatuses"][0]
            assert status["restartCount"] == 1
            assert status["lastState"]["terminated"]["exitCode"] == 137

    asyncio.run(scenario())


async def _is_leader(w: World, proc: ReconcilerPod) -> bool:
    return bool((await w.http.get(f"{proc.url}/health")).json()["leader"])


def test_app_outage_leaves_the_mirror_untouched_and_is_visible(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with world(tmp_path) as w:
            proc = await w.replica("r0", push=False, RESERVATION_FETCH_INTERVAL="1")
            rid = await w.book(gpus=1)
            await eventually(lambda: _phase_is(w, rid, "Open"), 3.0)
            # The pass that opened it may still be writing other reservations (and
            # upkeep their status): compare against the mirror once it has settled.
            before = await _settled_mirror(w, quiet_s=2.5)
            for fault in ({"path": "/api/reservations", "status": 503, "count": None},):
                await w.http.post(f"{w.app}/_sandbox/faults", json=fault)
            await w.cancel(rid)  # a change the outage hides
            # A failed fetch takes three page attempts (pauses 1 s and 2 s) before it counts.
            await eventually(lambda: _metric(w, proc, "fetch_consecutive_failures", 2.0), 12.0)
            after = (await w.gateway.list_all(GPU_RESERVATIONS, w.ctx.namespace)).items
            assert _versions(after) == _versions(before)
            assert any(e.get("event") == "fetch.failed" for e in proc.logs())
            await w.http.delete(f"{w.app}/_sandbox/faults")
            await eventually(lambda: _phase_is(w, rid, "Cancelled"), 3.0)
            await eventually(
                lambda: _metric(w, proc, "fetch_consecutive_failures", 0.0, eq=True), 3.0
            )

    asyncio.run(scenario())


async def _metric(w: World, proc: ReconcilerPod, name: str, value: float, eq: bool = False) -> bool:
    text = (await w.http.get(f"{proc.url}/metrics")).text
    for line in text.splitlines():
        if line.startswith(f"gpu_reservation_reservation_{name} "):
            got = float(line.split()[1])
            return got == value if eq else got >= value
    return False


async def _settled_mirror(w: World, quiet_s: float, within_s: float = 15.0) -> list[dict[str, Any]]:
    """The GPUReservations once no resourceVersion changed for ``quiet_s`` seconds."""
    deadline = time.monotonic() + within_s
    items = (await w.gateway.list_all(GPU_RESERVATIONS, w.ctx.namespace)).items
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet_s)
        again = (await w.gateway.list_all(GPU_RESERVATIONS, w.ctx.namespace)).items
        if _versions(again) == _versions(items):
            return again
        items = again
    raise AssertionError(f"the mirror kept changing for {within_s} s")


def _versions(items: list[dict[str, Any]]) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in items}


def _drop(res: model.GPUReservation, gone: set[str]) -> model.GPUReservation:
    return ledger.drop(res, gone)


def _gpu_pod(name: str, ref: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "alice",
            "labels": {vocab.GPU_CLASS_LABEL: "a100"},
            "annotations": {vocab.BOOKING_REFERENCE: ref},
        },
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {vocab.GPU_RESOURCE: "1"}}}
            ]
        },
    }


def test_ledger_upkeep_follows_pods_through_the_watch(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with world(tmp_path) as w:
            await w.replica("r0", LEADER_ELECTION_ENABLED="false")
            rid = await w.book(gpus=2)
            name = model.reference(rid)
            await eventually(lambda: _phase_is(w, rid, "Open"), 3.0)
            pod = (await w.gateway.create(PODS, _gpu_pod("p1", name), "alice")).body
            uid = pod["metadata"]["uid"]

            async def holds() -> list[tuple[str | None, int]]:
                obj = await w.get(name)
                assert obj is not None
                return [(h.pod_uid, h.gpus) for h in model.from_object(obj).holds]

            await eventually(lambda: _equals(holds, [(uid, 1)]), 5.0)  # added for the pod
            await w.gateway.delete(PODS, "p1", "alice", grace_period_s=0)
            await eventually(lambda: _equals(holds, []), 5.0)  # dropped when it left

    asyncio.run(scenario())


async def _equals(read: Callable[[], Awaitable[Any]], want: Any) -> bool:
    return bool(await read() == want)
