"""Admit, queue, JIT or nothing, and the choice among bookings (R4, R6)."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from shared import model, vocab
from shared.model import GPUReservation
from shared.policy.matching import MatchRules, Miss, profile
from shared.policy.routing import Path, Pool, Route, Wait, fallback, route, route_in
from tests.policy.builders import HOUR, NOW, PodBuilder, gpu_pod, reservation

RULES = MatchRules()


def go(pod: PodBuilder, *res: GPUReservation, rules: MatchRules = RULES, **kw: object) -> Route:
    return route(profile(pod.build(), rules), res, NOW, rules, **kw)  # type: ignore[arg-type]


def later(rid: int, hours: float, **kw: object) -> GPUReservation:
    start = NOW + timedelta(hours=hours)
    return reservation(rid, start=start, end=start + HOUR, **kw)  # type: ignore[arg-type]


def test_an_open_booking_with_budget_admits() -> None:
    r = go(gpu_pod(1), reservation(1, gpus=2, holds=(1,)))
    assert r.path is Path.ADMIT
    assert [c.facts.id for c in r.candidates] == [1]


def test_the_soonest_starting_open_booking_is_tried_first() -> None:
    early = reservation(1, start=NOW - 2 * HOUR)
    late = reservation(2, start=NOW - HOUR)
    r = go(gpu_pod(), late, early)
    assert [c.facts.id for c in r.candidates] == [1, 2]


def test_ties_prefer_more_spare_budget_then_the_lower_id() -> None:
    a, b, c = reservation(3, gpus=2), reservation(2, gpus=4), reservation(1, gpus=4)
    assert [x.facts.id for x in go(gpu_pod(), a, b, c).candidates] == [1, 2, 3]


def test_a_full_open_booking_queues_with_reason_full() -> None:
    r = go(gpu_pod(1), reservation(1, gpus=2, holds=(1, 1)))
    assert (r.path, r.wait) == (Path.QUEUE, Wait.FULL)


def test_excluded_reservations_count_as_full() -> None:
    r = go(gpu_pod(1), reservation(1), exclude={"res-1"})
    assert (r.path, r.wait, r.reservation and r.reservation.name) == (
        Path.QUEUE,
        Wait.FULL,
        "res-1",
    )


def test_excluding_one_falls_through_to_the_next_open_booking() -> None:
    r = go(gpu_pod(1), reservation(1), reservation(2), exclude={"res-1"})
    assert r.path is Path.ADMIT
    assert [c.name for c in r.candidates] == ["res-2"]


def test_a_booking_opening_within_the_horizon_is_waited_for_even_if_jit_eligible() -> None:
    pod = gpu_pod().annotate(vocab.MINIMUM_RUNTIME_SECONDS, "60").annotate(vocab.USAGE_GROUP, "g")
    r = go(pod, later(1, 0.25))
    assert (r.path, r.wait) == (Path.QUEUE, Wait.OPENS_LATER)


def test_jit_beats_a_far_booking() -> None:
    pod = gpu_pod().annotate(vocab.MINIMUM_RUNTIME_SECONDS, "60").annotate(vocab.USAGE_GROUP, "g")
    assert go(pod, later(1, 5)).path is Path.JIT


def test_without_jit_a_far_booking_is_waited_for() -> None:
    r = go(gpu_pod(), later(1, 5))
    assert (r.path, r.wait) == (Path.QUEUE, Wait.OPENS_LATER)


def test_fallback_prefers_a_booking_big_enough() -> None:
    small, big = later(1, 2, gpus=1), later(2, 3, gpus=4)
    r = go(gpu_pod(2), small, big)
    assert r.reservation is big
    assert fallback([small], 2) is small
    assert fallback([], 1) is None


def test_a_booking_too_small_is_waited_for_with_that_reason() -> None:
    r = go(gpu_pod(3), reservation(1, gpus=2))
    assert (r.path, r.wait) == (Path.QUEUE, Wait.TOO_SMALL)


def test_nothing_matches_names_the_owners_near_misses() -> None:
    r = go(gpu_pod(), reservation(1, gpu_class="a100"), reservation(2, owner="bob"))
    assert r.path is Path.NONE
    assert r.misses == (Miss.OTHER_CLASS,)


def test_a_no_show_booking_is_named_as_the_miss() -> None:
    """R14: the only booking was declared a no-show; the pod is told so, not "no booking"."""
    r = go(gpu_pod(), reservation(1), no_shows=frozenset({1}))
    assert r.path is Path.NONE
    assert r.misses == (Miss.NO_SHOW,)


def test_nothing_at_all_means_no_booking_of_the_owner() -> None:
    assert go(gpu_pod(), reservation(1, owner="bob")).misses == (Miss.OTHER_OWNER,)
    assert go(gpu_pod()).misses == (Miss.OTHER_OWNER,)


def test_over_no_reservations_an_eligible_pod_goes_jit_any_other_nowhere() -> None:
    """The short way over an empty pool (a namespace without bookings) gives what the
    general path gives: JIT when eligible, else only "no booking of yours", whatever
    is wrong with the pod itself (no reservation to tell it by)."""
    eligible = (
        gpu_pod().annotate(vocab.MINIMUM_RUNTIME_SECONDS, "60").annotate(vocab.USAGE_GROUP, "g")
    )
    assert go(eligible).path is Path.JIT
    assert go(eligible, rules=MatchRules(leases_enabled=False)).path is Path.NONE
    for pod in (gpu_pod(), gpu_pod().gpus("x"), PodBuilder().gpus("1")):
        assert go(pod) == Route(Path.NONE, misses=(Miss.OTHER_OWNER,))


def test_an_unreadable_pod_matches_nothing() -> None:
    r = go(gpu_pod().gpus("x"), reservation(1))
    assert (r.path, r.misses) == (Path.NONE, (Miss.UNREADABLE_GPUS,))


def test_a_zero_gpu_pod_passes_any_budget() -> None:
    pod = PodBuilder().cls("h100")
    assert go(pod, reservation(1, gpus=1, holds=(1,))).path is Path.ADMIT


owners_st = st.sampled_from(["alice", "bob", "carol"])


@settings(max_examples=200, deadline=None)
@given(
    specs=st.lists(
        st.tuples(
            owners_st,
            st.sampled_from(["h100", "a100"]),
            st.integers(1, 4),
            st.integers(-3, 3),
            st.integers(0, 2),
            st.booleans(),
        ),
        max_size=8,
    ),
    owner=owners_st,
    cls=st.sampled_from(["h100", "a100", None]),
    gpus=st.integers(1, 5),
)
def test_routing_over_the_owners_share_is_routing_over_the_pool(specs, owner, cls, gpus) -> None:
    pool = [
        later(i + 1, hours, owner=o, gpu_class=c, gpus=g, holds=(1,) * held)
        if not cancelled
        else later(i + 1, hours, owner=o, gpu_class=c, gpus=g, state=model.State.CANCELLED)
        for i, (o, c, g, hours, held, cancelled) in enumerate(specs)
    ]
    builder = PodBuilder(namespace=owner).gpus(str(gpus))
    if cls is not None:
        builder = builder.cls(cls)
    prof = profile(builder.build(), RULES)
    assert route_in(prof, Pool(pool), NOW, RULES) == route(prof, pool, NOW, RULES)
