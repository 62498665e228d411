"""The NetworkPolicies: who may reach the webhook's TLS port (the API server, named by
``networkPolicy.apiServer``), and the warning when nobody is named."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from shared import vocab
from tests.chart import render
from tests.chart.cases import CASES, MONITORING
from tests.chart.objects import of_kind, one

KUBE_SYSTEM = {"matchLabels": {vocab.NAMESPACE_NAME_LABEL: "kube-system"}}
APISERVER_PODS = {"matchLabels": {"component": "kube-apiserver"}}
OPEN_WARNING = "The webhook's TLS port accepts AdmissionReviews from any pod"


def _policy(**network_policy: Any) -> list[dict[str, Any]]:
    docs = render.render(render.values(networkPolicy={"enabled": True, **network_policy}))
    return list(one(docs, "NetworkPolicy", "webhook")["spec"]["ingress"])


def _webhook_peers(**network_policy: Any) -> list[dict[str, Any]] | None:
    """The ``from`` of the TLS port's rule; None when the port is open to everyone."""
    rule = next(r for r in _policy(**network_policy) if r["ports"][0]["port"] == "https")
    return rule.get("from")


def test_off_by_default_and_the_notes_say_the_port_is_open() -> None:
    assert not of_kind(render.render(CASES["default"]), "NetworkPolicy")
    assert OPEN_WARNING in render.notes(CASES["default"])


def test_enabled_without_a_source_leaves_the_port_open_and_says_so() -> None:
    assert _webhook_peers() is None
    assert OPEN_WARNING in render.notes(CASES["network-policy"])


def test_named_sources_or_mutual_tls_silence_the_warning() -> None:
    assert OPEN_WARNING not in render.notes(CASES["network-policy-api-server"])
    assert OPEN_WARNING not in render.notes(CASES["network-policy-with-peers"])
    assert OPEN_WARNING not in render.notes(CASES["mutual-tls"])


def test_each_cidr_becomes_an_ip_block() -> None:
    peers = _webhook_peers(apiServer={"cidrs": ["10.0.0.0/28", "fd00:10::/64"]})
    assert peers == [{"ipBlock": {"cidr": "10.0.0.0/28"}}, {"ipBlock": {"cidr": "fd00:10::/64"}}]


def test_api_server_pods_are_looked_for_in_kube_system_unless_told() -> None:
    assert _webhook_peers(apiServer={"podSelector": APISERVER_PODS}) == [
        {"podSelector": APISERVER_PODS, "namespaceSelector": KUBE_SYSTEM}
    ]
    elsewhere = {"matchLabels": {vocab.NAMESPACE_NAME_LABEL: "control-plane"}}
    assert _webhook_peers(
        apiServer={"podSelector": APISERVER_PODS, "namespaceSelector": elsewhere}
    ) == [{"podSelector": APISERVER_PODS, "namespaceSelector": elsewhere}]


def test_a_namespace_selector_alone_admits_those_namespaces() -> None:
    assert _webhook_peers(apiServer={"namespaceSelector": KUBE_SYSTEM}) == [
        {"namespaceSelector": KUBE_SYSTEM}
    ]


def test_extra_peers_join_the_api_server_sources() -> None:
    extra = [{"ipBlock": {"cidr": "192.0.2.0/24"}}]
    peers = _webhook_peers(apiServer={"cidrs": ["10.0.0.0/28"]}, webhookFrom=extra)
    assert peers == [{"ipBlock": {"cidr": "10.0.0.0/28"}}, *extra]


def test_the_metrics_port_keeps_its_own_peers() -> None:
    rules = _policy(apiServer={"cidrs": ["10.0.0.0/28"]}, metricsFrom=MONITORING)
    metrics = next(r for r in rules if r["ports"][0]["port"] == "http-metrics")
    assert metrics["from"] == MONITORING


def test_the_reconciler_port_is_restricted_only_when_every_client_is_named() -> None:
    """Probes, scrapes and the app's calls share one port: naming only the app's
    addresses would cut the scrapes, so the port stays open until both are named."""
    app = [{"ipBlock": {"cidr": "192.0.2.0/24"}}]

    def peers(**np: Any) -> Any:
        docs = render.render(render.values(networkPolicy={"enabled": True, **np}))
        return one(docs, "NetworkPolicy", "reconciler")["spec"]["ingress"][0].get("from")

    assert peers(reconcilerFrom=app) is None
    assert peers(reconcilerFrom=app, metricsFrom=MONITORING) == app + MONITORING


@pytest.mark.parametrize(
    "api_server",
    [
        {"cidrs": ["10.0.0.0"]},
        {"cidrs": ["10.0.0.0/33"]},
        {"cidrs": ["not-a-cidr/8"]},
        {"cidrs": ["fd00::/129"]},
        {"cidrs": "10.0.0.0/8"},
        {"cidrs": [8]},
        {"cidrs": ["10.0.0.0/8", "10.0.0.0/8"]},
        {"podSelector": {"component": "kube-apiserver"}},
        {"podSelector": {"matchLabels": {"component": 1}}},
        {"namespaceSelector": {"matchExpressions": [{"key": "x", "operator": "Is"}]}},
        {"namespaceSelector": []},
        {"cidr": ["10.0.0.0/8"]},
    ],
)
def test_the_schema_refuses_malformed_api_server_sources(api_server: dict[str, Any]) -> None:
    vals = render.values(networkPolicy={"enabled": True, "apiServer": api_server})
    with pytest.raises(helm.HelmError, match="apiServer"):
        render.render_manifests(render.CHART, vals)
