"""Cached pods as preemption ``Holder``s: guarantee end and chain claims per reservation."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from reconciler.base.pods import PodView, project_pod
from reconciler.preemption.plan import holders_of
from shared import model, vocab
from shared.policy.matching import MatchRules
from tests.reconciler.builders import START
from tests.reconciler.upholdkit import facts, raw_pod

H = timedelta(hours=1)
NOW = START + 30 * timedelta(minutes=1)


def views(*raws: dict[str, Any]) -> list[PodView]:
    return [v for v in (project_pod(r, MatchRules()) for r in raws) if v is not None]


def reservations(*found: model.ReservationFacts) -> dict[str, model.GPUReservation]:
    return {f.name: model.GPUReservation(f) for f in found}


def test_a_chained_booking_extends_the_guarantee_and_is_claimed() -> None:
    res = reservations(
        facts(1, START, START + H, gpus=2),
        facts(2, START + H, START + 3 * H, gpus=2),  # abuts, same owner/class/count
        facts(3, START + 3 * H, START + 4 * H, gpus=1),  # abuts 2 but another count
    )
    (h,) = holders_of(views(raw_pod("p", "res-1")), res, NOW, use_group=False)
    assert h.guarantee_end == START + 3 * H
    assert h.claims == frozenset({"res-1", "res-2"})
    assert (h.reservation_id, h.node, h.gpu_class, h.gpus) == (1, "gpu-1", "a100", 1)


def test_missing_or_cancelled_reservation_means_no_guarantee() -> None:
    res = reservations(facts(1, START, START + H, state=model.State.CANCELLED))
    found = holders_of(
        views(raw_pod("p", "res-1"), raw_pod("q", "res-9")),
        res,
        NOW,
        use_group=False,
    )
    assert [(h.name, h.guarantee_end, h.claims) for h in found] == [
        ("p", None, frozenset({"res-1"})),
        ("q", None, frozenset({"res-9"})),
    ]


def test_unbound_unadmitted_malformed_or_finished_pods_are_not_holders() -> None:
    finished = raw_pod("done", "res-1")
    finished["status"] = {"phase": "Succeeded"}
    bad_ref = raw_pod("bad", "reservation-one")
    leaving = raw_pod("leaving", "res-1")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-05T09:00:00Z"
    pods = views(
        raw_pod("pending", "res-1", node=None), raw_pod("free", None), finished, bad_ref, leaving
    )
    res = reservations(facts(1, START, START + H))
    assert holders_of(pods, res, NOW, use_group=False) == []


def test_an_admitted_pod_holds_its_bookings_class_whatever_its_label_says() -> None:
    """Removing or changing the gpu-class label after admission must not make a pod
    immune to preemption: its class comes from the booking it was admitted under."""
    res = reservations(facts(1, START, START + H, gpus=2))
    unlabelled = raw_pod("unlabelled", "res-1")
    del unlabelled["metadata"]["labels"][vocab.GPU_CLASS_LABEL]
    relabelled = raw_pod("relabelled", "res-1")
    relabelled["metadata"]["labels"][vocab.GPU_CLASS_LABEL] = "h100"
    found = holders_of(views(unlabelled, relabelled), res, NOW, use_group=False)
    assert sorted((h.name, h.gpu_class) for h in found) == [
        ("relabelled", "a100"),
        ("unlabelled", "a100"),
    ]
