"""Real HTTPS calls to throwaway webhooks through a Service and its Endpoints: one
kept-alive client per client configuration, an endpoint chosen per round trip."""

from __future__ import annotations

import base64
import random
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trustme

from sandbox.kube.admission import MemorySource, WebhookDispatcher
from sandbox.kube.admission.hook import AdmissionError
from tests.admission.builders import answer, attrs, configuration, pod, webhook
from tests.admission.webhook_server import ThrowawayWebhook, serve_webhook

pytestmark = pytest.mark.anyio

SERVICE, NAMESPACE = "hook", "hooks"
DNS_NAME = f"{SERVICE}.{NAMESPACE}.svc"
CONFIGS = ("admissionregistration.k8s.io", "mutatingwebhookconfigurations")


def label(review: dict[str, Any]) -> dict[str, Any]:
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}]
    return answer(review, patch=ops, warnings=["labelled by the throwaway webhook"])


def allow(review: dict[str, Any]) -> dict[str, Any]:
    return answer(review)


def put_service(source: MemorySource, name: str, hooks: list[ThrowawayWebhook]) -> None:
    """Service ``name`` (port 443 named https) and its Endpoints: one subset per distinct
    port, listing the IPs serving on it (both shapes: one IP with many ports, many IPs
    on one port)."""
    service = {
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]},
    }
    by_port: dict[int, list[str]] = {}
    for hook in hooks:
        by_port.setdefault(hook.port, []).append(hook.host)
    subsets = [
        {"addresses": [{"ip": ip} for ip in ips], "ports": [{"name": "https", "port": port}]}
        for port, ips in by_port.items()
    ]
    source.put("", "services", service)
    source.put(
        "", "endpoints", {"metadata": {"name": name, "namespace": NAMESPACE}, "subsets": subsets}
    )


def put_config(
    source: MemorySource, config: str, service: str, ca_bundle: str, **fields: Any
) -> None:
    """Configuration ``config`` with one webhook calling ``service`` (timeout 3 s unless
    ``fields`` say otherwise)."""
    client = {
        "service": {"namespace": NAMESPACE, "name": service, "path": "/mutate", "port": 443},
        "caBundle": ca_bundle,
    }
    raw = webhook(f"{config}.example.com", clientConfig=client, **{"timeoutSeconds": 3, **fields})
    source.put(*CONFIGS, configuration(config, raw))


def cluster(hooks: list[ThrowawayWebhook], ca_bundle: str, **fields: Any) -> MemorySource:
    source = MemorySource()
    put_service(source, SERVICE, hooks)
    put_config(source, "t", SERVICE, ca_bundle, **fields)
    return source


def bundle(*cas: trustme.CA) -> str:
    return base64.b64encode(b"".join(ca.cert_pem.bytes() for ca in cas)).decode()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def replicas(
    tmp_path: Path, shape: str, count: int, ca: trustme.CA
) -> Iterator[list[ThrowawayWebhook]]:
    """``count`` webhooks under one CA: ``ports`` — all on 127.0.0.1, a port each;
    ``ips`` — each on its own loopback IP, all on one port."""
    with ExitStack() as stack:
        first = stack.enter_context(
            serve_webhook(tmp_path, [DNS_NAME], label, ca=ca, host="127.0.0.2")
        )
        found = [first]
        for index in range(3, count + 2):
            host = "127.0.0.2" if shape == "ports" else f"127.0.0.{index}"
            port = 0 if shape == "ports" else first.port
            found.append(
                stack.enter_context(
                    serve_webhook(tmp_path, [DNS_NAME], label, ca=ca, host=host, port=port)
                )
            )
        yield found


async def test_the_service_name_is_verified_and_the_endpoint_dialled(tmp_path: Path) -> None:
    with serve_webhook(tmp_path, [DNS_NAME], label) as hook:
        async with WebhookDispatcher(cluster([hook], hook.ca_bundle)) as dispatcher:
            result = await dispatcher.admit(attrs(pod("p")))
    assert result.object is not None
    assert result.object["metadata"]["labels"] == {"mutated": "yes"}
    assert result.warnings == ["labelled by the throwaway webhook"]
    assert hook.paths == ["/mutate?timeout=3s"]


async def test_calls_reuse_one_kept_alive_connection(tmp_path: Path) -> None:
    with serve_webhook(tmp_path, [DNS_NAME], label) as hook:
        async with WebhookDispatcher(cluster([hook], hook.ca_bundle)) as dispatcher:
            for _ in range(5):
                await dispatcher.admit(attrs(pod("p")))
            assert dispatcher.http.clients_made == 1
    assert len(hook.reviews) == 5
    assert hook.connections == 1  # one TLS handshake for five calls


@pytest.mark.parametrize("shape", ["ports", "ips"], ids=["one-ip-many-ports", "many-ips-one-port"])
async def test_each_round_trip_picks_an_endpoint(tmp_path: Path, shape: str) -> None:
    ca = trustme.CA()
    with replicas(tmp_path, shape, 3, ca) as hooks:
        source = cluster(hooks, bundle(ca))
        async with WebhookDispatcher(source, rng=random.Random(7)) as dispatcher:
            for _ in range(30):
                await dispatcher.admit(attrs(pod("p")))
    assert sum(len(h.reviews) for h in hooks) == 30
    assert all(h.reviews for h in hooks), [len(h.reviews) for h in hooks]
    # each replica is reached over one connection, kept alive between its turns
    assert [h.connections for h in hooks] == [1, 1, 1]


async def test_a_new_ca_bundle_makes_a_new_client(tmp_path: Path) -> None:
    other = trustme.CA()
    with serve_webhook(tmp_path, [DNS_NAME], label) as hook:
        source = cluster([hook], hook.ca_bundle)
        async with WebhookDispatcher(source) as dispatcher:
            await dispatcher.admit(attrs(pod("p")))
            # a bundle that no longer trusts the server: the kept-alive connection of
            # the old client must not carry the call
            put_config(source, "t", SERVICE, bundle(other))
            with pytest.raises(AdmissionError, match="certificate"):
                await dispatcher.admit(attrs(pod("p")))
            put_config(source, "t", SERVICE, bundle(other, hook.ca))
            await dispatcher.admit(attrs(pod("p")))
            assert dispatcher.http.clients_made == 3
            assert dispatcher.http.open_clients == 1  # the replaced ones were closed
    assert len(hook.reviews) == 2
    assert hook.connections == 2


async def test_a_pooled_connection_is_never_used_for_another_service_name(
    tmp_path: Path,
) -> None:
    with serve_webhook(tmp_path, [DNS_NAME], allow) as hook:
        source = MemorySource()
        put_service(source, SERVICE, [hook])
        put_service(source, "other", [hook])  # the same endpoint behind another name
        put_config(source, "a", SERVICE, hook.ca_bundle)
        put_config(source, "b", "other", hook.ca_bundle)
        async with WebhookDispatcher(source) as dispatcher:
            with pytest.raises(AdmissionError) as info:
                await dispatcher.admit(attrs(pod("p")))
    assert 'failed calling webhook "b.example.com"' in info.value.status["message"]
    assert "certificate" in info.value.status["message"]
    assert len(hook.reviews) == 1  # only a's call; b's handshake was refused


async def test_an_endpoint_removed_from_the_endpoints_is_not_called_again(
    tmp_path: Path,
) -> None:
    ca = trustme.CA()
    with replicas(tmp_path, "ips", 2, ca) as (first, second):
        source = cluster([first, second], bundle(ca))
        async with WebhookDispatcher(source, rng=random.Random(3)) as dispatcher:
            for _ in range(10):
                await dispatcher.admit(attrs(pod("p")))
            assert first.reviews
            assert second.reviews
            before = len(first.reviews)
            assert (first.host, first.port) in dispatcher.http.pooled_endpoints()
            put_service(source, SERVICE, [second])
            for _ in range(10):
                result = await dispatcher.admit(attrs(pod("p")))
                assert result.object is not None
                assert result.object["metadata"]["labels"] == {"mutated": "yes"}
            # the removed endpoint's kept-alive connections were closed, not kept idle
            assert dispatcher.http.pooled_endpoints() == {(second.host, second.port)}
    assert len(first.reviews) == before
    assert len(first.reviews) + len(second.reviews) == 20


async def test_a_replica_that_went_away_fails_over_under_the_failure_policy(
    tmp_path: Path,
) -> None:
    ca = trustme.CA()
    with serve_webhook(tmp_path, [DNS_NAME], label, ca=ca, host="127.0.0.2") as survivor:
        with serve_webhook(
            tmp_path, [DNS_NAME], label, ca=ca, host="127.0.0.3", port=survivor.port
        ) as gone:
            source = cluster([survivor, gone], bundle(ca), failurePolicy="Ignore")
            dispatcher = WebhookDispatcher(source, rng=random.Random(5))
            for _ in range(6):
                await dispatcher.admit(attrs(pod("p")))
            assert gone.reviews  # it holds a kept-alive connection now
        # stopped but still listed: its calls fail (refused), the pod goes through
        outcomes = [await dispatcher.admit(attrs(pod("p"))) for _ in range(10)]
        unlabelled = [o for o in outcomes if o.object == pod("p")]
        assert 0 < len(unlabelled) < 10
        put_service(source, SERVICE, [survivor])  # the endpoints controller caught up
        outcomes = [await dispatcher.admit(attrs(pod("p"))) for _ in range(5)]
        await dispatcher.aclose()
    assert all(o.object != pod("p") for o in outcomes)
    assert dispatcher.http.open_clients == 0


async def test_a_call_over_its_timeout_is_cut_and_its_connection_dropped(
    tmp_path: Path,
) -> None:
    with serve_webhook(tmp_path, [DNS_NAME], label) as hook:
        hook.delays.append(1.5)  # the first answer comes after the 1 s deadline
        async with WebhookDispatcher(cluster([hook], hook.ca_bundle, timeoutSeconds=1)) as d:
            with pytest.raises(AdmissionError) as info:
                await d.admit(attrs(pod("p")))
            result = await d.admit(attrs(pod("p")))
    assert "context deadline exceeded" in info.value.status["message"]
    # the second call got its own answer (a stale one would fail the uid check)
    assert result.object is not None
    assert result.object["metadata"]["labels"] == {"mutated": "yes"}
    assert hook.connections == 2


async def test_a_certificate_for_another_name_counts_as_down(tmp_path: Path) -> None:
    with serve_webhook(tmp_path, ["other.hooks.svc"], label) as hook:
        async with WebhookDispatcher(cluster([hook], hook.ca_bundle)) as failing:
            with pytest.raises(AdmissionError) as info:
                await failing.admit(attrs(pod("p")))
        source = cluster([hook], hook.ca_bundle, failurePolicy="Ignore")
        async with WebhookDispatcher(source) as ignoring:
            result = await ignoring.admit(attrs(pod("p")))
    assert info.value.code == 500
    message = info.value.status["message"]
    assert message.startswith('Internal error occurred: failed calling webhook "t.example.com": ')
    assert f'Post "https://{DNS_NAME}:443/mutate?timeout=3s"' in message
    assert "certificate" in message
    assert result.object == pod("p")
    assert hook.reviews == []


async def test_an_untrusted_ca_counts_as_down(tmp_path: Path) -> None:
    with serve_webhook(tmp_path, [DNS_NAME], label) as hook:
        with serve_webhook(tmp_path, [DNS_NAME], label) as other:
            source = cluster([hook], other.ca_bundle)
        async with WebhookDispatcher(source) as dispatcher:
            with pytest.raises(AdmissionError, match="failed calling webhook"):
                await dispatcher.admit(attrs(pod("p")))


async def test_a_down_webhook_under_ignore_lets_the_pod_through(tmp_path: Path) -> None:
    with serve_webhook(tmp_path, [DNS_NAME], label) as hook:
        bundle_ = hook.ca_bundle
    hook.port = closed_port()
    async with WebhookDispatcher(cluster([hook], bundle_, failurePolicy="Ignore")) as d:
        result = await d.admit(attrs(pod("p")))
    assert result.object == pod("p")


async def test_a_url_webhook_is_called_at_its_address_over_a_kept_alive_connection(
    tmp_path: Path,
) -> None:
    with serve_webhook(tmp_path, ["127.0.0.1"], label) as hook:
        source = MemorySource()
        client = {"url": f"https://127.0.0.1:{hook.port}/mutate", "caBundle": hook.ca_bundle}
        raw = webhook("url.example.com", clientConfig=client, timeoutSeconds=3)
        source.put(*CONFIGS, configuration("u", raw))
        async with WebhookDispatcher(source) as dispatcher:
            results = [await dispatcher.admit(attrs(pod("p"))) for _ in range(3)]
    assert all(r.object is not None and r.object["metadata"]["labels"] for r in results)
    assert hook.paths == ["/mutate?timeout=3s"] * 3
    assert hook.connections == 1
