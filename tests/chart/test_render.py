"""The chart renders, lints and validates strictly for every values set we support."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from tests.chart import render
from tests.chart.cases import CASES


@pytest.mark.parametrize("case", sorted(CASES))
def test_renders_lints_and_validates_strictly_on_oldest_and_newest_kubernetes(case: str) -> None:
    assert render.problems(render.CHART, [CASES[case]]) == []


def test_every_builtin_kind_has_a_schema_and_custom_kinds_are_only_optional_extras() -> None:
    kinds = {(d["apiVersion"], d["kind"]) for vals in CASES.values() for d in render.render(vals)}
    custom = {k for k in kinds if k[0].split("/")[0] in render.CUSTOM_GROUPS}
    assert custom == {
        ("cert-manager.io/v1", "Issuer"),
        ("cert-manager.io/v1", "Certificate"),
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
    }
    default_kinds = {(d["apiVersion"], d["kind"]) for d in render.render(CASES["default"])}
    assert not default_kinds & custom


def test_the_supported_versions_are_the_documented_ones() -> None:
    doc = (render.ROOT / "docs" / "operator" / "install.md").read_text(encoding="utf-8")
    newest = ".".join(render.NEWEST_KUBERNETES.split(".")[:2])
    assert f"Kubernetes {render.OLDEST_KUBERNETES}" in doc
    assert f"Kubernetes {newest}" in doc
    chart_yaml = (render.CHART / "Chart.yaml").read_text(encoding="utf-8")
    assert f'kubeVersion: ">={render.OLDEST_KUBERNETES}.0-0"' in chart_yaml


def test_the_crd_validates_strictly() -> None:
    found = [
        p for v in render.KUBERNETES_VERSIONS for c in render.crds() for p in render.validate(c, v)
    ]
    assert found == []


def _fails(vals: dict[str, Any], needle: str) -> None:
    with pytest.raises(helm.HelmError) as caught:
        render.render_manifests(render.CHART, vals)
    assert needle in str(caught.value)


def test_the_reservation_app_url_is_required() -> None:
    _fails({}, "reservationApi.url is required")


def test_the_schema_refuses_unknown_keys_and_bad_choices() -> None:
    _fails(render.values(webhok={"replicas": 2}), "webhok")
    _fails(render.values(webhook={"tolerationPolicy": "allow"}), "tolerationPolicy")
    _fails(render.values(webhook={"timeoutSeconds": 31}), "timeoutSeconds")
    _fails(render.values(securityContext={"runAsUser": 0}), "runAsUser")


def test_standby_reconcilers_need_leader_election() -> None:
    vals = render.values(reconciler={"replicas": 2, "leaderElection": {"enabled": False}})
    _fails(vals, "leaderElection")
