"""The pure ledger arithmetic: used, fits, verdict, add, drop, bind, expire, rebuild."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared import ledger, model
from shared.clock import utc
from shared.model import claim_key
from tests.ledger.fakes import NOW, WINDOW_END, WINDOW_START, facts


def reservation(*holds: model.Hold, gpus: int = 8, **overrides) -> model.GPUReservation:
    return model.GPUReservation(facts(gpus=gpus, **overrides), tuple(holds))


def hold(claim: str, gpus: int, **kw) -> model.Hold:
    return model.Hold(claim, gpus, kw.pop("at", NOW), **kw)


def test_used_and_free_sum_the_holds() -> None:
    res = reservation(hold("a", 3), hold("b", 2))
    assert ledger.used(res) == 5
    assert ledger.free(res) == 3


def keys(*claim_ids: str) -> list[str]:
    """The ledger keys of ``claim_ids``, in order (holds keep keys)."""
    return [claim_key(c) for c in claim_ids]


@pytest.mark.parametrize(
    ("held", "asked", "expected"),
    [
        pytest.param(0, 8, True, id="empty-budget-takes-all"),
        pytest.param(5, 3, True, id="exactly-fills"),
        pytest.param(6, 3, False, id="one-over"),
        pytest.param(8, 0, True, id="zero-gpu-pod-always-fits"),
        pytest.param(0, -1, False, id="negative-never-fits"),
    ],
)
def test_fits(held: int, asked: int, expected: bool) -> None:
    res = reservation(hold("a", held)) if held else reservation()
    assert ledger.fits(res, asked) is expected


@pytest.mark.parametrize(
    ("res", "gpus", "at", "expected"),
    [
        pytest.param(reservation(), 2, NOW, "admitted", id="open-with-room"),
        pytest.param(reservation(hold("a", 7)), 2, NOW, "full", id="full"),
        pytest.param(reservation(), 9, NOW, "too_small", id="request-exceeds-budget"),
        pytest.param(reservation(), 1, WINDOW_START, "admitted", id="start-is-inside"),
        pytest.param(reservation(), 1, WINDOW_END, "not_open", id="end-is-outside"),
        pytest.param(reservation(), 1, utc(2026, 1, 5, 8), "not_open", id="upcoming"),
        pytest.param(reservation(state=model.State.CANCELLED), 1, NOW, "not_open", id="cancelled"),
        pytest.param(
            reservation(kind=model.Kind.BEST_EFFORT, start=NOW, end=NOW),
            1,
            utc(2026, 1, 5, 10, 0, 5),
            "admitted",
            id="best-effort-stub-has-no-window",
        ),
    ],
)
def test_verdict(res: model.GPUReservation, gpus: int, at, expected: str) -> None:
    assert ledger.verdict(res, gpus, at) == expected


def test_add_hold_refuses_what_does_not_fit() -> None:
    res = ledger.add_hold(reservation(gpus=4), hold("a", 3))
    assert [h.claim for h in res.holds] == [claim_key("a")]
    with pytest.raises(ledger.LedgerFull):
        ledger.add_hold(res, hold("b", 2))


def test_drop_and_bind() -> None:
    res = reservation(hold("a", 1), hold("b", 2))
    assert [h.claim for h in ledger.drop(res, {"a"}).holds] == [claim_key("b")]
    bound = ledger.bind(res, "b", "pod-b", "uid-b")
    assert bound.holds[1] == replace(res.holds[1], pod="pod-b", pod_uid="uid-b")
    assert bound.holds[0] == res.holds[0]


def test_expire_drops_only_unbound_holds_older_than_the_ttl() -> None:
    old = utc(2026, 1, 5, 9, 58)
    res = reservation(
        hold("old-unbound", 1, at=old),
        hold("old-bound", 1, at=old, pod="p", pod_uid="u"),
        hold("young", 1, at=utc(2026, 1, 5, 9, 59, 30)),
        hold("at-cutoff", 1, at=utc(2026, 1, 5, 9, 59)),
    )
    kept = ledger.expire(res, NOW, ttl_s=60)
    assert [h.claim for h in kept.holds] == keys("old-bound", "young", "at-cutoff")


def test_rebuild_binds_keeps_adds_and_drops() -> None:
    res = reservation(
        hold("c-live", 1, pod="a"),  # unbound; its pod now exists
        hold("c-gone", 2, pod="b", pod_uid="uid-b"),  # bound; pod finished
        hold("c-pending", 1, at=utc(2026, 1, 5, 9, 59, 50)),  # young, pod being created
        hold("c-stale", 1, at=utc(2026, 1, 5, 9)),  # old, never bound
        hold("c-kept", 2, pod="d", pod_uid="uid-d", announced=True),
    )
    pods = [
        ledger.PodUse("a", "uid-a", 1, claim="c-live"),
        ledger.PodUse("d", "uid-d", 2, claim="c-kept"),
        ledger.PodUse("legacy", "uid-l", 3),
    ]
    rebuilt = ledger.rebuild(res, pods, NOW, ttl_s=60)
    by_claim = {h.claim: h for h in rebuilt.holds}
    assert set(by_claim) == set(keys("c-live", "c-pending", "c-kept", "pod-uid-l"))
    assert by_claim[claim_key("c-live")].pod_uid == "uid-a"
    assert by_claim[claim_key("c-kept")].announced is True
    # No readable admitted-at: presumed announced (a wiped status never re-announces).
    assert by_claim[claim_key("pod-uid-l")] == model.Hold(
        "pod-uid-l", 3, NOW, "legacy", "uid-l", True
    )


def test_rebuild_drops_a_young_hold_its_pod_was_admitted_past() -> None:
    """A crash between the claim and the patch left a hold naming pod ``a``; a new
    process admitted ``a`` under another claim since. The old hold is dead (it would keep
    the budget from the next pod until the TTL). A pod admitted *before* such a hold (a
    new create reusing an old pod's name) keeps it, and so does a pod not yet admitted."""
    young = utc(2026, 1, 5, 9, 59, 50)
    res = reservation(
        hold("orphan", 1, at=young, pod="a"),
        hold("reused", 1, at=young, pod="b"),
        hold("in-flight", 1, at=young, pod="c"),
    )
    pods = [
        ledger.PodUse("a", "uid-a", 1, claim="again", admitted_at=NOW),
        ledger.PodUse("b", "uid-b", 1, claim="older", admitted_at=utc(2026, 1, 5, 9)),
        ledger.PodUse("x", "uid-x", 1),
    ]
    rebuilt = ledger.rebuild(res, pods, NOW, ttl_s=60)
    assert {h.claim for h in rebuilt.holds} == set(
        keys("reused", "in-flight", "again", "older", "pod-uid-x")
    )


def test_rebuild_from_nothing_is_the_same_ledger() -> None:
    """Self-healing: a wiped status rebuilds the holds the pods imply."""
    pods = [ledger.PodUse("a", "uid-a", 2, claim="c1"), ledger.PodUse("b", "uid-b", 1)]
    first = ledger.rebuild(reservation(), pods, NOW, ttl_s=60)
    again = ledger.rebuild(replace(first, holds=()), pods, NOW, ttl_s=60)
    assert {(h.claim, h.gpus, h.pod_uid) for h in again.holds} == {
        (h.claim, h.gpus, h.pod_uid) for h in first.holds
    }


def test_announce_all_binds_and_marks_only_the_named_holds() -> None:
    res = reservation(hold("a", 1), hold("b", 2), hold("c", 1))
    marked = ledger.announce_all(res, {"a": ("pod-a", "uid-a"), "c": ("pod-c", "uid-c")})
    assert marked.holds[0] == replace(res.holds[0], pod="pod-a", pod_uid="uid-a", announced=True)
    assert marked.holds[1] == res.holds[1]
    assert marked.holds[2] == replace(res.holds[2], pod="pod-c", pod_uid="uid-c", announced=True)
    assert ledger.announce_all(res, {"gone": ("p", "u")}) == res
