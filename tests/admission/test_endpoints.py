"""Service → Endpoints resolution: ready addresses of every subset, malformed entries."""

from __future__ import annotations

import random
from typing import Any

import pytest

from sandbox.kube.admission import MemorySource
from sandbox.kube.admission.config import ServiceRef
from sandbox.kube.admission.endpoints import EndpointResolver, ResolveError, endpoint_candidates

pytestmark = pytest.mark.anyio

REF = ServiceRef(namespace="hooks", name="hook", path="/mutate", port=443)


def service(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "hook", "namespace": "hooks"},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}], **spec},
    }


def endpoints(*subsets: Any) -> dict[str, Any]:
    return {"metadata": {"name": "hook", "namespace": "hooks"}, "subsets": list(subsets)}


def subset(ips: list[str], port: Any = 8443, name: str = "https", **more: Any) -> dict[str, Any]:
    return {
        "addresses": [{"ip": ip} for ip in ips],
        "ports": [{"name": name, "port": port}],
        **more,
    }


def test_every_subset_and_address_is_a_candidate() -> None:
    found = endpoint_candidates(
        service(),
        endpoints(subset(["127.0.0.2", "127.0.0.3"]), subset(["127.0.0.1"], port=41001)),
        REF,
    )
    assert found == [("127.0.0.2", 8443), ("127.0.0.3", 8443), ("127.0.0.1", 41001)]


def test_not_ready_addresses_are_never_candidates() -> None:
    ready = subset(["127.0.0.2"], notReadyAddresses=[{"ip": "127.0.0.3"}])
    only_unready = {"notReadyAddresses": [{"ip": "127.0.0.4"}], "ports": ready["ports"]}
    assert endpoint_candidates(service(), endpoints(ready, only_unready), REF) == [
        ("127.0.0.2", 8443)
    ]
    with pytest.raises(ResolveError, match="no endpoints available"):
        endpoint_candidates(service(), endpoints(only_unready), REF)


def test_only_ports_named_like_the_service_port_count() -> None:
    found = endpoint_candidates(
        service(), endpoints(subset(["127.0.0.2"], name="metrics"), subset(["127.0.0.3"])), REF
    )
    assert found == [("127.0.0.3", 8443)]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "ExternalName"}, 'unsupported service type "ExternalName"'),
        ({"ports": [{"name": "https", "port": 8443}]}, "no service port 443"),
        ({"ports": "443"}, "no service port 443"),
    ],
    ids=["external-name", "no-such-port", "ports-not-a-list"],
)
def test_a_service_that_cannot_route_fails_the_call(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ResolveError, match=message):
        endpoint_candidates(service(**spec), endpoints(subset(["127.0.0.2"])), REF)


@pytest.mark.parametrize(
    "bad",
    [
        subset(["127.0.0.9"], port="https"),
        subset(["127.0.0.9"], port=0),
        subset(["127.0.0.9"], port=70000),
        subset(["127.0.0.9"], port=True),
        subset(["127.0.0.9"], port=None),
        subset([""]),
        {"addresses": "127.0.0.9", "ports": [{"name": "https", "port": 8443}]},
        {"addresses": [{"ip": "127.0.0.9"}], "ports": {"name": "https", "port": 8443}},
        {"addresses": [None, 7], "ports": [{"name": "https", "port": 8443}]},
        "not a subset",
    ],
    ids=[
        "port-name-not-number",
        "port-zero",
        "port-too-large",
        "port-boolean",
        "port-missing",
        "empty-ip",
        "addresses-not-a-list",
        "ports-not-a-list",
        "addresses-not-mappings",
        "subset-not-a-mapping",
    ],
)
def test_malformed_entries_are_skipped(bad: Any) -> None:
    good = subset(["127.0.0.2"])
    assert endpoint_candidates(service(), endpoints(bad, good), REF) == [("127.0.0.2", 8443)]
    with pytest.raises(ResolveError, match="no endpoints available"):
        endpoint_candidates(service(), endpoints(bad), REF)


@pytest.mark.parametrize("value", [None, "x", [1], {"subsets": "x"}], ids=str)
def test_malformed_endpoints_objects_have_no_endpoints(value: Any) -> None:
    with pytest.raises(ResolveError, match="no endpoints available"):
        endpoint_candidates(service(), value, REF)


async def test_the_resolver_picks_among_candidates_per_call() -> None:
    source = MemorySource()
    source.put("", "services", service())
    source.put("", "endpoints", endpoints(subset(["127.0.0.2", "127.0.0.3", "127.0.0.4"])))
    resolver = EndpointResolver(source, random.Random(1))
    picked = {await resolver.resolve(REF) for _ in range(30)}
    assert picked == {("127.0.0.2", 8443), ("127.0.0.3", 8443), ("127.0.0.4", 8443)}


async def test_a_missing_service_or_endpoints_fails_the_call() -> None:
    source = MemorySource()
    with pytest.raises(ResolveError, match='service "hook" not found'):
        await EndpointResolver(source).resolve(REF)
    source.put("", "services", service())
    with pytest.raises(ResolveError, match='endpoints "hook" not found'):
        await EndpointResolver(source).resolve(REF)
