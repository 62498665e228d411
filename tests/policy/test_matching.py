"""Which reservations match a pod (R1, R2, R5, R6)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import model, vocab
from shared.policy.gpus import GpuRequest
from shared.policy.matching import (
    MatchRules,
    Miss,
    PodProfile,
    jit_eligible,
    mismatch,
    profile,
)
from tests.policy.builders import NOW, PodBuilder, gpu_pod, reservation

PLAIN = MatchRules()
GROUPS = MatchRules(required_group_label="course")
GROUPS_DEFAULT = MatchRules(required_group_label="course", default_usage_group="cs101")


def miss(pod: PodBuilder, res: model.GPUReservation, rules: MatchRules = PLAIN) -> Miss | None:
    return mismatch(res.facts, profile(pod.build(), rules), NOW, rules)


@pytest.mark.parametrize(
    ("pod", "res", "rules", "expected"),
    [
        pytest.param(gpu_pod(), reservation(), PLAIN, None, id="owner, class and window match"),
        pytest.param(
            gpu_pod(namespace="bob"),
            reservation(),
            PLAIN,
            Miss.OTHER_OWNER,
            id="bob's pod, alice's booking",
        ),
        pytest.param(
            gpu_pod(cls="a100"), reservation(), PLAIN, Miss.OTHER_CLASS, id="another class"
        ),
        pytest.param(
            PodBuilder().gpus("1"), reservation(), PLAIN, Miss.NO_CLASS_LABEL, id="no class label"
        ),
        pytest.param(
            gpu_pod().label(vocab.GPU_CLASS_LABEL, ""),
            reservation(),
            PLAIN,
            Miss.NO_CLASS_LABEL,
            id="an empty class label",
        ),
        pytest.param(
            gpu_pod(),
            reservation(kind=model.Kind.ON_DEMAND),
            PLAIN,
            Miss.NOT_A_BOOKING,
            id="a lease is not a booking",
        ),
        pytest.param(
            gpu_pod(),
            reservation(state=model.State.CANCELLED),
            PLAIN,
            Miss.CANCELLED,
            id="cancelled",
        ),
        pytest.param(
            gpu_pod(),
            reservation(start=NOW - timedelta(hours=3), end=NOW),
            PLAIN,
            Miss.ENDED,
            id="ended exactly now",
        ),
        pytest.param(
            gpu_pod(),
            reservation(start=NOW + timedelta(days=1), end=NOW + timedelta(days=2)),
            PLAIN,
            None,
            id="a future booking matches",
        ),
        pytest.param(
            gpu_pod().gpus("0.5"),
            reservation(),
            PLAIN,
            Miss.UNREADABLE_GPUS,
            id="unreadable GPU count",
        ),
        pytest.param(
            gpu_pod().label("course", "cs101"),
            reservation(group="cs101"),
            GROUPS,
            None,
            id="groups on, same group",
        ),
        pytest.param(
            gpu_pod().label("course", "cs102"),
            reservation(group="cs101"),
            GROUPS,
            Miss.OTHER_GROUP,
            id="groups on, another group",
        ),
        pytest.param(
            gpu_pod(),
            reservation(group="cs101"),
            GROUPS,
            Miss.NO_GROUP,
            id="groups on, pod without group",
        ),
        pytest.param(
            gpu_pod(),
            reservation(group="cs101"),
            GROUPS_DEFAULT,
            None,
            id="the default group stands in",
        ),
        pytest.param(
            gpu_pod().label("course", "cs101"),
            reservation(),
            GROUPS,
            Miss.OTHER_GROUP,
            id="a booking without group never matches",
        ),
        pytest.param(
            gpu_pod().label("course", "x"),
            reservation(group="y"),
            PLAIN,
            None,
            id="groups off: group ignored",
        ),
    ],
)
def test_mismatch(
    pod: PodBuilder, res: model.GPUReservation, rules: MatchRules, expected: Miss | None
) -> None:
    assert miss(pod, res, rules) == expected


@given(
    failing=st.sets(st.sampled_from(list(Miss))),
    groups_on=st.booleans(),
    pod_group=st.sampled_from([None, "cs101"]),
)
def test_mismatch_names_the_first_failed_check_in_miss_order(
    failing: set[Miss], groups_on: bool, pod_group: str | None
) -> None:
    """Any combination of failed checks: the one told is the first in ``Miss``'s order
    (the order the checks run), and none is told when all pass."""
    rules = GROUPS if groups_on else PLAIN
    no_group = Miss.NO_GROUP in failing
    if no_group and not groups_on:  # only a group rule can fail on a missing group
        failing = failing - {Miss.NO_GROUP}
    group = None if no_group else pod_group if not groups_on else "cs101"
    pod = PodProfile(
        owner="alice",
        gpu_class=None if Miss.NO_CLASS_LABEL in failing else "h100",
        group=group,
        gpus=GpuRequest(0, "bad") if Miss.UNREADABLE_GPUS in failing else GpuRequest(1),
    )
    res = reservation(
        7,
        owner="bob" if Miss.OTHER_OWNER in failing else "alice",
        gpu_class="a100" if Miss.OTHER_CLASS in failing or pod.gpu_class is None else "h100",
        kind=model.Kind.ON_DEMAND if Miss.NOT_A_BOOKING in failing else model.Kind.BOOKING,
        state=model.State.CANCELLED if Miss.CANCELLED in failing else model.State.ACTIVE,
        end=NOW if Miss.ENDED in failing else None,
        start=NOW - timedelta(hours=3) if Miss.ENDED in failing else None,
        group="cs102" if Miss.OTHER_GROUP in failing else "cs101" if groups_on else None,
    )
    if pod.gpu_class is None:
        failing = failing | {Miss.OTHER_CLASS}
    if not groups_on:
        failing = failing - {Miss.OTHER_GROUP}
    no_shows = {7} if Miss.NO_SHOW in failing else set()
    expected = next((m for m in Miss if m in failing), None)
    assert mismatch(res.facts, pod, NOW, rules, no_shows) == expected


def test_declared_no_show_never_matches() -> None:
    res = reservation(7)
    assert mismatch(res.facts, profile(gpu_pod().build(), PLAIN), NOW, PLAIN, {7}) == Miss.NO_SHOW


def test_namespace_argument_overrides_the_pods_own() -> None:
    pod = gpu_pod().build()
    del pod["metadata"]["namespace"]
    assert profile(pod, PLAIN, namespace="alice").owner == "alice"
    assert profile(pod, PLAIN).owner == ""


@pytest.mark.parametrize(
    ("pod", "rules", "eligible"),
    [
        pytest.param(gpu_pod(), PLAIN, False, id="no runtime, no group"),
        pytest.param(
            gpu_pod()
            .annotate(vocab.MINIMUM_RUNTIME_SECONDS, "3600")
            .annotate(vocab.USAGE_GROUP, "g"),
            PLAIN,
            True,
            id="runtime and usage-group annotations",
        ),
        pytest.param(
            gpu_pod().annotate(vocab.MINIMUM_RUNTIME_SECONDS, "3600"),
            PLAIN,
            False,
            id="runtime but no group",
        ),
        pytest.param(
            gpu_pod().annotate(vocab.MINIMUM_RUNTIME_SECONDS, "0").annotate(vocab.USAGE_GROUP, "g"),
            PLAIN,
            False,
            id="zero runtime is unusable",
        ),
        pytest.param(
            gpu_pod()
            .annotate(vocab.MINIMUM_RUNTIME_SECONDS, "1h")
            .annotate(vocab.USAGE_GROUP, "g"),
            PLAIN,
            False,
            id="non-integer runtime",
        ),
        pytest.param(
            gpu_pod().annotate(vocab.USAGE_GROUP, "g"),
            MatchRules(default_minimum_runtime_s=60),
            True,
            id="default runtime stands in",
        ),
        pytest.param(
            gpu_pod(),
            MatchRules(default_minimum_runtime_s=60, default_usage_group="g"),
            True,
            id="both defaults",
        ),
        pytest.param(
            gpu_pod()
            .annotate(vocab.MINIMUM_RUNTIME_SECONDS, "60")
            .annotate(vocab.USAGE_GROUP, "g"),
            MatchRules(leases_enabled=False),
            False,
            id="leases disabled",
        ),
        pytest.param(
            gpu_pod()
            .annotate(vocab.RUNTIME_GUARANTEE, vocab.RUNTIME_GUARANTEE_NONE)
            .annotate(vocab.USAGE_GROUP, "g"),
            MatchRules(best_effort_enabled=True),
            True,
            id="best effort",
        ),
        pytest.param(
            gpu_pod()
            .annotate(vocab.RUNTIME_GUARANTEE, vocab.RUNTIME_GUARANTEE_NONE)
            .annotate(vocab.USAGE_GROUP, "g"),
            PLAIN,
            False,
            id="best effort asked but off",
        ),
        pytest.param(
            gpu_pod()
            .annotate(vocab.MINIMUM_RUNTIME_SECONDS, "60")
            .annotate(vocab.USAGE_GROUP, "g"),
            GROUPS,
            False,
            id="group label feature ignores the annotation",
        ),
        pytest.param(
            gpu_pod().annotate(vocab.MINIMUM_RUNTIME_SECONDS, "60").label("course", "c"),
            GROUPS,
            True,
            id="group from the label",
        ),
    ],
)
def test_jit_eligibility(pod: PodBuilder, rules: MatchRules, eligible: bool) -> None:
    assert jit_eligible(profile(pod.build(), rules), rules) is eligible


def test_malformed_metadata_reads_as_empty() -> None:
    pod = {"metadata": {"labels": ["x"], "annotations": {"a": 1}, "namespace": 3}, "spec": {}}
    prof = profile(pod, PLAIN)
    assert prof.gpu_class is None
    assert prof.owner == ""
