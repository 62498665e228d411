"""How the sandbox reaches ``clientConfig.service``: Service port → Endpoints → loopback.

The apiserver resolves ``<name>.<namespace>.svc:<port>`` to an endpoint of the Service
(``k8s.io/apiserver/pkg/util/proxy`` ``ResolveEndpoint``): it finds the Service port
whose ``port`` equals ``clientConfig.service.port``, then the Endpoints object of the
same name, and takes an address from a subset whose port has that Service port's name.
The sandbox does the same with one extension: it gathers ``(ip, port)`` pairs from
*every* subset with a matching port name and picks them round-robin, so N webhook
replicas on 127.0.0.1 with N different ports can stand behind one Service
(one subset per replica). The TLS name stays ``<name>.<namespace>.svc``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from sandbox.kube.admission.config import ServiceRef
from sandbox.kube.admission.source import ObjectSource


class ResolveError(Exception):
    """No endpoint to send the call to (the call fails; failurePolicy applies)."""


def endpoint_candidates(
    service: dict[str, Any], endpoints: dict[str, Any] | None, ref: ServiceRef
) -> list[tuple[str, int]]:
    """Every ``(ip, port)`` the Service port ``ref.port`` leads to. No side effects."""
    port_name = _service_port_name(service, ref)
    pairs: list[tuple[str, int]] = []
    for subset in (endpoints or {}).get("subsets") or []:
        for port in subset.get("ports") or []:
            if str(port.get("name") or "") != port_name:
                continue
            for address in subset.get("addresses") or []:
                pairs.append((str(address.get("ip", "")), int(port.get("port", 0))))
    if not pairs:
        raise ResolveError(f'no endpoints available for service "{ref.name}"')
    return pairs


def _service_port_name(service: dict[str, Any], ref: ServiceRef) -> str:
    for port in (service.get("spec") or {}).get("ports") or []:
        if int(port.get("port", 0)) == ref.port:
            return str(port.get("name") or "")
    raise ResolveError(f'no service port {ref.port} found for service "{ref.name}"')


class EndpointResolver:
    """Resolves service references, rotating over each Service's endpoints."""

    def __init__(self, source: ObjectSource) -> None:
        self._source = source
        self._turns: dict[tuple[str, str, int], Iterator[int]] = {}

    async def resolve(self, ref: ServiceRef) -> tuple[str, int]:
        """The next ``(ip, port)`` for ``ref``; raises ``ResolveError``."""
        service = await self._source.get("", "services", ref.namespace, ref.name)
        if service is None:
            raise ResolveError(f'service "{ref.name}" not found')
        endpoints = await self._source.get("", "endpoints", ref.namespace, ref.name)
        pairs = endpoint_candidates(service, endpoints, ref)
        turn = self._turns.setdefault((ref.namespace, ref.name, ref.port), itertools.count())
        return pairs[next(turn) % len(pairs)]
