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


def one_loop_reconciler() -> tuple[Reconciler, ManualClock]:
    """A replica on a fake API server whose leader runs one loop that waits forever."""
    kube, clock = FakeKube(), ManualClock(NOW)
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


def test_each_leader_term_tells_the_announcer_when_it_began() -> None:
    """The announcer reads back only pods admitted before its term began: the term's
    start is set when leadership is won, and again at a later term."""

    async def scenario() -> None:
        r, clock = one_loop_reconciler()
        assert r.announcer.since is None
        for term in range(2):
            r._on_leadership(True)
            for _ in range(50):
                await asyncio.sleep(0)
            assert r.announcer.since == NOW + timedelta(minutes=term)
            r._on_leadership(False)
            for _ in range(20):
                await asyncio.sleep(0)
            await clock.advance(60)
        await r.stop()

    asyncio.run(scenario())
