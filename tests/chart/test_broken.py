"""Acceptance 1: the chart tests catch a broken template.

Each test copies the chart into ``tmp_path``, breaks one thing the way a hurried edit
would, and runs the same checks the real chart passes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from shared import vocab
from tests.chart import render
from tests.chart.cases import CASES
from tests.chart.rbac_walk import bound_roles, granted, mismatch, service_account_of, walk


def _copy(tmp_path: Path) -> Path:
    chart = tmp_path / render.CHART.name
    shutil.copytree(render.CHART, chart)
    return chart


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_the_untouched_copy_passes(tmp_path: Path) -> None:
    assert render.problems(_copy(tmp_path), [CASES["default"]]) == []


def test_a_wrong_indentation_fails(tmp_path: Path) -> None:
    chart = _copy(tmp_path)
    # `securityContext` of the webhook pod slides under `automountServiceAccountToken`'s
    # level by one space too few: no longer valid YAML.
    _edit(
        chart / "templates" / "webhook-deployment.yaml",
        '      securityContext:\n        {{- include "gpu-reservation.podSecurityContext"',
        '     securityContext:\n        {{- include "gpu-reservation.podSecurityContext"',
    )
    assert render.problems(chart, [CASES["default"]]) != []


def test_a_field_nested_one_level_too_deep_fails_schema_validation(tmp_path: Path) -> None:
    chart = _copy(tmp_path)
    # Still valid YAML, but `failurePolicy` lands inside `clientConfig`.
    _edit(
        chart / "templates" / "webhook-configuration.yaml",
        "    failurePolicy: Ignore",
        "      failurePolicy: Ignore",
    )
    found = render.problems(chart, [CASES["default"]])
    assert any("failurePolicy" in p for p in found), found


def test_a_removed_rbac_verb_fails_the_rbac_walk(tmp_path: Path) -> None:
    chart = _copy(tmp_path)
    _edit(
        chart / "templates" / "webhook-rbac.yaml",
        'verbs: ["get", "list", "watch"]',
        'verbs: ["get", "list"]',
    )
    docs = render.render(CASES["default"], chart=chart)
    account = service_account_of(docs, "Deployment", "webhook")
    given = granted(bound_roles(docs, render.NAMESPACE, account))
    assert render.problems(chart, [CASES["default"]]) == []  # only the walk can tell
    assert mismatch(walk().permissions("webhook"), given) == {
        "missing (the code makes these calls)": [("watch", vocab.CRD_GROUP, vocab.CRD_PLURAL)]
    }
