"""Does a toleration tolerate ``gpu-class-reservation=<class>:NoSchedule``?"""

from __future__ import annotations

from typing import Any

import pytest

from shared import vocab
from shared.policy.tolerations import (
    added_reservation_tolerations,
    granted_toleration,
    is_granted,
    reservation_tolerations,
    tolerates_reservation,
)
from tests.policy.builders import PodBuilder

KEY = vocab.RESERVATION_TAINT_KEY
NS = vocab.TAINT_EFFECT_NO_SCHEDULE


@pytest.mark.parametrize(
    ("toleration", "h100", "any_class"),
    [
        pytest.param(granted_toleration("h100"), True, True, id="the granted toleration"),
        pytest.param(
            {"key": KEY, "value": "h100", "effect": NS}, True, True, id="operator defaults to Equal"
        ),
        pytest.param({"key": KEY, "value": "a100", "effect": NS}, False, True, id="another class"),
        pytest.param(
            {"key": KEY, "operator": "Exists"}, True, True, id="our key, any value, any effect"
        ),
        pytest.param({"operator": "Exists"}, True, True, id="Exists without a key tolerates all"),
        pytest.param(
            {"operator": "Exists", "effect": NS}, True, True, id="Exists without key, NoSchedule"
        ),
        pytest.param(
            {"operator": "Exists", "effect": "NoExecute"}, False, False, id="another effect"
        ),
        pytest.param(
            {"key": KEY, "value": "h100", "effect": "PreferNoSchedule"},
            False,
            False,
            id="PreferNoSchedule does not tolerate NoSchedule",
        ),
        pytest.param({"key": KEY, "value": "h100"}, True, True, id="an empty effect means all"),
        pytest.param({"key": "other", "operator": "Exists"}, False, False, id="another key"),
        pytest.param({"value": "h100", "effect": NS}, False, False, id="no key and Equal"),
        pytest.param(
            {"key": KEY, "operator": "Lt", "value": "1"}, False, False, id="unknown operator"
        ),
        pytest.param("garbage", False, False, id="not an object"),
        pytest.param(
            {"key": 5, "operator": "Exists"}, True, True, id="a non-string key reads as no key"
        ),
    ],
)
def test_tolerates(toleration: Any, h100: bool, any_class: bool) -> None:
    assert tolerates_reservation(toleration, "h100") is h100
    assert tolerates_reservation(toleration) is any_class


def test_granted_is_an_exact_match() -> None:
    assert is_granted(granted_toleration("h100"), "h100")
    assert not is_granted(granted_toleration("h100"), "a100")
    assert not is_granted({"key": KEY, "operator": "Exists", "effect": NS}, "h100")
    assert not is_granted(None, "h100")


def test_reservation_tolerations_lists_indexes_of_every_offender() -> None:
    pod = (
        PodBuilder()
        .tolerate(key="node.kubernetes.io/not-ready", operator="Exists", effect="NoExecute")
        .reservation_toleration("a100")
        .tolerate(operator="Exists")
        .build()
    )
    assert reservation_tolerations(pod) == [1, 2]
    assert reservation_tolerations({"spec": {"tolerations": "x"}}) == []


def test_added_tolerations_ignore_toleration_seconds_changes() -> None:
    old = PodBuilder().tolerate(key="a", operator="Exists", effect="NoExecute", tolerationSeconds=1)
    new = PodBuilder().tolerate(key="a", operator="Exists", effect="NoExecute", tolerationSeconds=9)
    assert added_reservation_tolerations(old.build(), new.build()) == []
    assert added_reservation_tolerations(old.build(), new.reservation_toleration().build()) == [
        granted_toleration("h100")
    ]


def test_an_existing_reservation_toleration_is_not_an_addition() -> None:
    pod = PodBuilder().reservation_toleration().build()
    assert added_reservation_tolerations(pod, pod) == []
