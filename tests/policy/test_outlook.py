"""The risk ahead: per-boundary outlook, termination warnings (R33), headroom (R34)."""

from __future__ import annotations

from shared.policy.outlook import (
    future_starts,
    headroom_short,
    headroom_target,
    kill_from,
    stops,
    warnings,
)
from tests.policy.builders import NOW
from tests.policy.test_preemption import LEAD, MIN, booking, holder, room

S1 = NOW + 10 * MIN
S2 = NOW + 20 * MIN


def test_future_starts_are_after_now_up_to_the_horizon() -> None:
    books = [booking(1, 1, NOW), booking(2, 1, S1), booking(3, 1, S2), booking(4, 1, S1)]
    assert future_starts(books, NOW, S1) == [S1]


def test_a_short_class_warns_its_whole_pool_with_the_shared_risk() -> None:
    pods = [holder("a"), holder("b"), holder("c", ends=S1 + MIN), holder("d", gpus=2)]
    (stop,) = stops([S1], [booking(1, 2, S1)], pods, {"h100": room(n1=(5, 5))})
    out = stop.classes["h100"]
    assert (out.demand, out.free, out.shortfall, out.pool_gpus) == (2, 0, 2, 4)
    risks = warnings([stop], LEAD)
    assert set(risks) == {"a", "b", "d"}  # c is still guaranteed at S1
    assert risks["a"].risk_text == "0.50"
    assert risks["a"].at == NOW - MIN  # its guarantee ended after S1 - lead


def test_a_guarantee_ending_inside_the_lead_delays_the_kill_instant() -> None:
    late = holder("late", ends=S1 - MIN)
    assert kill_from(late, S1, LEAD) == S1 - MIN
    assert kill_from(holder("unguaranteed", ends=None), S1, LEAD) == S1 - LEAD


def test_the_soonest_boundary_wins_and_room_carries_forward() -> None:
    pods = [holder("a"), holder("b")]
    found = stops([S1, S2], [booking(1, 1, S1), booking(2, 1, S2)], pods, {"h100": room(n1=(3, 2))})
    first, second = (s.classes["h100"] for s in found)
    assert (first.shortfall, second.free, second.shortfall) == (0, 0, 1)
    risks = warnings(found, LEAD)
    assert {r.boundary for r in risks.values()} == {S2}
    assert risks["a"].risk == 0.5


def test_no_warning_without_shortfall_or_pool() -> None:
    inside = holder("in", ends=S2)
    (stop,) = stops([S1], [booking(1, 2, S1)], [inside], {"h100": room(n1=(1, 1))})
    assert stop.classes["h100"].risk == 0.0
    assert warnings([stop], LEAD) == {}


def test_risk_is_capped_at_one() -> None:
    (stop,) = stops([S1], [booking(1, 4, S1)], [holder("a")], {"h100": room(n1=(1, 1))})
    assert warnings([stop], LEAD)["a"].risk == 1.0


def test_headroom_target_rounds_up_and_is_off_at_zero() -> None:
    assert headroom_target(10, 15) == 2
    assert headroom_target(10, 0) == 0
    assert headroom_short(room(n1=(10, 9)), 15) == 1
    assert headroom_short(room(n1=(10, 5)), 15) == 0


def test_pods_off_the_inventory_are_never_in_the_pool() -> None:
    pods = [holder("a", node="cordoned")]
    (stop,) = stops([S1], [booking(1, 1, S1)], pods, {"h100": room(n1=(1, 1))})
    assert stop.classes["h100"].pool == ()
    (unknown,) = stops([S1], [booking(1, 1, S1, gpu_class="a100")], pods, {})
    assert unknown.classes["a100"].free == 0
