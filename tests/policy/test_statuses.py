"""What a pod nothing admits is told (NoReservation): every reason, in a stable order."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest

from shared import vocab
from shared.model import GPUReservation, Kind, State
from shared.policy import statuses
from shared.policy.matching import MatchRules, Miss, profile
from shared.policy.routing import route
from tests.policy.builders import NOW, PodBuilder, gpu_pod, reservation

UTC = ZoneInfo("UTC")
RULES = MatchRules()
NO_GROUP = "the pod names no usage group"
NO_RUNTIME = f"the pod sets no usable {vocab.MINIMUM_RUNTIME_SECONDS}"
LEASES_OFF = "on-demand admission is off in this cluster"


def told(pod: PodBuilder, *pool: GPUReservation, rules: MatchRules = RULES) -> str:
    seen = profile(pod.build(), rules)
    found = route(seen, pool, NOW, rules)
    status = statuses.unmatched(
        seen, found, pool, NOW, rules, known_classes=None, contact=None, zone=UTC
    )
    assert status.reason == vocab.REASON_NO_RESERVATION
    return status.message


@pytest.mark.parametrize(
    ("rules", "annotations", "expected"),
    [
        pytest.param(MatchRules(), {}, [NO_GROUP, NO_RUNTIME], id="no group and no runtime"),
        pytest.param(
            MatchRules(leases_enabled=False),
            {},
            [LEASES_OFF, NO_GROUP, NO_RUNTIME],
            id="leases off as well: the cluster first",
        ),
        pytest.param(
            MatchRules(),
            {vocab.USAGE_GROUP: "vision"},
            [NO_RUNTIME],
            id="a group but no runtime",
        ),
        pytest.param(
            MatchRules(leases_enabled=False),
            {vocab.USAGE_GROUP: "vision", vocab.MINIMUM_RUNTIME_SECONDS: "3600"},
            [LEASES_OFF],
            id="a pod that would qualify, in a cluster without leases",
        ),
    ],
)
def test_every_reason_the_pod_cannot_get_a_lease_is_named_in_order(
    rules: MatchRules, annotations: dict[str, str], expected: list[str]
) -> None:
    pod = gpu_pod()
    for key, value in annotations.items():
        pod.annotate(key, value)
    assert statuses.why_not_on_demand(profile(pod.build(), rules), rules) == expected
    message = told(pod, rules=rules)
    assert message.endswith(f"It cannot be admitted on demand either: {'; '.join(expected)}.")


def test_the_reasons_keep_their_order_whatever_the_caches_order() -> None:
    other_class = reservation(1, gpu_class="a100")
    cancelled = reservation(2, state=State.CANCELLED)
    pod = gpu_pod()
    first = route(profile(pod.build(), RULES), [other_class, cancelled], NOW, RULES)
    second = route(profile(pod.build(), RULES), [cancelled, other_class], NOW, RULES)
    assert first.misses == second.misses == (Miss.CANCELLED, Miss.OTHER_CLASS)


def test_another_users_reservations_are_never_described_to_the_pod() -> None:
    """Bob's cancelled booking and his lease say nothing about Alice's pod: she is told
    she holds no booking, not that "your booking was cancelled"."""
    bobs = (
        reservation(1, owner="bob", state=State.CANCELLED),
        reservation(2, owner="bob", kind=Kind.ON_DEMAND),
        reservation(3, owner="bob"),
    )
    message = told(gpu_pod(), *bobs)
    assert message.startswith("No reservation matches this pod: you hold no booking.")
    assert "bob" not in message
    assert "cancelled" not in message
    assert "lease" not in message.split(". It cannot")[0]


def test_what_is_wrong_with_the_pod_itself_is_said_when_the_owner_has_no_booking() -> None:
    unlabelled = PodBuilder().gpus(1)
    found = route(profile(unlabelled.build(), RULES), [reservation(1, owner="bob")], NOW, RULES)
    assert found.misses == (Miss.NO_CLASS_LABEL, Miss.OTHER_OWNER)
