"""Re-linking overstaying pods onto a new booking of their owner (R26, R40)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from reconciler.admission.adoption import Cause, overstaying, target
from reconciler.admission.relink import frees_room
from shared import vocab
from shared.clock import format_utc
from shared.model import claim_key
from tests.reconciler.builders import START
from tests.reconciler.upholdkit import H, World, facts, raw_pod, run

#: The first booking ended an hour ago; the new one opened 10 minutes ago.
NOW = START + 2 * H + timedelta(minutes=10)
ADMITTED = {vocab.ADMITTED_AT: format_utc(START)}


def overstay_world(new_gpus: int = 2, pods: int = 1, adoption: bool = True) -> World:
    w = World(NOW, adoption=adoption)
    w.book(facts(1, START, START + H, gpus=4))
    w.book(facts(2, START + 2 * H, START + 3 * H, gpus=new_gpus))
    for i in range(pods):
        w.add_pod(raw_pod(f"job{i}", "res-1", gpus=2, notes=ADMITTED), hold_on="res-1")
    return w


def test_an_overstaying_pod_moves_onto_the_new_booking() -> None:
    w = overstay_world()
    assert run(w.relinker.adopt_overstays()) == 1
    notes = w.notes("job0")
    assert notes[vocab.BOOKING_REFERENCE] == "res-2"
    assert notes[vocab.GUARANTEED_UNTIL] == format_utc(START + 3 * H)
    assert notes[vocab.GUARANTEE_STATUS] == vocab.GUARANTEE_STATUS_GUARANTEED
    assert notes[vocab.RESERVATION_START] == format_utc(START + 2 * H)
    assert notes[vocab.ADMITTED_AT] == format_utc(START)  # a re-link is no admission
    assert w.emit.reasons() == [vocab.REASON_RUNTIME_GUARANTEED, vocab.REASON_OVERSTAY_RELINKED]


def test_the_ledger_moves_with_the_pod() -> None:
    w = overstay_world()
    run(w.relinker.adopt_overstays())
    res = w.reservations()
    assert res["res-1"].holds == ()
    [hold] = res["res-2"].holds
    assert hold.claim == claim_key(w.notes("job0")[vocab.ADMISSION_CLAIM])
    assert hold.gpus == 2
    assert hold.announced


def test_the_budget_bounds_how_many_pods_move() -> None:
    w = overstay_world(new_gpus=3, pods=2)
    assert run(w.relinker.adopt_overstays()) == 1
    refs = sorted(w.notes(f"job{i}")[vocab.BOOKING_REFERENCE] for i in range(2))
    assert refs == ["res-1", "res-2"]
    assert sum(h.gpus for h in w.reservations()["res-2"].holds) == 2


def test_a_full_ledger_refuses_even_when_the_cache_was_stale() -> None:
    w = overstay_world(new_gpus=2)
    pod = w.pods()["alice/job0"]
    goal = w.reservations()["res-2"]
    run(w.relinker.move(pod, goal, Cause.OVERSTAY, NOW))
    w.add_pod(raw_pod("late", "res-1", gpus=2), hold_on="res-1")
    late = w.pods()["alice/late"]
    assert not run(w.relinker.move(late, goal, Cause.OVERSTAY, NOW))  # goal as cached: free 2
    assert w.notes("late")[vocab.BOOKING_REFERENCE] == "res-1"


def test_a_pod_in_guarantee_or_not_on_a_node_stays() -> None:
    w = World(START + timedelta(minutes=5))
    w.book(facts(1, START, START + H))
    w.book(facts(2, START, START + 2 * H))
    w.add_pod(raw_pod("inside", "res-1"))
    w.add_pod(raw_pod("pending", "res-9", node=None))
    assert run(w.relinker.adopt_overstays()) == 0
    pods, res = w.pods(), w.reservations()
    assert not overstaying(pods["alice/inside"], res, w.clock.now(), use_group=False)


def test_only_the_owners_open_bookings_of_the_class_are_targets() -> None:
    w = World(NOW)
    w.book(facts(1, START, START + H))
    w.book(facts(2, START + 2 * H, START + 3 * H, owner="bob"))
    w.book(facts(3, NOW + H, NOW + 2 * H))  # not open yet
    w.add_pod(raw_pod("job", "res-1"))
    pod = w.pods()["alice/job"]
    assert target(pod, w.reservations(), NOW, w.rules, {}) is None


def test_the_class_to_relink_in_is_the_admissions_not_the_label() -> None:
    """An overstaying pod whose gpu-class label was removed still moves onto its
    owner's open a100 booking; one relabelled h100 never onto an h100 booking."""
    w = overstay_world()
    del w.kube.objects[("pods", "alice", "job0")]["metadata"]["labels"][vocab.GPU_CLASS_LABEL]
    assert run(w.relinker.adopt_overstays()) == 1
    assert w.notes("job0")[vocab.BOOKING_REFERENCE] == "res-2"
    h100 = World(NOW)
    h100.book(facts(1, START, START + H))
    h100.book(replace(facts(2, START + 2 * H, START + 3 * H), gpu_class="h100"))
    raw = raw_pod("job", "res-1")
    raw["metadata"]["labels"][vocab.GPU_CLASS_LABEL] = "h100"
    h100.add_pod(raw)
    assert target(h100.pods()["alice/job"], h100.reservations(), NOW, h100.rules, {}) is None


def test_the_longest_guarantee_wins() -> None:
    w = World(NOW)
    w.book(facts(1, START, START + H))
    w.book(facts(2, START + 2 * H, START + 3 * H))
    w.book(facts(3, START + 2 * H, START + 4 * H))
    w.add_pod(raw_pod("job", "res-1"))
    chosen = target(w.pods()["alice/job"], w.reservations(), NOW, w.rules, {})
    assert chosen is not None
    assert chosen.name == "res-3"


def test_adoption_off_moves_nothing() -> None:
    w = overstay_world(adoption=False)
    assert run(w.relinker.adopt_overstays()) == 0
    assert w.emit.sent == []


def test_only_a_ledger_change_that_frees_gpus_can_make_room_for_a_re_link() -> None:
    """The re-linker's wake-up on a change of holds alone: GPUs freed (a hold gone, a
    hold shrunk) can let a pod move; a claim, a binding or a mark cannot."""
    w = overstay_world(pods=2)
    res = w.reservations()["res-1"]
    one, two = res.holds
    assert frees_room(res, replace(res, holds=(one,)))
    assert frees_room(res, replace(res, holds=(one, replace(two, gpus=1))))
    assert frees_room(res, replace(res, holds=(one, replace(two, claim="other"))))
    assert not frees_room(res, replace(res, holds=(one, two, replace(two, claim="more"))))
    assert not frees_room(res, replace(res, holds=(one, replace(two, announced=True))))
    assert not frees_room(res, replace(res, holds=(one, replace(two, pod_uid=None))))
    assert not frees_room(None, res)
    assert not frees_room(res, None)
