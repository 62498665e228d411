"""The sandbox installs what the chart renders (``sandbox/chart.py``), so they cannot drift.

Compared against an independent rendering by the chart tests' own helper; the only
difference allowed is the ``caBundle`` the sandbox adds. A second test replays every
Kubernetes call the walker found through the sandbox's RBAC rule matcher over exactly
the objects the sandbox installs.
"""

from __future__ import annotations

from typing import Any

import pytest

from sandbox import chart
from shared import vocab
from tests.chart import render
from tests.chart.rbac_walk import COMPONENTS, walk

NS = "sandbox-ns"
SANDBOX = chart.objects(NS)
RENDERED = render.render(chart.SANDBOX_VALUES, namespace=NS)


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace", ""), meta["name"])


def test_every_installed_object_is_the_rendered_object() -> None:
    rendered = {_key(d): d for d in [*RENDERED, *render.crds()]}
    for obj in SANDBOX.install_order():
        assert obj == rendered[_key(obj)], _key(obj)


def test_the_sandbox_installs_all_of_the_charts_rbac() -> None:
    rbac = {_key(d) for d in RENDERED if d["kind"] in chart.RBAC_KINDS}
    installed = {_key(d) for d in SANDBOX.install_order() if d["kind"] in chart.RBAC_KINDS}
    assert installed == rbac
    assert set(SANDBOX.service_accounts) == set(COMPONENTS)


def test_the_ca_bundle_is_the_only_difference() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    trusted = chart.with_ca_bundle(SANDBOX.webhook_configuration, pem)
    assert all(h["clientConfig"]["caBundle"] for h in trusted["webhooks"])
    assert "caBundle" not in SANDBOX.webhook_configuration["webhooks"][0]["clientConfig"]
    assert chart.without_ca_bundle(trusted) == SANDBOX.webhook_configuration


def test_the_sandbox_rbac_allows_every_call_and_refuses_the_forbidden() -> None:
    rbac = pytest.importorskip("sandbox.kube.rbac")
    admission_api = pytest.importorskip("sandbox.kube.admission_api")

    def allowed(component: str, verb: str, group: str, resource: str, name: str) -> bool:
        plural, _, sub = resource.partition("/")
        user = admission_api.UserInfo(f"system:serviceaccount:{NS}:{component}", "uid", ())
        req = rbac.Request(user, verb, group, plural, sub, NS, "" if verb == "create" else name)
        rules = [
            r
            for obj in SANDBOX.rbac[component]
            if obj["kind"] in ("Role", "ClusterRole")
            for r in obj["rules"]
        ]
        return any(rbac.rule_allows(rule, req) for rule in rules)

    names = {
        "leases": vocab.LEADER_LEASE_NAME,
        "secrets": f"{SANDBOX.service_accounts['webhook']}-tls",
        "mutatingwebhookconfigurations": SANDBOX.webhook_configuration["metadata"]["name"],
    }
    found = walk()
    for component in COMPONENTS:
        for verb, group, resource in found.permissions(component):
            name = names.get(resource, "some-object")
            assert allowed(component, verb, group, resource, name), (component, verb, resource)
    assert not allowed("webhook", "delete", "", "pods", "p")
    assert not allowed("webhook", "get", "", "secrets", names["secrets"])
    assert not allowed("certs", "get", "", "secrets", "someone-elses-secret")
    assert not allowed("reconciler", "update", "coordination.k8s.io", "leases", "other-lease")
