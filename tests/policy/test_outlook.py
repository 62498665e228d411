"""The risk ahead: per-boundary outlook planned as the sweep plans, termination warnings
(R33), headroom (R34)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from shared.model import ReservationFacts
from shared.policy.outlook import (
    Stop,
    ahead,
    future_starts,
    headroom_short,
    headroom_target,
    kill_from,
    warnings,
)
from shared.policy.preemption import Holder, Room
from tests.policy.builders import NOW
from tests.policy.test_preemption import LEAD, MIN, booking, holder, room

S1 = NOW + 10 * MIN
S2 = NOW + 20 * MIN


def plan(
    books: Sequence[ReservationFacts],
    pods: Sequence[Holder],
    rooms: Mapping[str, Room],
    until: datetime = S2,
    *,
    delegated: bool = False,
) -> list[Stop]:
    return ahead(NOW, LEAD, until, books, pods, rooms, delegated=delegated)


def test_future_starts_are_after_now_up_to_the_horizon() -> None:
    books = [booking(1, 1, NOW), booking(2, 1, S1), booking(3, 1, S2), booking(4, 1, S1)]
    assert future_starts(books, NOW, S1) == [S1]


def test_a_class_wide_shortfall_warns_its_whole_pool_with_the_shared_risk() -> None:
    pods = [holder("a"), holder("b"), holder("c", ends=S1 + MIN), holder("d")]
    (stop,) = plan([booking(1, 1, S1)], pods, {"h100": room(n1=(4, 4))})
    out = stop.classes["h100"]
    assert (out.demand, out.free, out.shortfall) == (1, 0, 1)
    risks = warnings([stop], LEAD, pods)
    assert set(risks) == {"a", "b", "d"}  # c is still guaranteed at S1
    assert risks["a"].risk_text == "0.33"
    assert risks["a"].at == NOW - MIN  # its guarantee ended after S1 - lead


def test_a_one_node_block_puts_exactly_the_planned_victims_at_risk_one() -> None:
    """The sweep frees a block of 2 on one node by the fewest GPUs: d (2 GPUs) alone; a
    class-wide share would have told a, b and d 0.50 each."""
    pods = [holder("a"), holder("b"), holder("d", gpus=2)]
    (stop,) = plan([booking(1, 2, S1)], pods, {"h100": room(n1=(4, 4))})
    assert stop.classes["h100"].risks == {"d": 1.0}
    (shared,) = plan([booking(1, 2, S1)], pods, {"h100": room(n1=(4, 4))}, delegated=True)
    assert shared.classes["h100"].risks == {"a": 0.5, "b": 0.5, "d": 0.5}  # the app chooses


def test_a_booking_started_unused_keeps_its_gpus_out_of_the_room() -> None:
    """Issue 27, case 1: carol's booking started a minute ago with nothing running
    holds 1 of the 3 free GPUs, so bob's 6 at S1 need 4 GPUs of dave's pods (all of
    them), not 3 — and both are told risk 1, as the sweep kills both."""
    pods = [holder("d1", gpus=3, node="n1"), holder("d2", gpus=3, node="n1")]
    books = [booking(1, 1, NOW - MIN), booking(2, 6, S1)]
    (stop,) = plan(books, pods, {"h100": room(n1=(8, 6), n2=(1, 0))})
    out = stop.classes["h100"]
    assert (out.demand, out.free, out.shortfall) == (6, 2, 4)
    assert out.risks == {"d1": 1.0, "d2": 1.0}


def test_a_guarantee_ending_inside_the_lead_delays_the_kill_instant() -> None:
    late = holder("late", ends=S1 - MIN)
    assert kill_from(late, S1, LEAD) == S1 - MIN
    assert kill_from(holder("unguaranteed", ends=None), S1, LEAD) == S1 - LEAD


def test_the_soonest_boundary_wins_and_room_carries_forward() -> None:
    pods = [holder("a"), holder("b")]
    found = plan([booking(1, 1, S1), booking(2, 1, S2)], pods, {"h100": room(n1=(3, 2))})
    first, second = (s.classes["h100"] for s in found)
    assert (first.shortfall, second.free, second.shortfall) == (0, 0, 1)
    risks = warnings(found, LEAD, pods)
    assert {r.boundary for r in risks.values()} == {S2}
    assert risks["a"].risk == 0.5


def test_no_warning_without_shortfall_or_pool() -> None:
    inside = holder("in", ends=S2)
    (stop,) = plan([booking(1, 2, S1)], [inside], {"h100": room(n1=(1, 1))})
    assert stop.classes["h100"].risk == 0.0
    assert warnings([stop], LEAD, [inside]) == {}


def test_risk_is_capped_at_one() -> None:
    (stop,) = plan([booking(1, 4, S1)], [holder("a")], {"h100": room(n1=(1, 1))})
    assert warnings([stop], LEAD, [holder("a")])["a"].risk == 1.0


def test_headroom_target_rounds_up_and_is_off_at_zero() -> None:
    assert headroom_target(10, 15) == 2
    assert headroom_target(10, 0) == 0
    assert headroom_short(room(n1=(10, 9)), 15) == 1
    assert headroom_short(room(n1=(10, 5)), 15) == 0


def test_pods_off_the_inventory_are_never_at_risk() -> None:
    pods = [holder("a", node="cordoned")]
    (stop,) = plan([booking(1, 1, S1)], pods, {"h100": room(n1=(1, 1))})
    assert stop.classes["h100"].risks == {}
    (unknown,) = plan([booking(1, 1, S1, gpu_class="a100")], pods, {})
    assert (unknown.classes["a100"].free, unknown.classes["a100"].risks) == (0, {})
