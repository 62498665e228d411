"""Ledger upkeep: bind, drop, expire, add, and DESIGN §3.2's invariants."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from reconciler.base.caches import Caches
from reconciler.base.pods import PodView, project_pod
from reconciler.base.settings import load
from reconciler.base.upkeep import Keeper, stale, uses_by_reservation
from shared import ledger, model, vocab
from shared.clock import ManualClock
from shared.ledger import PodUse
from shared.model import Hold, claim_key
from shared.policy.matching import MatchRules
from shared.resources import GPU_RESERVATIONS
from tests.fakekube import FakeKube
from tests.reconciler.builders import END, NS, START, relisting

NOW = START + timedelta(minutes=10)
TTL = 60.0


def facts(rid: int = 1, gpus: int = 4) -> model.ReservationFacts:
    return model.ReservationFacts(
        rid,
        "alice",
        "a100",
        "A100",
        gpus,
        model.Kind.BOOKING,
        START,
        END,
        model.State.ACTIVE,
        START,
    )


def gpu_pod(name: str, ref: str | None, claim: str | None, gpus: int = 1, **kw: Any) -> PodView:
    notes = {}
    if ref:
        notes[vocab.BOOKING_REFERENCE] = ref
    if claim:
        notes[vocab.ADMISSION_CLAIM] = claim
    raw = {
        "metadata": {
            "name": name,
            "namespace": "alice",
            "uid": f"uid-{name}",
            "labels": {vocab.GPU_CLASS_LABEL: "a100"},
            "annotations": notes,
        },
        "spec": {"containers": [{"resources": {"limits": {vocab.GPU_RESOURCE: str(gpus)}}}]},
        "status": {"phase": kw.get("phase", "Running")},
    }
    view = project_pod(raw, MatchRules())
    assert view is not None
    return view


class World:
    def __init__(self, holds: tuple[Hold, ...] = ()) -> None:
        self.kube = FakeKube()
        self.clock = ManualClock(NOW)
        self.pods: list[PodView] = []
        res = model.GPUReservation(facts(), holds)
        self.kube.add(GPU_RESERVATIONS, model.to_object(res, NS, NOW), NS)
        self.keeper = Keeper(self.kube, NS, self.clock, TTL, self.uses, self.cached, lambda: True)

    def uses(self, name: str) -> list[PodUse]:
        return uses_by_reservation(self.pods).get(name, [])

    def cached(self) -> dict[str, model.GPUReservation]:
        return {
            r.name: r for r in (model.from_object(o) for o in self.kube.items(GPU_RESERVATIONS))
        }

    def holds(self) -> tuple[Hold, ...]:
        return self.cached()["res-1"].holds


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


async def tick(clock: ManualClock, seconds: float, times: int = 1) -> None:
    """Advance the clock one tick at a time, letting the keeper run after each."""
    for _ in range(times):
        await settle()
        await clock.advance(seconds)
        await settle()


def test_binds_a_webhook_hold_to_its_pod_by_claim() -> None:
    w = World((Hold("c1", 2, NOW, None),))
    w.pods = [gpu_pod("p1", "res-1", "c1", gpus=2)]
    assert run(w.keeper.once()) == ["res-1"]
    (hold,) = w.holds()
    assert (hold.claim, hold.pod, hold.pod_uid, hold.gpus) == (claim_key("c1"), "p1", "uid-p1", 2)
    assert run(w.keeper.once()) == []  # nothing more to do: no write


def test_a_touched_pass_leaves_an_unannounced_holds_binding_to_the_announcer() -> None:
    """The announcer binds a new admission's hold in the write that marks it announced:
    a pass on a pod event whose only change would be that binding writes nothing (one
    write per admitted pod saved); the full pass on the tick binds it if nobody did."""
    w = World((Hold("c1", 2, NOW, None),))
    w.pods = [gpu_pod("p1", "res-1", "c1", gpus=2)]
    assert run(w.keeper.once({"res-1"})) == []
    assert w.holds()[0].pod_uid is None
    assert run(w.keeper.once()) == ["res-1"]
    assert w.holds()[0].pod_uid == "uid-p1"


def test_a_touched_pass_binds_an_announced_hold_and_writes_any_other_change() -> None:
    """Only an unannounced hold's binding waits for the announcer: an announced hold
    unbound (a status written by hand), or a binding together with a drop, is written
    at once."""
    w = World((Hold("c1", 2, NOW, None, announced=True),))
    w.pods = [gpu_pod("p1", "res-1", "c1", gpus=2)]
    assert run(w.keeper.once({"res-1"})) == ["res-1"]
    assert w.holds()[0].pod_uid == "uid-p1"
    w = World((Hold("c1", 2, NOW, None), Hold("c2", 1, NOW, "gone", "uid-gone")))
    w.pods = [gpu_pod("p1", "res-1", "c1", gpus=2)]
    assert run(w.keeper.once({"res-1"})) == ["res-1"]
    assert [(h.claim, h.pod_uid) for h in w.holds()] == [(claim_key("c1"), "uid-p1")]


def test_a_pod_carrying_a_key_copied_from_the_ledger_takes_no_hold() -> None:
    """The ledger shows keys; a pod whose annotation is one (copied from a
    GPUReservation anyone may read) matches no hold: its annotation is hashed again."""
    w = World((Hold("c1", 2, NOW, None),))
    w.pods = [gpu_pod("copy", "res-1", claim_key("c1"), gpus=2)]
    run(w.keeper.once())
    held = {h.claim: h.pod_uid for h in w.holds()}
    assert held[claim_key("c1")] is None  # the webhook's hold waits for its own pod
    assert held.get(claim_key(claim_key("c1"))) == "uid-copy"  # adopted as any pod is


def test_a_ledger_written_with_claim_ids_still_binds_the_pod_carrying_one() -> None:
    """A status written before holds kept keys has the claim id itself: it is read as
    its key, so the pod carrying that id is bound, and the write stores the key."""
    w = World()
    obj = w.kube.objects[(GPU_RESERVATIONS.plural, NS, "res-1")]
    legacy = model.hold_to_status(Hold("c1", 2, NOW, None))
    legacy["claim"] = "3f1c2a9e-legacy-claim-id"
    obj["status"]["holds"] = [legacy]
    w.pods = [gpu_pod("p1", "res-1", "3f1c2a9e-legacy-claim-id", gpus=2)]
    assert run(w.keeper.once()) == ["res-1"]
    (hold,) = w.holds()
    assert (hold.claim, hold.pod_uid) == (claim_key("3f1c2a9e-legacy-claim-id"), "uid-p1")
    stored = w.kube.objects[(GPU_RESERVATIONS.plural, NS, "res-1")]["status"]["holds"]
    assert [h["claim"] for h in stored] == [claim_key("3f1c2a9e-legacy-claim-id")]


def test_drops_holds_of_finished_and_deleted_pods() -> None:
    w = World((Hold("c1", 1, NOW, "p1", "uid-p1"), Hold("c2", 1, NOW, "p2", "uid-p2")))
    w.pods = [gpu_pod("p1", "res-1", "c1", phase="Succeeded")]  # p2 deleted
    run(w.keeper.once())
    assert w.holds() == ()


def test_expires_unbound_holds_only_after_the_ttl() -> None:
    w = World(
        (Hold("young", 1, NOW - timedelta(seconds=30)), Hold("old", 1, NOW - timedelta(seconds=61)))
    )
    run(w.keeper.once())
    assert [h.claim for h in w.holds()] == [claim_key("young")]


def test_adds_a_hold_for_an_admitted_pod_without_one() -> None:
    w = World()
    w.pods = [gpu_pod("p1", "res-1", None, gpus=3)]
    run(w.keeper.once())
    (hold,) = w.holds()
    assert (hold.claim, hold.gpus, hold.pod_uid) == (claim_key("pod-uid-p1"), 3, "uid-p1")


def test_never_leaks_for_long_a_hold_without_pod_goes_within_ttl_plus_one_tick() -> None:
    async def scenario() -> None:
        w = World((Hold("orphan", 2, NOW, None),))
        task = asyncio.create_task(w.keeper.run(tick_s=10))
        await tick(w.clock, 10, times=int(TTL / 10))  # up to the TTL: kept
        assert [h.claim for h in w.holds()] == [claim_key("orphan")]
        await tick(w.clock, 10)  # TTL + one tick: gone
        assert w.holds() == ()
        task.cancel()

    run(scenario())


def test_self_healing_every_status_deleted_rebuilds_the_same_ledger_in_one_tick() -> None:
    async def scenario() -> None:
        w = World((Hold("c1", 1, NOW, None), Hold("c2", 2, NOW, None)))
        w.pods = [gpu_pod("p1", "res-1", "c1"), gpu_pod("p2", "res-1", "c2", gpus=2)]
        await w.keeper.once()
        before = {(h.claim, h.gpus, h.pod, h.pod_uid) for h in w.holds()}
        raw = w.kube.objects[(GPU_RESERVATIONS.plural, NS, "res-1")]
        raw["status"] = {}
        task = asyncio.create_task(w.keeper.run(tick_s=5))
        await tick(w.clock, 5)
        assert {(h.claim, h.gpus, h.pod, h.pod_uid) for h in w.holds()} == before
        task.cancel()

    run(scenario())


def test_touch_runs_upkeep_at_once_for_that_reservation() -> None:
    async def scenario() -> None:
        w = World((Hold("c1", 1, NOW, "p1", "uid-p1"),))
        task = asyncio.create_task(w.keeper.run(tick_s=3600))
        await asyncio.sleep(0)
        w.keeper.touch("res-1")  # p1 left
        for _ in range(20):
            await asyncio.sleep(0)
        assert w.holds() == ()
        task.cancel()

    run(scenario())


def test_nothing_happens_before_the_pod_cache_is_synced() -> None:
    w = World((Hold("c1", 1, NOW, "p1", "uid-p1"),))
    w.keeper._ready = lambda: False
    assert run(w.keeper.once()) == []
    assert len(w.holds()) == 1


def test_stale_and_grouping_are_pure() -> None:
    res = model.GPUReservation(facts(), (Hold("c1", 1, NOW, "p1", "uid-p1"),))
    pods = [gpu_pod("p1", "res-1", "c1"), gpu_pod("x", None, None)]
    uses = uses_by_reservation(pods)
    assert list(uses) == ["res-1"]
    assert stale({"res-1": res}, uses, NOW, TTL) == []
    assert stale({"res-1": res}, {}, NOW, TTL) == ["res-1"]
    assert ledger.used(res) == 1


def test_a_ledger_listing_its_holds_in_another_order_than_the_pods_is_not_stale() -> None:
    """Upkeep (the pod index by reference) and the queue pass (the whole pod cache)
    list a booking's pods in different orders: the same holds in another order must
    not read as stale, or the queue pass waits for an upkeep write that never comes."""
    holds = (Hold("c1", 1, NOW, "p1", "uid-p1", True), Hold("c2", 1, NOW, "p2", "uid-p2", True))
    res = model.GPUReservation(facts(), holds)
    pods = [gpu_pod("p2", "res-1", "c2"), gpu_pod("p1", "res-1", "c1")]
    assert stale({"res-1": res}, uses_by_reservation(pods), NOW, TTL) == []
    assert stale({"res-1": res}, uses_by_reservation(pods[:1]), NOW, TTL) == ["res-1"]


def test_a_ledger_change_wakes_upkeep_for_that_reservation() -> None:
    """A pass judged a cached ledger older than a pod's deletion (the hold still
    unbound and young: nothing to do). When the newer ledger arrives — the hold bound
    to the pod that left meanwhile — upkeep must look again at once, not at the tick."""
    settings, _ = load({"RESERVATION_API_URL": "http://app", "RESERVATION_API_KEY": "k"})
    caches = Caches(relisting(FakeKube()), settings, ManualClock(NOW))
    unbound = model.GPUReservation(facts(), (Hold("c1", 1, NOW, "p1"),))
    bound = model.GPUReservation(facts(), (Hold("c1", 1, NOW, "p1", "uid-p1"),))
    for listener in caches.reservations.listeners:
        listener("res-1", None, unbound)
    assert caches.keeper._dirty == {"res-1"}
    caches.keeper._dirty.clear()
    for listener in caches.reservations.listeners:
        listener("res-1", unbound, unbound)  # no ledger change: nothing to do
    assert caches.keeper._dirty == set()
    for listener in caches.reservations.listeners:
        listener("res-1", unbound, bound)
    assert caches.keeper._dirty == {"res-1"}


def test_an_unbound_hold_goes_when_it_expires_not_at_the_next_tick() -> None:
    """A claim whose pod was created and deleted before it was bound: dropped once its
    TTL has passed, without waiting for the (much later) tick."""

    async def scenario() -> None:
        w = World((Hold("orphan", 1, NOW - timedelta(seconds=TTL - 20)),))
        task = asyncio.create_task(w.keeper.run(3600.0))
        await settle()
        assert [h.claim for h in w.holds()] == [claim_key("orphan")]
        await tick(w.clock, 21)
        assert w.holds() == ()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(scenario())


def test_a_hold_bound_during_the_pass_is_not_dropped_as_gone() -> None:
    """Found by the soak (one over-admission of one GPU): a pass starts without pod p5
    in its snapshot; before its write, p5 appears in the cache and the announcer binds
    p5's hold. The write must not drop that bound hold as a pod that left."""
    w = World((Hold("c1", 1, NOW, "p1"),))
    w.pods = [gpu_pod("p1", "res-1", "c1")]

    def admitted_meanwhile() -> None:
        w.pods = [*w.pods, gpu_pod("p5", "res-1", "c5")]
        obj = w.kube.objects[(GPU_RESERVATIONS.plural, NS, "res-1")]
        res = model.from_object(obj)
        bound = Hold("c5", 1, NOW, "p5", "uid-p5", announced=True)
        obj["status"] = model.status_of(model.GPUReservation(res.facts, (*res.holds, bound)), NOW)

    w.kube.before["get"] = admitted_meanwhile
    run(w.keeper.once())
    assert {(h.claim, h.pod_uid) for h in w.holds()} == {
        (claim_key("c1"), "uid-p1"),
        (claim_key("c5"), "uid-p5"),
    }
