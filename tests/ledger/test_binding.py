"""rebuild binds a claim to the first pod persisted with it, adopts pods without a hold
only while the booking is open and within its budget, and releases holds whose pod
never appeared after the unseen limit."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared import ledger, model
from shared.ledger import PodUse
from shared.model import claim_key
from tests.ledger.fakes import NOW, WINDOW_END, facts

SAME_SECOND = NOW - timedelta(seconds=3)


def res(*holds: model.Hold, gpus: int = 8, **overrides: Any) -> model.GPUReservation:
    return model.GPUReservation(facts(gpus=gpus, **overrides), tuple(holds))


def pod(name: str, claim: str | None, rv: str, gpus: int = 1, ns: str = "alice") -> PodUse:
    return PodUse(
        name,
        f"uid-{name}",
        gpus,
        claim,
        namespace=ns,
        created_at=SAME_SECOND,
        resource_version=rv,
    )


def holders(r: model.GPUReservation) -> dict[str, str | None]:
    return {h.claim: h.pod_uid for h in r.holds}


def test_two_pods_of_one_claim_in_the_same_second_the_first_persisted_takes_the_hold() -> None:
    r = res(model.Hold("c1", 1, NOW))
    rebuilt = ledger.rebuild(r, [pod("copy", "c1", "120"), pod("orig", "c1", "99")], NOW, 120)
    assert holders(rebuilt) == {claim_key("c1"): "uid-orig"}  # 99 < 120 as integers, not as text


def test_a_hold_bound_to_a_live_pod_stays_with_it_and_the_copy_gets_nothing() -> None:
    r = res(model.Hold("c1", 1, NOW, "late", "uid-late"))
    rebuilt = ledger.rebuild(r, [pod("early", "c1", "1"), pod("late", "c1", "2")], NOW, 120)
    assert [(h.claim, h.pod_uid) for h in rebuilt.holds] == [(claim_key("c1"), "uid-late")]


def test_a_hold_bound_to_a_pod_that_is_gone_passes_to_the_pod_carrying_its_claim() -> None:
    r = res(model.Hold("c1", 1, NOW, "gone", "uid-gone"))
    rebuilt = ledger.rebuild(r, [pod("again", "c1", "5")], NOW, 120)
    assert holders(rebuilt) == {claim_key("c1"): "uid-again"}


def test_without_a_readable_version_creation_time_then_uid_decide() -> None:
    a = PodUse("a", "uid-b", 1, "c", namespace="alice", created_at=SAME_SECOND)
    b = PodUse(
        "b", "uid-a", 1, "c", namespace="alice", created_at=SAME_SECOND, resource_version="x"
    )
    older = PodUse("o", "uid-z", 1, "c", namespace="alice", created_at=SAME_SECOND - timedelta(1))
    assert sorted([a, b, older], key=ledger.persisted) == [older, b, a]
    assert ledger.persisted(PodUse("n", "u", 1))[0] is True  # no creation time: last


def test_adoption_takes_pods_in_persisted_order_never_beyond_the_budget() -> None:
    r = res(model.Hold("held", 2, NOW, "h", "uid-h"), gpus=4)
    pods = [
        pod("h", "held", "1", gpus=2),
        pod("third", None, "30", gpus=1),
        pod("first", "x1", "10", gpus=1),
        pod("second", "x2", "20", gpus=2),
    ]
    rebuilt = ledger.rebuild(r, pods, NOW, 120)
    assert set(holders(rebuilt).values()) == {"uid-h", "uid-first", "uid-third"}
    assert rebuilt.used_gpus == 4


def test_no_adoption_for_another_namespace_a_zero_gpu_pod_or_a_closed_window() -> None:
    pods = [pod("bob", "b", "1", ns="bob"), pod("zero", "z", "2", gpus=0)]
    assert ledger.rebuild(res(), pods, NOW, 120).holds == ()
    ended = res(start=NOW - timedelta(hours=3), end=NOW - timedelta(hours=1))
    assert ledger.rebuild(ended, [pod("late", "l", "3")], NOW, 120).holds == ()
    cancelled = res(state=model.State.CANCELLED)
    assert ledger.rebuild(cancelled, [pod("late", "l", "3")], NOW, 120).holds == ()


def test_an_unbound_hold_is_not_taken_by_claim_from_another_namespace() -> None:
    r = res(model.Hold("c1", 1, NOW))
    rebuilt = ledger.rebuild(r, [pod("bobs", "c1", "1", ns="bob")], NOW, 120, 10)
    assert [(h.claim, h.pod_uid) for h in rebuilt.holds] == [(claim_key("c1"), None)]


def test_a_bound_hold_is_kept_after_the_window_ends() -> None:
    r = res(model.Hold("c1", 1, NOW, "p", "uid-p"))
    later = WINDOW_END + timedelta(hours=5)
    assert holders(ledger.rebuild(r, [pod("p", "c1", "1")], later, 120)) == {
        claim_key("c1"): "uid-p"
    }


def test_unseen_holds_go_after_the_unseen_limit_and_are_counted() -> None:
    r = res(
        model.Hold("fresh", 1, NOW - timedelta(seconds=9)),
        model.Hold("unseen", 1, NOW - timedelta(seconds=11)),
        model.Hold("bound", 1, NOW - timedelta(seconds=60), "p", "uid-p"),
    )
    rebuilt = ledger.rebuild(r, [pod("p", "bound", "1")], NOW, 120, unseen_s=10)
    assert set(holders(rebuilt)) == {claim_key("fresh"), claim_key("bound")}
    assert ledger.unseen(r, rebuilt, NOW, 10) == 1
    # Without the limit the claim TTL alone applies (both kept).
    assert set(holders(ledger.rebuild(r, [pod("p", "bound", "1")], NOW, 120))) == {
        claim_key("fresh"),
        claim_key("unseen"),
        claim_key("bound"),
    }


@pytest.mark.parametrize("rv", ["", "x", "-1", "1.5", "²", "٣", " 7", "1e3", "0x10", "9" * 40])
def test_a_malformed_resource_version_sorts_after_readable_ones_never_raises(rv: str) -> None:
    odd = PodUse("odd", "uid-odd", 1, "c", created_at=SAME_SECOND, resource_version=rv)
    fine = PodUse("fine", "uid-fine", 1, "c", created_at=SAME_SECOND, resource_version="12")
    order = sorted([odd, fine], key=ledger.persisted)
    if rv.isascii() and rv.isdigit():
        assert order[0].name == ("fine" if int(rv) > 12 else "odd")
    else:
        assert order == [fine, odd]


def test_of_two_holds_bound_to_one_live_pod_the_first_keeps_it() -> None:
    """A pod keeps the first hold bound to its uid; a pod carrying the other hold's
    claim gets nothing from the pod's holds (the backstop counts it a copy)."""
    r = res(
        model.Hold("c0", 1, NOW, None, "uid-p"),
        model.Hold("c2", 1, NOW, None, "uid-p"),
        gpus=1,
    )
    rebuilt = ledger.rebuild(r, [pod("p", None, "1"), pod("copy", "c0", "2")], NOW, 120)
    assert holders(rebuilt) == {claim_key("c0"): "uid-p"}


def test_a_hold_already_right_is_kept_as_it_is_and_a_changed_one_made_anew() -> None:
    """Upkeep rebuilds a booking's ledger on each of its pod events: a hold whose pod,
    uid and size are already right is the same object in the result (no new hold per
    pod per event); one the pods change is a new hold with the change."""
    same = model.Hold(claim_key("c1"), 1, NOW, "a", "uid-a", announced=True)
    resized = model.Hold(claim_key("c2"), 1, NOW, "b", "uid-b")
    unbound = model.Hold(claim_key("c3"), 1, NOW)
    r = res(same, resized, unbound)
    got = ledger.rebuild(
        r, [pod("a", "c1", "1"), pod("b", "c2", "2", gpus=2), pod("c", "c3", "3")], NOW, 60
    )
    by = {h.claim: h for h in got.holds}
    assert by[same.claim] is same
    assert by[resized.claim].gpus == 2
    assert by[unbound.claim].pod_uid == "uid-c"
