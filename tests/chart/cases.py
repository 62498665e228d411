"""The values sets the chart is rendered with: the default install and each major option."""

from __future__ import annotations

from typing import Any

from tests.chart.render import values

MONITORING = [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
APP_PEERS = [{"ipBlock": {"cidr": "192.0.2.0/24"}}]

CASES: dict[str, dict[str, Any]] = {
    "default": values(),
    "cert-manager": values(certManager={"enabled": True}),
    "object-selector-fallback": values(webhook={"objectSelectorFallback": True}),
    "service-monitor": values(serviceMonitor={"enabled": True, "labels": {"release": "prom"}}),
    "monitoring": values(
        serviceMonitor={"enabled": True},
        prometheusRule={"enabled": True, "labels": {"release": "prom"}},
        grafanaDashboard={"enabled": True, "annotations": {"grafana_folder": "GPUs"}},
    ),
    "network-policy": values(networkPolicy={"enabled": True}),
    "network-policy-with-peers": values(
        networkPolicy={
            "enabled": True,
            "webhookFrom": APP_PEERS,
            "reconcilerFrom": APP_PEERS,
            "metricsFrom": MONITORING,
        }
    ),
    "network-policy-api-server": values(
        networkPolicy={
            "enabled": True,
            "apiServer": {
                "cidrs": ["10.0.0.0/28", "fd00:10::/64"],
                "podSelector": {"matchLabels": {"component": "kube-apiserver"}},
            },
            "metricsFrom": MONITORING,
        }
    ),
    "mutual-tls": values(webhook={"clientCA": {"secretName": "apiserver-client-ca"}}),
    "token-secret": values(inboundApi={"tokenSecret": {"name": "push-token", "key": "t"}}),
    "scaled-out": values(webhook={"replicas": 5}, reconciler={"replicas": 2}),
}
