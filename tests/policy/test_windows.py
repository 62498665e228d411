"""Window arithmetic and the chained guarantee (R8–R10)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import model
from shared.policy.windows import (
    chain,
    expired,
    guarantee_end,
    is_open,
    kin,
    kin_key,
    runtime_limit_seconds,
    within_horizon,
)
from tests.policy.builders import HOUR, NOW, reservation

ANCHOR = reservation(1, start=NOW - HOUR, end=NOW + HOUR).facts
T1 = NOW + HOUR


def link(rid: int, start_h: float, end_h: float, **kw: object) -> model.ReservationFacts:
    return reservation(
        rid,
        start=NOW + timedelta(hours=start_h),
        end=NOW + timedelta(hours=end_h),
        **kw,  # type: ignore[arg-type]
    ).facts


def test_window_is_half_open() -> None:
    assert is_open(ANCHOR, NOW - HOUR)
    assert not is_open(ANCHOR, NOW + HOUR)
    assert not is_open(reservation(state=model.State.CANCELLED).facts, NOW)


def test_expiry_is_strictly_after_the_end() -> None:
    assert not expired(ANCHOR, NOW + HOUR)
    assert expired(ANCHOR, NOW + HOUR + timedelta(seconds=1))


@pytest.mark.parametrize(
    ("start_h", "horizon_min", "inside"),
    [
        pytest.param(0.5, 30, True, id="opens exactly at the horizon"),
        pytest.param(0.51, 30, False, id="opens just after the horizon"),
        pytest.param(0.1, 0, False, id="a zero horizon means open now only"),
        pytest.param(-1, 0, True, id="already open"),
    ],
)
def test_horizon(start_h: float, horizon_min: int, inside: bool) -> None:
    facts = link(2, start_h, 3)
    assert within_horizon(facts, NOW, timedelta(minutes=horizon_min)) is inside


@pytest.mark.parametrize(
    ("others", "expected_h"),
    [
        pytest.param([], 1, id="no follow-on: the window's own end"),
        pytest.param([link(2, 1, 2)], 2, id="one abutting booking extends it"),
        pytest.param([link(2, 1, 2), link(3, 2, 4)], 4, id="a chain of two"),
        pytest.param([link(2, 1.01, 2)], 1, id="a gap breaks the chain"),
        pytest.param([link(2, 1, 2, gpus=4)], 1, id="another GPU count does not chain"),
        pytest.param([link(2, 1, 2, owner="bob")], 1, id="another owner does not chain"),
        pytest.param([link(2, 1, 2, gpu_class="a100")], 1, id="another class does not chain"),
        pytest.param([link(2, 1, 2, kind=model.Kind.ON_DEMAND)], 1, id="a lease does not chain"),
        pytest.param(
            [link(2, 1, 2, state=model.State.CANCELLED)], 1, id="a cancelled booking does not"
        ),
        pytest.param([link(2, 1, 2), link(3, 1, 3)], 3, id="several abut: the longest wins"),
        pytest.param([link(2, 1, 1)], 1, id="a zero-length link never extends"),
    ],
)
def test_guarantee_chain(others: list[model.ReservationFacts], expected_h: float) -> None:
    end = guarantee_end(ANCHOR, [ANCHOR, *others], NOW, use_group=False)
    assert end == NOW + timedelta(hours=expected_h)


def test_groups_must_agree_when_the_feature_is_on() -> None:
    anchor = reservation(1, start=NOW - HOUR, end=T1, group="g1").facts
    other = link(2, 1, 2, group="g2")
    assert guarantee_end(anchor, [other], NOW, use_group=True) == T1
    assert guarantee_end(anchor, [other], NOW, use_group=False) == NOW + 2 * HOUR


def test_a_no_show_link_breaks_the_chain() -> None:
    assert guarantee_end(ANCHOR, [link(2, 1, 2)], NOW, use_group=False, no_shows={2}) == T1


def test_chain_lists_the_links_in_order() -> None:
    links = chain(ANCHOR, [link(3, 2, 4), link(2, 1, 2)], NOW, use_group=False)
    assert [f.id for f in links] == [2, 3]


@pytest.mark.parametrize(
    ("until", "best_effort", "expected"),
    [
        pytest.param(NOW + HOUR, False, 3600, id="whole seconds to the end"),
        pytest.param(NOW + timedelta(seconds=0.4), False, 1, id="floored at one second"),
        pytest.param(NOW - HOUR, False, 1, id="already past: still one"),
        pytest.param(NOW + HOUR, True, 0, id="best effort records zero"),
    ],
)
def test_runtime_limit_seconds(until: object, best_effort: bool, expected: int) -> None:
    assert runtime_limit_seconds(until, NOW, best_effort=best_effort) == expected  # type: ignore[arg-type]


@st.composite
def pools(draw: st.DrawFn) -> list[model.ReservationFacts]:
    """Up to 12 bookings over two owners, classes, counts and groups, on whole hours
    around NOW (so many abut), some cancelled or best-effort."""
    out = []
    for rid in range(1, draw(st.integers(1, 12)) + 1):
        start_h = draw(st.integers(-3, 4))
        out.append(
            reservation(
                rid,
                owner=draw(st.sampled_from(["alice", "bob"])),
                gpu_class=draw(st.sampled_from(["h100", "a100"])),
                gpus=draw(st.sampled_from([1, 2])),
                start=NOW + timedelta(hours=start_h),
                end=NOW + timedelta(hours=start_h + draw(st.integers(1, 3))),
                kind=draw(st.sampled_from([model.Kind.BOOKING, model.Kind.BEST_EFFORT])),
                state=draw(st.sampled_from([model.State.ACTIVE, model.State.CANCELLED])),
                group=draw(st.sampled_from([None, "lab", "ops"])),
            ).facts
        )
    return out


@settings(max_examples=200, deadline=None)
@given(pools(), st.booleans())
def test_a_chain_over_its_anchors_kin_is_the_chain_over_the_whole_pool(
    pool: list[model.ReservationFacts], use_group: bool
) -> None:
    """``kin`` groups the pool by what every link shares with its anchor, so a pass may
    walk each chain over its anchor's group alone."""
    groups = kin(pool)
    assert sorted(f.id for g in groups.values() for f in g) == sorted(f.id for f in pool)
    for anchor in pool:
        mine = groups[kin_key(anchor)]
        assert chain(anchor, mine, NOW, use_group=use_group) == chain(
            anchor, pool, NOW, use_group=use_group
        )
        assert guarantee_end(anchor, mine, NOW, use_group=use_group) == guarantee_end(
            anchor, pool, NOW, use_group=use_group
        )
