"""Preemption planning (R30–R32, node-aware blocks): boundaries, demand, eligibility,
needs and victim choice."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import model
from shared.policy.preemption import (
    Holder,
    Need,
    Phase,
    Room,
    Tally,
    accept,
    boundaries,
    claimed,
    demands_at,
    eligible,
    fewest_gpus,
    local_pick,
    phase_of,
    plan_boundary,
    unmet,
)
from tests.policy.builders import HOUR, NOW, reservation

MIN = timedelta(minutes=1)
LEAD = timedelta(minutes=15)
S = NOW + 10 * MIN


def holder(
    uid: str,
    node: str = "n1",
    gpus: int = 1,
    *,
    cls: str = "h100",
    ends: datetime | None = NOW - MIN,
    claims: tuple[str, ...] = (),
    rid: int = 100,
) -> Holder:
    return Holder(uid, "bob", f"pod-{uid}", cls, gpus, node, rid, ends, frozenset(claims))


def room(**nodes: tuple[int, int]) -> Room:
    """``room(n1=(gpus, used), ...)``."""
    return Room(
        total=sum(g for g, _ in nodes.values()),
        used=sum(u for _, u in nodes.values()),
        node_gpus={n: g for n, (g, _) in nodes.items()},
        node_free={n: max(0, g - u) for n, (g, u) in nodes.items()},
    )


def booking(rid: int, gpus: int, start: datetime = S, **kw: object) -> model.ReservationFacts:
    return reservation(rid, gpus=gpus, start=start, end=start + HOUR, **kw).facts  # type: ignore[arg-type]


# --- boundaries -------------------------------------------------------------------


def test_boundaries_are_booking_starts_inside_the_lead_window_both_sides() -> None:
    found = boundaries(
        [
            booking(1, 1, NOW + LEAD),  # the far edge is in
            booking(2, 1, NOW + LEAD + MIN),  # beyond the lead
            booking(3, 1, NOW - LEAD),  # the near edge is out (pruned)
            booking(4, 1, NOW - 5 * MIN),  # phase B
            booking(5, 1, NOW + LEAD),  # same start counted once
            booking(6, 1, S, kind=model.Kind.ON_DEMAND),  # leases create no boundary
            booking(7, 1, S + MIN, state=model.State.CANCELLED),
        ],
        NOW,
        LEAD,
    )
    assert found == [NOW - 5 * MIN, NOW + LEAD]


def test_phase_is_b_from_the_boundary_on() -> None:
    assert phase_of(S, S - MIN) is Phase.AHEAD
    assert phase_of(S, S) is Phase.AT


# --- demand -----------------------------------------------------------------------


def test_demand_subtracts_each_claiming_pod_once() -> None:
    """A pod admitted under the booking and a chained pod each count once (the seed's
    double subtraction of the first is not repeated)."""
    b = booking(1, 4)
    pods = [
        holder("own", claims=("res-1",), rid=1),
        holder("chained", gpus=2, claims=("res-9", "res-1"), rid=9),
        holder("other", claims=("res-5",), rid=5),
    ]
    assert demands_at(S, [b], claimed(pods)) == {"h100": [1]}


def test_a_covered_booking_has_no_demand_and_other_starts_are_ignored() -> None:
    pods = [holder("a", gpus=4, claims=("res-1",), rid=1)]
    found = demands_at(S, [booking(1, 4), booking(2, 2, S + MIN)], claimed(pods))
    assert found == {}


# --- eligibility ------------------------------------------------------------------


def test_only_pods_past_guarantee_on_included_nodes_with_gpus_are_eligible() -> None:
    r = room(n1=(4, 4))
    pods = [
        holder("over"),
        holder("ends-now", ends=NOW),
        holder("no-guarantee", ends=None),
        holder("inside", ends=NOW + MIN),
        holder("excluded-node", node="gone"),
        holder("zero", gpus=0),
    ]
    picked = {h.uid for h in eligible(pods, r, NOW)}
    assert picked == {"over", "ends-now", "no-guarantee"}
    assert eligible(pods, None, NOW) == []


# --- planning ---------------------------------------------------------------------


def plan(demands: dict[str, list[int]], pool: list[Holder], rooms: dict[str, Room]) -> list[Need]:
    return plan_boundary(S, demands, {"h100": pool}, Tally(rooms))


def test_no_need_when_free_covers_the_demand() -> None:
    assert plan({"h100": [1]}, [holder("a")], {"h100": room(n1=(4, 3))}) == []


def test_class_wide_shortfall_on_a_full_class() -> None:
    pool = [holder("a"), holder("b")]
    (need,) = plan({"h100": [1]}, pool, {"h100": room(n1=(4, 4))})
    assert (need.gpus, need.node, {h.uid for h in need.pool}) == (1, None, {"a", "b"})


def test_an_unknown_class_is_planned_against_nothing() -> None:
    (need,) = plan({"a100": [2]}, [], {"h100": room(n1=(4, 4))})
    assert (need.gpu_class, need.gpus, need.pool) == ("a100", 2, ())


def test_block_fits_on_a_node_with_room_without_killing() -> None:
    rooms = {"h100": room(n1=(4, 3), n2=(4, 2))}
    assert plan({"h100": [2]}, [holder("a")], rooms) == []


def test_block_frees_one_node_rather_than_scattered_gpus() -> None:
    """Free GPUs suffice class-wide (2 free on 2 nodes) but no node has the block:
    kill on one node, the fewest GPUs (1 on n2, not 2 anywhere)."""
    rooms = {"h100": room(n1=(2, 1), n2=(2, 1), n3=(2, 2))}
    pool = [holder("a1", "n1"), holder("b1", "n2"), holder("c1", "n3"), holder("c2", "n3")]
    (need,) = plan({"h100": [2]}, pool, rooms)
    assert need.node == "n1"  # n1 and n2 tie at one GPU; the name breaks the tie
    assert need.gpus == 1
    assert [h.uid for h in need.chosen] == ["a1"]


def test_block_on_a_full_class_kills_two_on_one_node() -> None:
    """Acceptance 2's shape: every node full, overstayers spread; a 2-GPU booking
    frees one node's block, not two GPUs on different nodes."""
    rooms = {"h100": room(n1=(2, 2), n2=(2, 2), n3=(2, 2))}
    pool = [
        holder("a1", "n1"),
        holder("b1", "n2"),
        holder("c1", "n3"),
        holder("c2", "n3"),
    ]
    (need,) = plan({"h100": [2]}, pool, rooms)
    assert (need.node, need.gpus) == ("n3", 2)
    assert sorted(h.uid for h in need.chosen) == ["c1", "c2"]
    assert {h.node for h in need.pool} == {"n3"}


def test_block_prefers_fewest_gpus_then_fewest_pods() -> None:
    rooms = {"h100": room(n1=(4, 4), n2=(4, 4))}
    pool = [holder("big", "n1", 4), holder("x", "n2", 1), holder("y", "n2", 1)]
    (need,) = plan({"h100": [2]}, pool, rooms)
    assert sorted(h.uid for h in need.chosen) == ["x", "y"]


def test_a_booking_larger_than_any_node_is_counted_class_wide() -> None:
    rooms = {"h100": room(n1=(2, 2), n2=(2, 2))}
    pool = [holder("a", "n1", 2), holder("b", "n2", 2)]
    (need,) = plan({"h100": [3]}, pool, rooms)
    assert (need.node, need.gpus) == (None, 3)


def test_no_block_possible_falls_back_to_a_class_wide_need() -> None:
    rooms = {"h100": room(n1=(2, 2), n2=(2, 2))}
    pool = [holder("a", "n1"), holder("b", "n2")]  # neither node can be emptied
    (need,) = plan({"h100": [2]}, pool, rooms)
    assert (need.node, need.gpus) == (None, 2)


def test_overcommit_is_part_of_the_shortfall() -> None:
    r = Room(total=4, used=5, node_gpus={"n1": 4}, node_free={"n1": 0})
    (need,) = plan({"h100": [1]}, [holder("a"), holder("b")], {"h100": r})
    assert need.gpus == 2


def test_kills_refill_the_room_for_the_next_boundary() -> None:
    tally = Tally({"h100": room(n1=(4, 4))})
    a, b = holder("a", gpus=2), holder("b", gpus=2)
    (_need,) = plan_boundary(S, {"h100": [2]}, {"h100": [a, b]}, tally)
    assert tally.kill([a]) == 2
    assert tally.free["h100"] == 0
    # The doomed pod is not offered again; the second boundary needs two more.
    (second,) = plan_boundary(S + MIN, {"h100": [2]}, {"h100": [a, b]}, tally)
    assert [h.uid for h in second.pool] == ["b"]


def test_settle_forgives_an_unmet_deficit() -> None:
    tally = Tally({"h100": room(n1=(4, 4))})
    plan_boundary(S, {"h100": [3]}, {"h100": []}, tally)
    assert tally.free["h100"] == -3
    tally.settle()
    assert tally.free["h100"] == 0


# --- selection --------------------------------------------------------------------


def test_local_pick_is_random_greedy_and_may_overshoot() -> None:
    pool = tuple(holder(u, gpus=g) for u, g in [("a", 1), ("b", 2), ("c", 1)])
    need = Need("h100", 2, pool, S)
    picks = {
        tuple(h.uid for h in local_pick(need, pool, random.Random(seed))) for seed in range(30)
    }
    assert all(sum({"a": 1, "b": 2, "c": 1}[u] for u in p) >= 2 for p in picks)
    assert len(picks) > 1  # the seed changes the choice


def test_local_pick_of_a_block_is_the_planners_choice() -> None:
    a, b = holder("a", "n3"), holder("b", "n3")
    need = Need("h100", 2, (a, b, holder("c", "n3")), S, "n3", (a, b))
    assert local_pick(need, [a, b], random.Random(1)) == [a, b]


def test_accept_keeps_offered_uids_once() -> None:
    a, b = holder("a"), holder("b")
    need = Need("h100", 1, (a, b), S)
    assert accept(need, ["zz", "b", "b"]) == [b]
    assert accept(need, []) == []
    assert unmet(need, []) == 1
    assert unmet(need, [a, b]) == 0


@given(
    gpus=st.lists(st.integers(min_value=1, max_value=4), min_size=0, max_size=7),
    target=st.integers(min_value=0, max_value=12),
)
def test_fewest_gpus_reaches_the_target_with_the_least_overshoot(
    gpus: list[int], target: int
) -> None:
    pool = [holder(str(i), gpus=g) for i, g in enumerate(gpus)]
    found = fewest_gpus(pool, target)
    if sum(gpus) < target:
        assert found is None
        return
    assert found is not None
    got = sum(h.gpus for h in found)
    assert got >= target
    # No subset reaches the target with fewer GPUs.
    sums = {0}
    for g in gpus:
        sums |= {s + g for s in sums}
    assert got == min(s for s in sums if s >= target)


@pytest.mark.parametrize("seed", range(5))
def test_inside_guarantee_pods_never_reach_a_need(seed: int) -> None:
    rng = random.Random(seed)
    pods = [holder(str(i), ends=NOW + (MIN if rng.random() < 0.5 else -MIN)) for i in range(6)]
    r = room(n1=(6, 6))
    needs = plan_boundary(S, {"h100": [4]}, {"h100": eligible(pods, r, NOW)}, Tally({"h100": r}))
    for need in needs:
        assert all(h.past_guarantee(NOW) for h in need.pool)
