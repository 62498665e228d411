"""Property: over random pod populations, the backstop never finds a legitimately
admitted pod — whatever the phases, creation times, wiped ledgers and foreign pods
around it — and always finds a pod that declared its own way in."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.backstop import Breach, Scope, findings
from reconciler.pods import PodView, project_pod
from shared import model
from shared.clock import format_utc
from shared.policy.matching import MatchRules
from tests.reconciler.builders import NS, START
from tests.reconciler.upholdkit import H, facts, raw_pod

NOW = START + timedelta(minutes=30)
OWNERS = ("alice", "bob", "carol")
SCOPE = Scope(NS, frozenset({"kube-system"}))

#: (start offset hours, state) of a reservation: open, ended, upcoming, cancelled.
WINDOWS = st.tuples(st.integers(-3, 1), st.sampled_from(list(model.State)))


@st.composite
def reservations(draw: st.DrawFn) -> dict[str, model.GPUReservation]:
    rows = draw(st.lists(st.tuples(st.sampled_from(OWNERS), WINDOWS), min_size=1, max_size=5))
    out = {}
    for rid, (owner, (offset, state)) in enumerate(rows, start=1):
        start = START + offset * H
        res = model.GPUReservation(facts(rid, start, start + H, owner=owner, state=state), ())
        out[res.name] = res
    return out


def admitted(name: str, res: model.GPUReservation, claim: str, age_s: int, phase: str) -> PodView:
    """A pod the webhook or the queue admitted: the owner's namespace, its own claim."""
    raw = raw_pod(name, res.name, ns=res.facts.owner, claim=claim)
    raw["metadata"]["creationTimestamp"] = format_utc(NOW - timedelta(seconds=age_s))
    raw["status"]["phase"] = phase
    return view(raw)


def view(raw: dict[str, Any]) -> PodView:
    got = project_pod(raw, MatchRules())
    assert got is not None
    return got


PHASES = st.sampled_from(["Pending", "Running", "Succeeded", "Failed"])


@st.composite
def populations(draw: st.DrawFn) -> tuple[dict[str, model.GPUReservation], list[PodView]]:
    pool = draw(reservations())
    names = sorted(pool)
    legit = []
    for i in range(draw(st.integers(0, 12))):
        res = pool[draw(st.sampled_from(names))]
        age = draw(st.integers(0, 7200))
        legit.append(admitted(f"job-{i}", res, f"claim-{i}", age, draw(PHASES)))
    return pool, legit


@settings(max_examples=200, deadline=None)
@given(populations(), st.booleans())
def test_legitimately_admitted_pods_are_never_found(
    world: tuple[dict[str, model.GPUReservation], list[PodView]], wiped: bool
) -> None:
    pool, legit = world
    # Holds play no part: a wiped ledger (every status emptied) changes nothing.
    if wiped:
        pool = {n: model.GPUReservation(r.facts, ()) for n, r in pool.items()}
    found = findings(legit, pool, SCOPE, NOW, mirror_current=True)
    # The one legitimate way out is the evictor's: a booking cancelled mid-window
    # (never the backstop's). So nothing here.
    assert found == []


@settings(max_examples=200, deadline=None)
@given(populations(), st.sampled_from(OWNERS), st.integers(0, 3))
def test_a_declared_pod_among_legitimate_ones_is_always_found(
    world: tuple[dict[str, model.GPUReservation], list[PodView]], ns: str, how: int
) -> None:
    pool, legit = world
    name = sorted(pool)[0]
    if how == 0:
        raw = raw_pod("intruder", None, ns=ns)
    elif how == 1:
        raw = raw_pod("intruder", "res-999", ns=ns)
    elif how == 2 and legit and not legit[0].finished:
        raw = raw_pod("intruder", legit[0].reference, ns=legit[0].namespace, claim=legit[0].claim)
    else:
        raw = raw_pod("intruder", name, ns="mallory")
    raw["metadata"]["creationTimestamp"] = format_utc(NOW + timedelta(seconds=1))
    intruder = view(raw)
    found = findings([*legit, intruder], pool, SCOPE, NOW, mirror_current=True)
    keys = {f.pod.key for f in found}
    res = pool.get(intruder.reference or "")
    evictors = (
        res is not None
        and intruder.namespace != res.facts.owner
        and res.facts.start <= NOW < res.facts.end
    )
    if evictors:  # an open booking of someone else: the evictor's case, not ours
        assert keys == set()
    else:
        assert keys == {intruder.key}
        assert found[0].breach in set(Breach)
