"""On-demand preflight guards (R15), guard 3's exemption, guard 4's fit and R19's schedule."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from shared.appclient.outcomes import (
    Denial,
    Denied,
    Forbidden,
    Invalid,
    Rejected,
    Transient,
    TransientReason,
)
from shared.policy.affinity import NodeConstraint, constraint_of
from shared.policy.ondemand import (
    STUCK_GRACE_SECONDS,
    Candidate,
    ClassNode,
    ClassState,
    Held,
    Outcome,
    booked_peak,
    node_fit,
    preflight,
    retry_after,
    stuck_holder,
)
from shared.policy.verdict import Scheduled

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
TAINTED = Scheduled(
    "False",
    "Unschedulable",
    "0/2 nodes are available: 2 node(s) had untolerated taint {gpu-class-reservation: a100}.",
)
CPU_SHORT = Scheduled("False", "Unschedulable", "0/2 nodes are available: 2 Insufficient cpu.")
NODES = (
    ClassNode("a1", (("disk", "ssd"), ("kubernetes.io/hostname", "a1")), 1),
    ClassNode("a2", (("disk", "hdd"), ("kubernetes.io/hostname", "a2")), 3),
)
H100 = {"h100": (ClassNode("h1", (("disk", "nvme"),), 4),)}


def cand(
    gpus: int = 1,
    scheduled: Scheduled | None = TAINTED,
    constraint: NodeConstraint | None = None,
    best_effort: bool = False,
) -> Candidate:
    return Candidate(
        "Pending", scheduled, "a100", gpus, best_effort, constraint or NodeConstraint()
    )


def selector(**labels: str) -> NodeConstraint:
    return constraint_of({"nodeSelector": labels})


@pytest.mark.parametrize(
    ("candidate", "known", "state", "claimed", "held"),
    [
        pytest.param(cand(), True, ClassState(NODES), 0, None, id="1 GPU, class has room"),
        pytest.param(cand(scheduled=None), True, ClassState(NODES), 0, Held.NO_VERDICT,
                     id="no verdict yet"),
        pytest.param(cand(scheduled=CPU_SHORT), True, ClassState(NODES), 0, Held.NOT_FIXABLE,
                     id="non-GPU shortage"),
        pytest.param(cand(), False, ClassState(NODES), 0, Held.UNKNOWN_CLASS,
                     id="class unknown to the app"),
        pytest.param(cand(scheduled=None), False, ClassState(NODES), 0, Held.UNKNOWN_CLASS,
                     id="unknown class told before any verdict"),
        pytest.param(cand(), True, ClassState(()), 0, Held.DRAINED, id="drained class"),
        pytest.param(cand(), True, ClassState(None), 0, None, id="no inventory: fail open"),
        pytest.param(cand(constraint=selector(disk="nvme")), True, ClassState(NODES), 0,
                     Held.NO_MATCHING_NODE, id="selector matches no class node"),
        pytest.param(cand(gpus=2, constraint=selector(disk="ssd")), True, ClassState(NODES), 0,
                     Held.WAITING_FOR_NODE, id="allowed node short, another has room"),
        pytest.param(cand(constraint=selector(disk="ssd")), True, ClassState(NODES), 0, None,
                     id="allowed node has room"),
        pytest.param(cand(), True, ClassState(NODES, stuck=True), 0, Held.STUCK_HOLDER,
                     id="stuck holder"),
        pytest.param(cand(), True, ClassState(NODES, overcommitted=True), 0, Held.OVERCOMMIT,
                     id="overcommit, pause mode"),
        pytest.param(cand(), True, ClassState(NODES, overcommitted=True, physical=1), 0,
                     None, id="overcommit, fits"),
        pytest.param(cand(), True, ClassState(NODES, overcommitted=True, physical=1), 1,
                     Held.OVERCOMMIT, id="overcommit, batch took the room"),
        pytest.param(cand(best_effort=True), True, ClassState(NODES, overcommitted=True), 0,
                     None, id="best-effort exempt from guard 4"),
        pytest.param(cand(gpus=4), True, ClassState(NODES), 0, Held.FRAGMENTED,
                     id="4 GPUs, 4 free but split"),
        pytest.param(cand(gpus=3), True, ClassState(NODES), 0, None, id="3 GPUs fit on a2"),
        pytest.param(cand(gpus=3), True, ClassState(NODES), 1, Held.FRAGMENTED,
                     id="3 GPUs, batch granted one already"),
        pytest.param(cand(gpus=1), True, ClassState(NODES), 3, None,
                     id="1-GPU asks skip guard 5"),
        pytest.param(cand(best_effort=True), True, ClassState((ClassNode("x", (), 0),)), 0,
                     Held.FRAGMENTED, id="best-effort: guard 5 at any size"),
    ],
)  # fmt: skip
def test_preflight(
    candidate: Candidate, known: bool, state: ClassState, claimed: int, held: Held | None
) -> None:
    assert preflight(candidate, known, state, claimed, H100, NOW).held is held


def test_overcommit_fit_counts_bookings_that_start_during_the_lease() -> None:
    soon = ((NOW + timedelta(minutes=30), NOW + timedelta(hours=3), 3),)
    state = ClassState(NODES, overcommitted=True, physical=4, booked=soon)
    short = Candidate("Pending", TAINTED, "a100", 1, False, NodeConstraint(), duration_s=600)
    long = Candidate("Pending", TAINTED, "a100", 2, False, NodeConstraint(), duration_s=7200)
    assert preflight(short, True, state, 0, {}, NOW).held is None
    assert preflight(long, True, state, 0, {}, NOW).held is Held.OVERCOMMIT


def test_no_matching_node_names_the_classes_it_matches() -> None:
    got = preflight(cand(constraint=selector(disk="nvme")), True, ClassState(NODES), 0, H100)
    assert got.elsewhere == ("h100",)


def test_a_constraint_allowing_every_node_narrows_nothing() -> None:
    assert node_fit(selector(), 8, NODES) is None
    wide = constraint_of(
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}
                        ]
                    }
                }
            }
        }
    )
    assert node_fit(wide, 8, NODES) is None


def test_required_affinity_on_host_name() -> None:
    only_a1 = constraint_of(
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["a1"]}
                                ]
                            }
                        ]
                    }
                }
            }
        }
    )
    assert node_fit(only_a1, 1, NODES) is None
    assert node_fit(only_a1, 2, NODES) is Held.WAITING_FOR_NODE


@pytest.mark.parametrize(
    "spec",
    [
        {"nodeSelector": "disk=ssd"},
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": 7}}},
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": "x"}, 3]}}}},
    ],
)  # fmt: skip
def test_malformed_constraints_never_raise(spec: dict[str, object]) -> None:
    node_fit(constraint_of(spec), 1, NODES)


def test_stuck_holder_counts_only_unexplained_stalls() -> None:
    assert stuck_holder("Pending", TAINTED, NodeConstraint(), 1, NODES)
    assert not stuck_holder("Running", TAINTED, NodeConstraint(), 1, NODES)
    assert not stuck_holder("Pending", None, NodeConstraint(), 1, NODES)
    # Pinned to a node of another class, or to a full node while another has room.
    assert not stuck_holder("Pending", TAINTED, selector(disk="nvme"), 1, NODES)
    assert not stuck_holder("Pending", TAINTED, selector(disk="ssd"), 2, NODES)


@pytest.mark.parametrize(
    ("admitted_for", "stuck"),
    [
        pytest.param(0.0, False, id="just admitted: the verdict is from before"),
        pytest.param(STUCK_GRACE_SECONDS - 0.1, False, id="the scheduler may not have retried"),
        pytest.param(STUCK_GRACE_SECONDS, True, id="retried and still unschedulable"),
        pytest.param(None, True, id="admission instant unknown: long ago"),
    ],
)
def test_a_holder_is_stuck_only_once_the_scheduler_had_time_to_retry_it(
    admitted_for: float | None, stuck: bool
) -> None:
    assert stuck_holder("Pending", TAINTED, NodeConstraint(), 1, NODES, admitted_for) is stuck


def test_booked_peak_over_the_lease_window() -> None:
    h = timedelta(hours=1)
    windows = [(NOW - h, NOW + h, 4), (NOW + h / 2, NOW + 2 * h, 6), (NOW + 3 * h, NOW + 4 * h, 9)]
    assert booked_peak(windows, NOW, NOW + 2 * h) == 10
    assert booked_peak(windows, NOW, NOW + h / 4) == 4
    assert booked_peak([], NOW, NOW + h) == 0


def rng() -> random.Random:
    return random.Random(7)


def test_contended_denial_retries_in_two_to_five_minutes() -> None:
    got = retry_after(Denied(Denial(detail="busy")), NOW, 3, rng().random)
    assert got.outcome is Outcome.CONTENDED
    assert timedelta(minutes=2) <= got.at - NOW <= timedelta(minutes=5)
    assert got.errors == 0


def test_not_before_is_waited_for_but_capped_at_thirty_minutes() -> None:
    later = retry_after(
        Denied(Denial(not_before=NOW + timedelta(minutes=10))), NOW, 0, rng().random
    )
    assert later.at == NOW + timedelta(minutes=10)
    far = retry_after(Denied(Denial(not_before=NOW + timedelta(hours=5))), NOW, 0, rng().random)
    assert far.at == NOW + timedelta(minutes=30)


def test_structural_denial_backs_off_to_thirty_minutes() -> None:
    errors, delays = 0, []
    for _ in range(10):
        got = retry_after(Denied(Denial(retryable=False)), NOW, errors, rng().random)
        assert got.outcome is Outcome.STRUCTURAL
        errors = got.errors
        delays.append(got.at - NOW)
    assert delays[-1] <= timedelta(minutes=30)
    assert delays[-1] >= timedelta(minutes=15)
    assert delays[0] < delays[-1]


@pytest.mark.parametrize(
    ("failure", "outcome"),
    [
        (Rejected("user alice"), Outcome.REJECTED),
        (Forbidden(), Outcome.ERROR),
        (Invalid(422), Outcome.ERROR),
        (Transient(TransientReason.NETWORK), Outcome.TRANSIENT),
        (Transient(TransientReason.SERVER_ERROR, status=503), Outcome.TRANSIENT),
    ],
)
def test_other_failures(failure: object, outcome: Outcome) -> None:
    got = retry_after(failure, NOW, 0, rng().random)  # type: ignore[arg-type]
    assert got.outcome is outcome
    assert got.at - NOW <= timedelta(minutes=5)
    assert got.errors == (0 if outcome is Outcome.TRANSIENT else 1)
