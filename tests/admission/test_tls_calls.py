"""Real HTTPS calls to a throwaway webhook through a Service and its Endpoints."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from sandbox.kube.admission import MemorySource, WebhookDispatcher
from sandbox.kube.admission.hook import AdmissionError
from tests.admission.builders import answer, attrs, configuration, pod, webhook
from tests.admission.webhook_server import serve_webhook

pytestmark = pytest.mark.anyio

SERVICE, NAMESPACE = "hook", "hooks"
DNS_NAME = f"{SERVICE}.{NAMESPACE}.svc"


def label(review: dict[str, Any]) -> dict[str, Any]:
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}]
    return answer(review, patch=ops, warnings=["labelled by the throwaway webhook"])


def cluster(ports: list[int], ca_bundle: str, **fields: Any) -> MemorySource:
    source = MemorySource()
    client = {
        "service": {"namespace": NAMESPACE, "name": SERVICE, "path": "/mutate", "port": 443},
        "caBundle": ca_bundle,
    }
    raw = webhook("throwaway.example.com", clientConfig=client, timeoutSeconds=3, **fields)
    source.put(
        "admissionregistration.k8s.io", "mutatingwebhookconfigurations", configuration("t", raw)
    )
    service = {
        "metadata": {"name": SERVICE, "namespace": NAMESPACE},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]},
    }
    subsets = [
        {"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port}]}
        for port in ports
    ]
    source.put("", "services", service)
    source.put(
        "", "endpoints", {"metadata": {"name": SERVICE, "namespace": NAMESPACE}, "subsets": subsets}
    )
    return source


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_service_name_is_verified_and_the_endpoint_dialled(tmp_path: Path) -> None:
    with serve_webhook(tmp_path, [DNS_NAME], label) as hook:
        result = await WebhookDispatcher(cluster([hook.port], hook.ca_bundle)).admit(
            attrs(pod("p"))
        )
    assert result.object is not None
    assert result.object["metadata"]["labels"] == {"mutated": "yes"}
    assert result.warnings == ["labelled by the throwaway webhook"]
    assert hook.paths == ["/mutate?timeout=3s"]


async def test_replicas_behind_one_service_take_turns(tmp_path: Path) -> None:
    with (
        serve_webhook(tmp_path, [DNS_NAME], label) as first,
        serve_webhook(tmp_path, [DNS_NAME], label, ca=first.ca) as second,
    ):
        dispatcher = WebhookDispatcher(cluster([first.port, second.port], first.ca_bundle))
        for _ in range(4):
            await dispatcher.admit(attrs(pod("p")))
    assert (len(first.reviews), len(second.reviews)) == (2, 2)


async def test_a_certificate_for_another_name_counts_as_down(tmp_path: Path) -> None:
    with serve_webhook(tmp_path, ["other.hooks.svc"], label) as hook:
        failing = WebhookDispatcher(cluster([hook.port], hook.ca_bundle))
        with pytest.raises(AdmissionError) as info:
            await failing.admit(attrs(pod("p")))
        ignoring = WebhookDispatcher(cluster([hook.port], hook.ca_bundle, failurePolicy="Ignore"))
        result = await ignoring.admit(attrs(pod("p")))
    assert info.value.code == 500
    message = info.value.status["message"]
    assert message.startswith(
        'Internal error occurred: failed calling webhook "throwaway.example.com": '
    )
    assert f'Post "https://{DNS_NAME}:443/mutate?timeout=3s"' in message
    assert "certificate" in message
    assert result.object == pod("p")
    assert hook.reviews == []


async def test_an_untrusted_ca_counts_as_down(tmp_path: Path) -> None:
    with serve_webhook(tmp_path, [DNS_NAME], label) as hook:
        with serve_webhook(tmp_path, [DNS_NAME], label) as other:
            source = cluster([hook.port], other.ca_bundle)
        with pytest.raises(AdmissionError, match="failed calling webhook"):
            await WebhookDispatcher(source).admit(attrs(pod("p")))


async def test_a_down_webhook_under_ignore_lets_the_pod_through(tmp_path: Path) -> None:
    with serve_webhook(tmp_path, [DNS_NAME], label) as hook:
        bundle = hook.ca_bundle
    source = cluster([closed_port()], bundle, failurePolicy="Ignore")
    result = await WebhookDispatcher(source).admit(attrs(pod("p")))
    assert result.object == pod("p")
