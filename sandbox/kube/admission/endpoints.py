"""How the sandbox reaches ``clientConfig.service``: Service port → Endpoints → an address.

kube-apiserver started with ``--enable-aggregator-routing=true`` resolves
``<name>.<namespace>.svc:<port>`` itself (kubernetes/apiserver
``pkg/util/proxy/proxy.go`` ``ResolveEndpoint``): the Service must exist, be of type
ClusterIP, NodePort or LoadBalancer, and have a port whose ``port`` equals
``clientConfig.service.port``; from the Endpoints object of the same name it gathers
every ``(ip, port)`` of every subset — ready ``addresses`` only, never
``notReadyAddresses`` — whose port has that Service port's name, and picks one at
random. The emulator does the same, every round trip (``WebhookTransport``), so both
Endpoints shapes work: one loopback IP with a port per replica (one subset each), and
one IP per replica on a common port. The TLS name stays ``<name>.<namespace>.svc``.

Endpoints are not validated by the emulator on write, so an entry that is not usable
(a port that is no integer in 1–65535, an address without an IP) is skipped, as if it
were not there; when nothing usable is left the call fails (failurePolicy applies).
"""

from __future__ import annotations

import random
from typing import Any

from sandbox.kube.admission.config import ServiceRef
from sandbox.kube.admission.source import ObjectSource

#: Service types kube-apiserver's endpoint resolver routes to (an empty type is the
#: default, ClusterIP).
ROUTABLE_TYPES = frozenset({"", "ClusterIP", "NodePort", "LoadBalancer"})


class ResolveError(Exception):
    """No endpoint to send the call to (the call fails; failurePolicy applies)."""


def endpoint_candidates(
    service: dict[str, Any], endpoints: dict[str, Any] | None, ref: ServiceRef
) -> list[tuple[str, int]]:
    """Every ready ``(ip, port)`` the Service port ``ref.port`` leads to, in the order
    the Endpoints list them. Raises ``ResolveError`` when there is none. No side
    effects."""
    spec = _mapping(service.get("spec"))
    kind = str(spec.get("type") or "")
    if kind not in ROUTABLE_TYPES:
        raise ResolveError(f'unsupported service type "{kind}"')
    port_name = _service_port_name(spec, ref)
    pairs: list[tuple[str, int]] = []
    for subset in _entries(_mapping(endpoints).get("subsets")):
        addresses = [str(a.get("ip") or "") for a in _entries(subset.get("addresses"))]
        for port in _entries(subset.get("ports")):
            number = _port_number(port.get("port"))
            if str(port.get("name") or "") != port_name or number is None:
                continue
            pairs.extend((ip, number) for ip in addresses if ip)
    if not pairs:
        raise ResolveError(f'no endpoints available for service "{ref.name}"')
    return pairs


def _service_port_name(spec: dict[str, Any], ref: ServiceRef) -> str:
    for port in _entries(spec.get("ports")):
        if _port_number(port.get("port")) == ref.port:
            return str(port.get("name") or "")
    raise ResolveError(f'no service port {ref.port} found for service "{ref.name}"')


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _entries(value: Any) -> list[dict[str, Any]]:
    """The mappings of a list field (anything else in it, or a non-list, ignored)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _port_number(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    return number if 0 < number < 65536 else None


class EndpointResolver:
    """Resolves a service reference to one ready endpoint, chosen anew on every call.

    ``rng`` picks among the candidates (kube-apiserver uses ``math/rand``); tests pass
    a seeded one.
    """

    def __init__(self, source: ObjectSource, rng: random.Random | None = None) -> None:
        self._source = source
        self._rng = rng or random.Random()

    async def candidates(self, ref: ServiceRef) -> list[tuple[str, int]]:
        """Every ready ``(ip, port)`` of ``ref`` now; raises ``ResolveError``."""
        service = await self._source.get("", "services", ref.namespace, ref.name)
        if service is None:
            raise ResolveError(f'service "{ref.name}" not found')
        endpoints = await self._source.get("", "endpoints", ref.namespace, ref.name)
        if endpoints is None:
            raise ResolveError(f'endpoints "{ref.name}" not found')
        return endpoint_candidates(service, endpoints, ref)

    def choose(self, pairs: list[tuple[str, int]]) -> tuple[str, int]:
        """One of ``pairs`` (not empty), at random."""
        return pairs[self._rng.randrange(len(pairs))]

    async def resolve(self, ref: ServiceRef) -> tuple[str, int]:
        """One ``(ip, port)`` for ``ref``, picked at random; raises ``ResolveError``."""
        return self.choose(await self.candidates(ref))
