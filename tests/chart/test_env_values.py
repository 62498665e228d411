"""Every environment value the chart renders is one its process accepts.

The chart is rendered for a matrix of installs, and the environment of the webhook,
the reconciler and the certificates Job is read by the processes' own settings
readers: a value they refuse (``SettingsError``) or ignore with a notice fails the
test, and so does a variable the process never reads. A second test sets every
integer of the values to a large number and checks that the manifests carry it as an
integer: Helm's templates hold YAML numbers as float64, which ``quote`` and plain
interpolation print as ``1.234567e+06`` from a million up.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from certs import settings as certs_settings
from reconciler.base import settings as reconciler_settings
from shared.settings import SettingsError
from tests.chart import render
from tests.chart.cases import APP_PEERS, MONITORING
from tests.chart.objects import container, env, one
from webhook import settings as webhook_settings

NS = render.NAMESPACE
#: Variables the chart sets for the runtime, not for our settings readers.
RUNTIME_ONLY = frozenset({"PYTHONDONTWRITEBYTECODE", "TZ"})
MATRIX: dict[str, dict[str, Any]] = {
    "defaults": render.values(),
    "high-availability": render.values(webhook={"replicas": 3}, reconciler={"replicas": 2}),
    "monitoring": render.values(serviceMonitor={"enabled": True}, prometheusRule={"enabled": True}),
    "scheduling-gate": render.values(
        matching={"podSchedulingGateName": "galends.io/wait", "requiredGroupLabel": "dsmlp/course"}
    ),
    "network-policy": render.values(
        networkPolicy={
            "enabled": True,
            "apiServer": {"cidrs": ["10.0.0.0/28"]},
            "reconcilerFrom": APP_PEERS,
            "metricsFrom": MONITORING,
        }
    ),
    "cert-manager": render.values(certManager={"enabled": True}),
    # Operators' own variables, appended after the chart's (the sandbox sets its clock
    # and short intervals this way); a name the chart sets too is overridden.
    "extra-env": render.values(
        webhook={
            "extraEnv": [
                {"name": "TLS_RELOAD_SECONDS", "value": "0.2"},
                {"name": "CLOCK_FACTOR", "value": "20.0"},
            ]
        },
        reconciler={
            "extraEnv": [
                {"name": "RESERVATION_FETCH_INTERVAL", "value": "5"},
                {
                    "name": "INBOUND_API_TOKEN",
                    "valueFrom": {"secretKeyRef": {"name": "push", "key": "token"}},
                },
            ]
        },
    ),
    "everything-set": render.values(
        timezone="America/Los_Angeles",
        eventDisplayTimezone="Europe/Paris",
        inboundApi={"tokenSecret": {"name": "push-token", "key": "token"}},
        events={"supportContact": "help@example.edu"},
        webhook={"clientCA": {"secretName": "apiserver-client-ca"}, "tolerationPolicy": "deny"},
        headroom={"targetPercent": 10},
    ),
}


class Recording(Mapping[str, str]):
    """An environment that remembers which variables were looked up."""

    def __init__(self, values: dict[str, str]) -> None:
        self._values = values
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return self._values[key]

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return self._values.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def resolved(workload: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet would fill it in."""
    out: dict[str, str] = {}
    for name, value in env(workload).items():
        if isinstance(value, str):
            out[name] = value
        elif value.get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            out[name] = NS
        elif value.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            out[name] = "gpu-reservation-reconciler-7d9f-x2k4q"
        elif "secretKeyRef" in value:
            out[name] = "gpures_0123456789abcdef"
        else:
            raise AssertionError(f"{name}: unknown source {value}")
    return out


def _webhook(environment: Recording) -> list[str]:
    _, reader = webhook_settings.load(environment)
    return [f"{n.variable}: {n.reason}" for n in reader.notices]


def _reconciler(environment: Recording) -> list[str]:
    _, reader = reconciler_settings.load(environment)
    return [f"{n.variable}: {n.reason}" for n in reader.notices]


def _certs(environment: Recording) -> list[str]:
    certs_settings.read_ensure(environment)
    return []


READERS = {
    ("Deployment", "webhook"): _webhook,
    ("Deployment", "reconciler"): _reconciler,
    ("Job", "certs"): _certs,
}


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_process_accepts_every_rendered_value(case: str) -> None:
    docs = render.render(MATRIX[case])
    checked = 0
    for (kind, component), read in READERS.items():
        if kind == "Job" and MATRIX[case].get("certManager", {}).get("enabled"):
            continue  # cert-manager mode has no certificates Job
        environment = Recording(resolved(one(docs, kind, component)))
        assert read(environment) == [], component  # SettingsError propagates
        unread = set(environment) - environment.read - RUNTIME_ONLY
        assert unread == set(), component
        checked += 1
    assert checked >= 2


# --- integers stay integers ---------------------------------------------------------

#: A float printed by Go's %v: what a YAML integer becomes through float64.
FLOAT_TEXT = re.compile(r"^-?[0-9]+(\.[0-9]+)?e[+-]?[0-9]+$")


def integer_leaves() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``integer`` of the values schema: dotted path and its schema."""

    def walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
        if node.get("type") == "integer":
            yield path, node
        for key, child in (node.get("properties") or {}).items():
            yield from walk(child, f"{path}.{key}".lstrip("."))

    schema = json.loads((render.CHART / "values.schema.json").read_text(encoding="utf-8"))
    yield from walk(schema, "")


def large_integers() -> dict[str, Any]:
    """Install values with every integer as large as its schema allows (a distinct
    number from 1,000,001 up, or the schema's maximum below that)."""
    vals = render.values()
    for index, (path, schema) in enumerate(integer_leaves(), start=1):
        value = min(1_000_000 + index, schema.get("maximum", 10**9))
        node = vals
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return vals


def floats_in(value: Any, where: str = "") -> Iterator[str]:
    if isinstance(value, float) or (isinstance(value, str) and FLOAT_TEXT.match(value)):
        yield f"{where}: {value!r}"
    elif isinstance(value, dict):
        for key, child in value.items():
            yield from floats_in(child, f"{where}.{key}")
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from floats_in(child, f"{where}[{i}]")


def test_the_schema_has_integers_to_check() -> None:
    paths = dict(integer_leaves())
    assert "webhook.maxBodyBytes" in paths
    assert "securityContext.runAsUser" in paths
    assert len(paths) >= 30


@pytest.mark.parametrize("mode", [False, True], ids=["self-signed", "cert-manager"])
def test_every_integer_renders_as_an_integer(mode: bool) -> None:
    vals = render.merge(
        large_integers(),
        {"certManager": {"enabled": mode}, "prometheusRule": {"enabled": True}},
    )
    found = [
        problem
        for doc in render.render(vals)
        for problem in floats_in(doc, f"{doc['kind']}/{doc['metadata']['name']}")
    ]
    assert found == []


def test_the_check_catches_a_quoted_float() -> None:
    assert list(floats_in({"value": "3.145728e+06"})) == [".value: '3.145728e+06'"]
    assert list(floats_in({"replicas": 1.234567e6})) == [".replicas: 1234567.0"]
    assert list(floats_in({"value": "3145728", "name": "e+06"})) == []


# --- extraEnv and probe timings -------------------------------------------------------


def test_extra_env_comes_after_the_charts_own_and_wins() -> None:
    docs = render.render(MATRIX["extra-env"])
    webhook = resolved(one(docs, "Deployment", "webhook"))
    settings, _ = webhook_settings.load(webhook)
    assert webhook["TLS_RELOAD_SECONDS"] == "0.2"  # the chart's own is 10
    names = [e["name"] for e in container(one(docs, "Deployment", "reconciler"))["env"]]
    assert names[-2:] == ["RESERVATION_FETCH_INTERVAL", "INBOUND_API_TOKEN"]
    assert settings is not None


def test_an_extra_value_the_process_refuses_fails_the_check() -> None:
    vals = render.merge(
        render.values(), {"webhook": {"extraEnv": [{"name": "TLS_RELOAD_SECONDS", "value": "x"}]}}
    )
    environment = Recording(resolved(one(render.render(vals), "Deployment", "webhook")))
    with pytest.raises(SettingsError):
        _webhook(environment)


def test_extra_env_must_be_env_vars() -> None:
    for bad in ([{"value": "1"}], [{"name": "A", "value": 1}], ["A=1"], {"A": "1"}):
        with pytest.raises(Exception, match="extraEnv"):
            render.render(render.merge(render.values(), {"reconciler": {"extraEnv": bad}}))


def test_probe_timings_follow_the_values_and_a_null_drops_one() -> None:
    probes = {"readiness": {"periodSeconds": 1, "failureThreshold": None, "timeoutSeconds": 2}}
    docs = render.render(render.merge(render.values(), {"webhook": {"probes": probes}}))
    box = one(docs, "Deployment", "webhook")["spec"]["template"]["spec"]["containers"][0]
    assert box["readinessProbe"] == {
        "httpGet": {"path": "/readyz", "port": "http-metrics"},
        "periodSeconds": 1,
        "timeoutSeconds": 2,
    }
    defaults = one(render.render(render.values()), "Deployment", "reconciler")
    live = defaults["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
    assert (live["initialDelaySeconds"], live["periodSeconds"]) == (30, 30)


@pytest.mark.parametrize("bad", [0, -1, "5s", 1.5])
def test_a_probe_period_must_be_a_whole_number_of_seconds(bad: Any) -> None:
    probes = {"liveness": {"periodSeconds": bad}}
    with pytest.raises(Exception, match="periodSeconds"):
        render.render(render.merge(render.values(), {"reconciler": {"probes": probes}}))
