"""A lease's pod that left while no reconciler ran is cancelled ``pod-terminated``
(contract §2.9: the lease's pod finished or was deleted), not ``controller-revoked``
(a grant no pod was ever admitted under): the restarted reconciler learns it from
upkeep dropping the hold that was bound to the pod."""

from __future__ import annotations

from dataclasses import replace

from shared import model, vocab
from shared.appclient import CancelReason
from shared.resources import PODS
from tests.reconciler.test_ondemand import World, jit_pod, run

LEASE = "res-11"


async def admitted_and_bound() -> World:
    """A pod admitted under its lease, its hold bound to it by upkeep."""
    w = World()
    w.kube.add(PODS, jit_pod(), "alice")
    await w.step()
    assert w.pod()["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == LEASE
    await w.caches.keeper.once()
    await w.caches.reservations.relist()
    assert [h.bound for h in w.caches.by_name()[LEASE].holds] == [True]
    return w


def test_a_lease_pod_deleted_while_no_reconciler_ran_is_cancelled_pod_terminated() -> None:
    async def scenario() -> None:
        before = await admitted_and_bound()
        await before.kube.delete(PODS, "job", "alice")  # no reconciler runs meanwhile
        w = World(before.kube)  # the restart
        await w.clock.advance(w.settings.ledger_claim_ttl_s + 60)  # past the orphan grace
        await w.step()
        assert w.app.cancels == [], "its hold still stands: nothing is known yet"
        assert await w.caches.keeper.once() == [LEASE]  # upkeep drops the gone pod's hold
        await w.step()
        assert w.app.cancels == [(11, CancelReason.POD_TERMINATED)]
        await w.step()
        assert len(w.app.cancels) == 1, "cancelled once"

    run(scenario())


def test_only_a_dropped_hold_of_a_pod_the_cache_no_longer_holds_tells() -> None:
    async def scenario() -> None:
        w = await admitted_and_bound()
        keeper = w.leaser.keeper
        lease = w.caches.by_name()[LEASE]
        emptied = replace(lease, holds=())
        assert not keeper.ledger_changed(lease, emptied), "the pod is still cached (moved)"
        assert not keeper.ledger_changed(lease, lease), "no hold dropped"
        assert not keeper.ledger_changed(None, emptied)
        assert not keeper.ledger_changed(lease, None), "the object went, not the pod"
        await w.kube.delete(PODS, "job", "alice")
        await w.caches.pods.relist()
        booking = replace(lease, facts=replace(lease.facts, kind=model.Kind.BOOKING))
        assert not keeper.ledger_changed(booking, replace(booking, holds=()))
        unbound = replace(lease, holds=tuple(replace(h, pod_uid=None) for h in lease.holds))
        assert not keeper.ledger_changed(unbound, emptied), "never bound: never admitted"
        assert keeper.ledger_changed(lease, emptied)

    run(scenario())
