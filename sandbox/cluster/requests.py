"""What a pod asks of a node: its effective resource requests.

No side effects. Source: kubernetes/component-helpers ``resource/helpers.go``
(``PodRequests``): the sum over containers, compared with each init container (plus
the restartable "sidecar" init containers started before it), the larger one wins,
then ``spec.overhead`` is added. A request missing where a limit is set defaults to the
limit (the API's defaulting, applied here too in case a client bypassed it).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sandbox.cluster.quantity import parse_quantity

Resources = dict[str, Decimal]


def container_requests(container: dict[str, Any]) -> Resources:
    """One container's requests, defaulted from its limits."""
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: parse_quantity(value) for name, value in merged.items()}


def _add(a: Resources, b: Resources) -> Resources:
    return {name: a.get(name, Decimal(0)) + b.get(name, Decimal(0)) for name in {*a, *b}}


def _max(a: Resources, b: Resources) -> Resources:
    return {name: max(a.get(name, Decimal(0)), b.get(name, Decimal(0))) for name in {*a, *b}}


def pod_requests(pod: dict[str, Any]) -> Resources:
    """Effective requests: max(sum of containers, init phase peak) + overhead."""
    spec = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or []:
        total = _add(total, container_requests(container))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for init in spec.get("initContainers") or []:
        wanted = container_requests(init)
        if init.get("restartPolicy") == "Always":
            total = _add(total, wanted)
            sidecars = _add(sidecars, wanted)
            wanted = sidecars
        else:
            wanted = _add(wanted, sidecars)
        init_peak = _max(init_peak, wanted)
    effective = _max(total, init_peak)
    overhead = {k: parse_quantity(v) for k, v in (spec.get("overhead") or {}).items()}
    return _add(effective, overhead)
