"""Review: a replica that leads again must not act on the caches of its previous term."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from reconciler.base.settings import load
from reconciler.process import Reconciler
from shared import model, vocab
from shared.clock import ManualClock
from shared.model import Hold
from shared.resources import GPU_RESERVATIONS, PODS
from tests.fakekube import FakeKube
from tests.reconciler.builders import END, NS, START, FakeSource, reservation
from tests.reconciler.upholdkit import raw_pod

NOW = START + timedelta(hours=1)


def gpu_pod(name: str, claim: str) -> dict[str, object]:
    return {
        "metadata": {
            "name": name,
            "namespace": "alice",
            "uid": f"uid-{name}",
            "labels": {vocab.GPU_CLASS_LABEL: "a100"},
            "annotations": {vocab.BOOKING_REFERENCE: "res-1", vocab.ADMISSION_CLAIM: claim},
        },
        "spec": {"containers": [{"resources": {"limits": {vocab.GPU_RESOURCE: "1"}}}]},
        "status": {"phase": "Running"},
    }


def test_upkeep_of_a_new_term_waits_for_a_fresh_list() -> None:
    async def scenario() -> None:
        kube, clock = FakeKube(), ManualClock(NOW)
        env = {"RESERVATION_API_URL": "http://a", "RESERVATION_API_KEY": "k", "POD_NAMESPACE": NS}
        settings, _ = load(env)
        r = Reconciler(settings, kube, FakeSource(), clock)  # type: ignore[arg-type]
        f = model.ReservationFacts(
            1, "alice", "a100", "A100", 2, model.Kind.BOOKING, START, END,
            model.State.ACTIVE, START,
        )  # fmt: skip
        # First term: a claim whose pod is still being created, and the caches filled.
        pending = model.GPUReservation(f, (Hold("c-x", 1, NOW, "x", None),))
        kube.add(GPU_RESERVATIONS, model.to_object(pending, NS, NOW), NS)
        await r.caches.pods.relist()
        await r.caches.reservations.relist()
        await r._stop_leading()  # leadership lost
        # Meanwhile another leader ran: c-x expired, pod q was admitted, its hold bound.
        kube.add(PODS, gpu_pod("q", "c-q"), "alice")
        bound = model.GPUReservation(f, (Hold("c-q", 1, NOW, "q", "uid-q", True),))
        obj = kube.objects[(GPU_RESERVATIONS.plural, NS, "res-1")]
        obj["status"] = model.to_object(bound, NS, NOW)["status"]
        await clock.advance(3600)
        # A new term: nothing may act before its own LIST.
        assert not r.caches.ready()
        assert await r.caches.keeper.once() == []
        assert await r.admitter.once() == []
        held = model.from_object(kube.objects[(GPU_RESERVATIONS.plural, NS, "res-1")])
        assert [h.claim for h in held.holds] == [model.claim_key("c-q")]

    asyncio.run(scenario())


def one_loop_reconciler(kube: FakeKube | None = None) -> tuple[Reconciler, ManualClock]:
    """A replica on a fake API server (``kube``, or a new one) whose leader runs one
    loop that waits forever."""
    kube, clock = kube or FakeKube(), ManualClock(NOW)
    env = {"RESERVATION_API_URL": "http://a", "RESERVATION_API_KEY": "k", "POD_NAMESPACE": NS}
    settings, _ = load(env)
    r = Reconciler(settings, kube, FakeSource(), clock)  # type: ignore[arg-type]
    forever = asyncio.Event()

    async def loop() -> None:
        await forever.wait()

    r.leader_loops = lambda: [("only-loop", loop)]  # type: ignore[method-assign]
    return r, clock


def test_leadership_lost_and_regained_at_once_runs_the_loops() -> None:
    async def scenario() -> None:
        r, _ = one_loop_reconciler()
        r._on_leadership(True)
        for _ in range(20):
            await asyncio.sleep(0)
        assert r.tasks.running() == ["only-loop"]
        r._on_leadership(False)
        r._on_leadership(True)  # e.g. a 409 on renew, then the next look renews
        for _ in range(20):
            await asyncio.sleep(0)
        assert r.tasks.running() == ["only-loop"]
        r._on_leadership(False)
        for _ in range(20):
            await asyncio.sleep(0)
        assert r.tasks.running() == []
        await r.stop()

    asyncio.run(scenario())


def test_the_loops_start_on_the_startup_specs_and_their_status_follows() -> None:
    """Ready (the loops run) once every mirror's spec exists; the status of what the
    startup sync created (phase, an empty ledger) is written after the loops started."""

    async def scenario() -> None:
        kube, clock = FakeKube(), ManualClock(NOW)
        env = {"RESERVATION_API_URL": "http://a", "RESERVATION_API_KEY": "k", "POD_NAMESPACE": NS}
        settings, _ = load(env)
        source = FakeSource([reservation(1), reservation(2)])
        r = Reconciler(settings, kube, source, clock)  # type: ignore[arg-type]
        seen_at_start: list[dict[str, Any]] = []
        forever = asyncio.Event()

        async def loop() -> None:
            seen_at_start.extend(kube.items(GPU_RESERVATIONS, NS))
            await forever.wait()

        r.leader_loops = lambda: [("only-loop", loop)]  # type: ignore[method-assign]
        r._on_leadership(True)
        for _ in range(200):
            await asyncio.sleep(0)
            done = kube.items(GPU_RESERVATIONS, NS)
            if seen_at_start and all("status" in o for o in done):
                break
        assert sorted(o["metadata"]["name"] for o in seen_at_start) == ["res-1", "res-2"]
        assert all("status" not in o for o in seen_at_start)
        assert [o["status"]["phase"] for o in kube.items(GPU_RESERVATIONS, NS)] == ["Open"] * 2
        await r.stop()

    asyncio.run(scenario())


def listed(r: Reconciler) -> frozenset[str] | None:
    return r.announcer.listed


def test_each_leader_term_reads_back_only_the_pods_of_its_first_list() -> None:
    """An earlier leader may have announced only the pods the term's first LIST holds:
    each term forgets the last one's list when it begins and takes its own."""

    async def scenario() -> None:
        kube = FakeKube()
        r, _ = one_loop_reconciler(kube)
        uids: set[str] = set()
        for term in range(2):
            kube.add(PODS, raw_pod(f"p{term}", "res-1"), "alice")
            uids.add(f"uid-p{term}")
            r._on_leadership(True)
            for _ in range(50):
                await asyncio.sleep(0)
            assert listed(r) is None  # begun, not listed yet: every pod read back
            await r.caches.pods.relist()
            assert listed(r) == frozenset(uids)
            kube.add(PODS, raw_pod(f"new{term}", "res-1"), "alice")
            await r.caches.pods.relist()  # a later LIST of the term: a pod made since
            assert listed(r) == frozenset(uids)
            uids.add(f"uid-new{term}")  # in the next term's first LIST
            r._on_leadership(False)
            for _ in range(20):
                await asyncio.sleep(0)
        await r.stop()

    asyncio.run(scenario())
