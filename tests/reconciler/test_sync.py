"""The sync: plan (pure) and Syncer against an in-memory Kubernetes API."""

from __future__ import annotations

import asyncio
from datetime import date
from typing import Any

from reconciler.base.metrics import Metrics
from reconciler.base.mirroring import facts_from, plan
from reconciler.mirror.sync import Syncer
from shared import model
from shared.clock import ManualClock, utc
from shared.resources import GPU_RESERVATIONS, PODS
from tests.fakekube import FakeKube
from tests.reconciler.builders import A100, END, NS, UNLABELLED, FakeSource, pod, reservation

NOW = utc(2026, 1, 5, 10)
CLASSES = {3: A100, 5: UNLABELLED}


def make(rows=None, now=NOW):
    kube, source, metrics = FakeKube(), FakeSource(rows), Metrics()
    syncer = Syncer(source, kube, NS, ManualClock(now), metrics, lookahead_days=7)
    return syncer, kube, source, metrics


def stored(kube: FakeKube) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in kube.items(GPU_RESERVATIONS, NS)}


# --- facts_from and plan (pure) --------------------------------------------------------


def test_facts_mirror_the_row_with_the_class_map_label() -> None:
    facts = facts_from(reservation(9, gpu_count=2), CLASSES)
    assert facts is not None
    assert (facts.name, facts.owner, facts.gpu_class, facts.gpu_class_name) == (
        "res-9",
        "alice",
        "a100",
        "A100-80",
    )
    assert (facts.gpu_count, facts.group, facts.owner_id) == (2, "lab", 31)


def test_rows_without_a_label_or_owner_are_not_mirrored() -> None:
    unlabelled = reservation(gpu_class_id=5, gpu_class={"id": 5, "name": "L40S"})
    assert facts_from(unlabelled, CLASSES) is None
    assert facts_from(reservation(user=None, user_id=None), CLASSES) is None


def test_embedded_label_is_the_fallback_for_an_unknown_class() -> None:
    facts = facts_from(reservation(), {})
    assert facts is not None
    assert facts.gpu_class == "a100"


def test_unknown_kind_is_protected_as_a_booking() -> None:
    facts = facts_from(reservation(kind="reclaim"), CLASSES)
    assert facts is not None
    assert facts.kind is model.Kind.BOOKING


def _facts(rid=1, **kw) -> model.ReservationFacts:
    f = facts_from(reservation(rid, **kw), CLASSES)
    assert f is not None
    return f


def test_plan_creates_updates_skips_stale_and_deletes_ended() -> None:
    old = _facts(1)
    newer = _facts(1, gpu_count=4, updated_at="2026-01-02T00:00:00Z")
    stale = _facts(2, gpu_count=1, updated_at="2025-12-01T00:00:00Z")
    existing = {
        "res-1": model.GPUReservation(old),
        "res-2": model.GPUReservation(_facts(2)),
        "res-3": model.GPUReservation(_facts(3, end_utc="2026-01-05T09:30:00Z")),
        "res-4": model.GPUReservation(_facts(4, end_utc="2026-01-05T09:30:00Z")),
    }
    phases = {"res-1": "Open", "res-2": "Open", "res-3": "Ended", "res-4": "Open"}
    fetched = [newer, stale, _facts(5), _facts(6, end_utc="2026-01-05T09:00:00Z")]
    decided = plan(fetched, existing, phases, referenced={"res-4"}, now=NOW)
    assert [f.name for f in decided.upserts] == ["res-1", "res-5"]
    assert decided.deletes == ("res-3",)
    assert decided.refresh == ("res-4",)  # referenced, ended, phase still says Open


# --- Syncer ------------------------------------------------------------------------------


def test_first_sync_creates_objects_with_status_for_the_printer_columns() -> None:
    syncer, kube, source, _metrics = make([reservation(1), reservation(2, gpu_class_id=5)])
    assert asyncio.run(syncer.sync_once())
    objs = stored(kube)
    assert set(objs) == {"res-1"}
    assert objs["res-1"]["spec"]["owner"] == "alice"
    assert objs["res-1"]["status"] == {"holds": [], "usedGpus": 0, "phase": "Open"}
    assert source.windows == [(date(2026, 1, 4), date(2026, 1, 12))]


def test_a_first_sync_creates_what_its_list_lacked_without_reading_it_first() -> None:
    syncer, kube, _, _ = make([reservation(1), reservation(2), reservation(3)])
    assert asyncio.run(syncer.sync_once())
    assert set(stored(kube)) == {"res-1", "res-2", "res-3"}
    assert ("get", GPU_RESERVATIONS.plural) not in kube.calls


def test_a_deferring_sync_creates_specs_first_and_writes_status_afterwards() -> None:
    syncer, kube, _, metrics = make([reservation(1), reservation(2)])
    assert asyncio.run(syncer.sync_once(defer_status=True))
    objs = stored(kube)
    assert {n: o["spec"]["owner"] for n, o in objs.items()} == {"res-1": "alice", "res-2": "alice"}
    assert all("status" not in o for o in objs.values())
    assert model.from_object(objs["res-1"]).holds == ()  # read as an empty ledger meanwhile
    assert [c[0] for c in kube.calls].count("replace") == 0
    asyncio.run(syncer.write_deferred_status())
    objs = stored(kube)
    for name in ("res-1", "res-2"):
        assert objs[name]["status"] == {"holds": [], "usedGpus": 0, "phase": "Open"}
    assert [c[0] for c in kube.calls].count("get") == 0  # the create answers are written
    assert metrics.mirror_writes.labels("status")._value.get() == 2
    asyncio.run(syncer.write_deferred_status())  # written once: nothing is left
    assert [c[0] for c in kube.calls].count("replace") == 2


def test_a_deferred_status_never_overwrites_a_claim_written_meanwhile() -> None:
    syncer, kube, _, _ = make([reservation(1)])
    assert asyncio.run(syncer.sync_once(defer_status=True))
    obj = stored(kube)["res-1"]
    obj["status"] = {"holds": [{"claim": "c", "gpus": 1, "at": "2026-01-05T09:59:00Z"}]}
    asyncio.run(kube.replace(GPU_RESERVATIONS, "res-1", obj, NS, "status"))  # a claim
    asyncio.run(syncer.write_deferred_status())
    assert stored(kube)["res-1"]["status"]["holds"][0]["claim"] == "c"


def test_an_ordinary_sync_writes_the_status_of_what_it_creates() -> None:
    syncer, kube, _, _ = make([reservation(1)])
    assert asyncio.run(syncer.sync_once())
    assert stored(kube)["res-1"]["status"]["phase"] == "Open"
    asyncio.run(syncer.write_deferred_status())  # nothing was deferred
    assert [c[0] for c in kube.calls].count("replace") == 1


def test_a_mirror_created_meanwhile_is_upserted_not_failed() -> None:
    syncer, kube, _, _ = make([reservation(1, gpu_count=4)])

    def racing_create() -> None:
        other = facts_from(reservation(1, gpu_count=2), CLASSES)
        assert other is not None
        kube.add(GPU_RESERVATIONS, model.to_object(model.GPUReservation(other), NS, NOW), NS)

    kube.before["create"] = racing_create
    assert asyncio.run(syncer.sync_once())
    assert stored(kube)["res-1"]["spec"]["gpuCount"] == 4


def test_unchanged_objects_are_not_written_again() -> None:
    syncer, kube, _, _ = make([reservation(1)])
    asyncio.run(syncer.sync_once())
    writes_before = [c for c in kube.calls if c[0] in {"create", "replace", "delete"}]
    asyncio.run(syncer.sync_once())
    writes_after = [c for c in kube.calls if c[0] in {"create", "replace", "delete"}]
    assert writes_after == writes_before


def test_a_stale_used_total_is_refreshed_from_the_holds_keeping_the_ledger_token() -> None:
    # Claims and drops race without seeing each other (the ledger protocol), so the
    # display total one wrote may be overtaken; the sync's status refresh settles it.
    syncer, kube, _, _ = make([reservation(1)])
    asyncio.run(syncer.sync_once())
    obj = stored(kube)["res-1"]
    obj["status"]["holds"] = [{"claim": "c", "gpus": 2, "at": "2026-01-05T09:30:00Z"}]
    obj["status"]["usedGpus"] = 5
    obj["status"]["ledgerToken"] = "t-1"
    kube.add(GPU_RESERVATIONS, obj, NS)
    asyncio.run(syncer.sync_once())
    after = stored(kube)["res-1"]["status"]
    assert (after["usedGpus"], after["ledgerToken"], len(after["holds"])) == (2, "t-1", 1)
    writes = [c for c in kube.calls if c[0] == "replace"]
    asyncio.run(syncer.sync_once())
    assert [c for c in kube.calls if c[0] == "replace"] == writes  # settled: no more writes


def test_cancellation_marks_the_object_cancelled_and_keeps_the_ledger() -> None:
    syncer, kube, source, _ = make([reservation(1)])
    asyncio.run(syncer.sync_once())
    obj = stored(kube)["res-1"]
    obj["status"]["holds"] = [{"claim": "c", "gpus": 2, "at": "2026-01-05T09:30:00Z"}]
    kube.add(GPU_RESERVATIONS, obj, NS)
    source.rows = [
        reservation(
            1, status="cancelled", cancel_reason="no-show", updated_at="2026-01-05T09:40:00Z"
        )
    ]
    asyncio.run(syncer.sync_once())
    after = stored(kube)["res-1"]
    assert after["spec"]["state"] == "cancelled"
    assert after["spec"]["cancelReason"] == "no-show"
    assert after["status"]["phase"] == "Cancelled"
    assert after["status"]["holds"][0]["claim"] == model.claim_key("c")


def test_a_mirror_never_moves_backwards() -> None:
    syncer, kube, source, _ = make([reservation(1, gpu_count=4, updated_at="2026-01-03T00:00:00Z")])
    asyncio.run(syncer.sync_once())
    source.rows = [reservation(1, gpu_count=8, updated_at="2026-01-02T00:00:00Z")]
    asyncio.run(syncer.sync_once())
    assert stored(kube)["res-1"]["spec"]["gpuCount"] == 4


def test_ended_objects_are_deleted_unless_a_live_pod_references_them() -> None:
    syncer, kube, _source, _ = make([reservation(1), reservation(2)])
    asyncio.run(syncer.sync_once())
    kube.add(PODS, pod("runner", "res-2"), "alice")
    kube.add(PODS, pod("done", "res-1", phase="Succeeded"), "alice")
    syncer.clock = ManualClock(END)
    asyncio.run(syncer.sync_once())
    objs = stored(kube)
    assert set(objs) == {"res-2"}
    assert objs["res-2"]["status"]["phase"] == "Ended"


def test_a_pod_whose_class_label_was_removed_still_keeps_its_ended_reservation() -> None:
    syncer, kube, _source, _ = make([reservation(1)])
    asyncio.run(syncer.sync_once())
    unlabelled = pod("runner", "res-1")
    del unlabelled["metadata"]["labels"]
    kube.add(PODS, unlabelled, "alice")
    syncer.clock = ManualClock(END)
    asyncio.run(syncer.sync_once())
    assert set(stored(kube)) == {"res-1"}


def test_a_synced_pod_cache_answers_for_the_pods_and_nothing_lists_them() -> None:
    """The leader's pod cache knows the live references: a full sync then lists no pod
    (a cluster-wide LIST every poll), and keeps exactly what the cache says is used."""
    known: set[str] | None = {"res-2"}
    kube, source, metrics = FakeKube(), FakeSource([reservation(1), reservation(2)]), Metrics()
    syncer = Syncer(
        source, kube, NS, ManualClock(NOW), metrics, lookahead_days=7, references=lambda: known
    )
    asyncio.run(syncer.sync_once())
    syncer.clock = ManualClock(END)
    asyncio.run(syncer.sync_once())
    assert set(stored(kube)) == {"res-2"}  # kept on the cache's word: no pod is stored
    assert ("list", PODS.plural) not in kube.calls
    known = None  # the cache lost its LIST: the pods are listed, and none uses res-2
    asyncio.run(syncer.sync_once())
    assert ("list", PODS.plural) in kube.calls
    assert set(stored(kube)) == set()


def test_a_failed_fetch_changes_nothing_and_is_counted() -> None:
    syncer, kube, source, metrics = make([reservation(1)])
    asyncio.run(syncer.sync_once())
    before = stored(kube)
    source.fail = True
    syncer.clock = ManualClock(END)  # would otherwise delete res-1
    assert not asyncio.run(syncer.sync_once())
    assert stored(kube) == before
    text = metrics.render().decode()
    assert 'gpu_reservation_reservation_fetches_total{outcome="failed"} 1.0' in text
    assert "gpu_reservation_reservation_fetch_consecutive_failures 1.0" in text
    source.fail = False
    assert asyncio.run(syncer.sync_once())
    assert "gpu_reservation_reservation_fetch_consecutive_failures 0.0" in metrics.render().decode()


def test_kubernetes_outage_counts_as_a_failed_pass() -> None:
    syncer, kube, _, _ = make([reservation(1)])
    kube.down = True
    assert not asyncio.run(syncer.sync_once())


def test_class_fetch_failure_keeps_the_previous_map() -> None:
    syncer, _, source, _ = make([])
    asyncio.run(syncer.refresh_classes())
    source.fail = True
    asyncio.run(syncer.refresh_classes())
    assert set(syncer.classes) == {3, 5}
