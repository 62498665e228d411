"""The capacity audit: app-side counts against the node inventory (R37)."""

from __future__ import annotations

import pytest

from shared.policy.capacity import AppClass, ClassAudit, app_counts, audit
from shared.policy.inventory import NodeFacts, build_inventory


def gpu_node(name: str, gpus: int, cls: str = "h100") -> NodeFacts:
    return NodeFacts(name, (cls,), gpus, None, schedulable=True, ready=True, deleting=False)


def test_app_counts_take_the_effective_count_and_skip_what_cannot_be_audited() -> None:
    counts = app_counts(
        [
            AppClass("h100", 12),
            AppClass("a100", None),  # neither effective nor total: unknown
            AppClass(None, 8),  # no Kubernetes label
            AppClass("l40s", 4, active=False),  # cannot be booked
            AppClass("v100", 2),
            AppClass("v100", 3),  # two classes, one label: the app admits against both
            AppClass("t4", -2),  # a negative count from the app offers nothing
        ]
    )
    assert counts == {"h100": 12, "v100": 5, "t4": 0}


def test_audit_flags_overcommit_with_its_deficit_and_reports_the_other_way() -> None:
    inv = build_inventory(
        [gpu_node("h1", 4), gpu_node("h2", 4), gpu_node("a1", 16, "a100")], [], ["l40s"]
    )
    rows = audit(inv, {"h100": 12, "a100": 8, "l40s": 0})
    assert rows["h100"] == ClassAudit("h100", 12, 8)
    assert (rows["h100"].mismatch, rows["h100"].overcommitted, rows["h100"].deficit) == (
        True,
        True,
        4,
    )
    assert (rows["a100"].mismatch, rows["a100"].overcommitted, rows["a100"].deficit) == (
        True,
        False,
        0,
    )
    assert not rows["l40s"].mismatch
    assert list(rows) == ["a100", "h100", "l40s"]


@pytest.mark.parametrize(
    ("app", "physical"),
    [
        pytest.param(None, 8, id="the app gives no count"),
        pytest.param(8, None, id="the class is on no node and unknown to the inventory"),
    ],
)
def test_an_unknown_side_is_never_overcommitted(app: int | None, physical: int | None) -> None:
    row = ClassAudit("h100", app, physical)
    assert (row.mismatch, row.overcommitted, row.deficit) == (False, False, 0)


def test_a_class_only_on_nodes_is_audited_with_the_app_side_unknown() -> None:
    rows = audit(build_inventory([gpu_node("x1", 2, "x")], []), {})
    assert rows == {"x": ClassAudit("x", None, 2)}


def test_a_known_class_without_nodes_is_physically_zero_and_overcommitted() -> None:
    rows = audit(build_inventory([], [], ["h100"]), {"h100": 4})
    assert rows["h100"].deficit == 4
