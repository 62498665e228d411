"""webhook.clientCA: the CA of the API server's client certificate reaches the webhook
as a mounted file named by WEBHOOK_CLIENT_CA_FILE; unset, nothing changes."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from tests.chart import render
from tests.chart.objects import container, env, one, pod_spec

CA_PATH = "/etc/webhook/client-ca/ca.crt"


def _webhook(**client_ca: Any) -> dict[str, Any]:
    return one(
        render.render(render.values(webhook={"clientCA": client_ca})), "Deployment", "webhook"
    )


def _volume(deployment: dict[str, Any]) -> dict[str, Any] | None:
    return next((v for v in pod_spec(deployment)["volumes"] if v["name"] == "client-ca"), None)


def test_unset_no_file_and_no_variable() -> None:
    deployment = one(render.render(render.values()), "Deployment", "webhook")
    assert "WEBHOOK_CLIENT_CA_FILE" not in env(deployment)
    assert _volume(deployment) is None
    assert all(m["name"] != "client-ca" for m in container(deployment)["volumeMounts"])


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"secretName": "apiserver-client-ca"}, {"secret": {"secretName": "apiserver-client-ca"}}),
        ({"configMapName": "apiserver-client-ca"}, {"configMap": {"name": "apiserver-client-ca"}}),
    ],
)
def test_a_secret_or_a_config_map_becomes_the_ca_file(
    source: dict[str, str], expected: dict[str, dict[str, str]]
) -> None:
    deployment = _webhook(**source, key="bundle.pem")
    assert env(deployment)["WEBHOOK_CLIENT_CA_FILE"] == CA_PATH
    mount = next(m for m in container(deployment)["volumeMounts"] if m["name"] == "client-ca")
    assert mount == {"name": "client-ca", "mountPath": "/etc/webhook/client-ca", "readOnly": True}
    volume = _volume(deployment)
    assert volume is not None
    ((kind, spec),) = ((k, v) for k, v in volume.items() if k != "name")
    assert {kind: {k: v for k, v in spec.items() if k != "items"}} == expected
    # No subPath: the kubelet updates the file in place and the webhook reloads it.
    assert spec["items"] == [{"key": "bundle.pem", "path": "ca.crt"}]
    assert "subPath" not in mount


def test_a_secret_and_a_config_map_together_are_refused() -> None:
    vals = render.values(webhook={"clientCA": {"secretName": "a", "configMapName": "b"}})
    with pytest.raises(helm.HelmError, match="not both"):
        render.render_manifests(render.CHART, vals)


@pytest.mark.parametrize(
    "client_ca",
    [
        {"secretName": "Upper"},
        {"secretName": "-dash"},
        {"configMapName": "has space"},
        {"secretName": 1},
        {"key": ""},
        {"key": "a/b"},
        {"secret": "x"},
    ],
)
def test_the_schema_refuses_malformed_client_ca_values(client_ca: dict[str, Any]) -> None:
    vals = render.values(webhook={"clientCA": client_ca})
    with pytest.raises(helm.HelmError, match="clientCA"):
        render.render_manifests(render.CHART, vals)
