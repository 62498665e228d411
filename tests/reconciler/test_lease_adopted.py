"""A lease's pod adopted onto a booking past its guarantee (R26) costs the lease no
cancel: neither ``superseded`` (the merge's reason, R25 and contract §2.9) nor
``controller-revoked`` (a grant never used). A pod past its lease's guarantee means
the lease has ended — its guarantee chain ends no earlier than the lease — and the
teardown and orphan rules act only on active, open leases (docs/developer/ondemand.md)."""

from __future__ import annotations

from datetime import timedelta

from reconciler.admission.relink import Relinker
from shared import model, vocab
from shared.policy.matching import MatchRules
from shared.resources import GPU_RESERVATIONS, PODS
from tests.reconciler.builders import NS
from tests.reconciler.test_ondemand import World, jit_pod, run
from tests.reconciler.upholdkit import Emitter, facts

LEASE = "res-11"


def test_a_lease_pod_adopted_past_its_guarantee_cancels_nothing() -> None:
    async def scenario() -> None:
        w = World(ONDEMAND_MERGE_ENABLED="false")
        w.kube.add(PODS, jit_pod(), "alice")
        await w.step()
        assert w.pod()["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == LEASE
        running = w.pod()
        running["spec"]["nodeName"] = "a100-r1"
        running["status"] = {"phase": "Running"}
        w.kube.add(PODS, running, "alice")
        await w.caches.keeper.once()  # the lease's hold is bound to the pod
        await w.step()
        lease = w.caches.by_name()[LEASE].facts
        booking = facts(40, lease.end + timedelta(minutes=5), lease.end + timedelta(hours=2))
        booking_obj = model.to_object(model.GPUReservation(booking), NS, w.clock.now())
        w.kube.add(GPU_RESERVATIONS, booking_obj, NS)
        await w.clock.advance((booking.start - w.clock.now()).total_seconds() + 60)
        await w.step()
        relinker = Relinker(
            w.kube,
            NS,
            w.clock,
            Emitter(w.kube),
            lambda: w.caches.pods.items,
            w.caches.by_name,
            lambda: True,
            rules=MatchRules(),
            enabled=True,
            zone=None,
        )
        assert await relinker.adopt_overstays() == 1
        assert w.pod()["metadata"]["annotations"][vocab.BOOKING_REFERENCE] == "res-40"
        await w.caches.keeper.once()
        await w.step()
        await w.clock.advance(w.settings.ledger_claim_ttl_s + 60)  # past the orphan grace
        await w.step()
        assert w.app.cancels == []

    run(scenario())
