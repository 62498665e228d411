"""How many GPUs a pod asks for, computed the way Kubernetes computes it.

The scheduler charges a pod its *effective request* of ``nvidia.com/gpu``:

- the sum over regular containers, plus every restartable init container ("sidecar",
  ``restartPolicy: Always``), because they all run together;
- or, if larger, the peak during initialisation: each ordinary init container runs
  alone next to the sidecars started before it;
- plus the pod's ``spec.overhead``.

For an extended resource a limit without a request implies the request (the apiserver
defaults it), so a container's GPUs are its request, else its limit. Quantities must be
whole, non-negative numbers; anything else makes the count *unreadable* — an outcome,
never an exception — so callers can answer safely instead of crashing on user input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from shared import vocab
from shared.policy import MAP

#: Decimal and binary suffixes of a Kubernetes quantity, as powers.
_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(\d+\.?\d*|\.\d+))(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[mkMGTPE])|[eE](?P<exp>[+-]?\d{1,3}))?$"
)
#: A GPU count beyond this is not a real request (and keeps arithmetic small).
MAX_GPUS = 1_000_000


class Unreadable(ValueError):
    """A GPU quantity or container list that is not what the API allows."""


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """A pod's effective GPU request, or why it could not be read.

    ``count`` is 0 when ``problem`` is set; callers must check ``readable`` before
    treating the pod as a 0-GPU pod.
    """

    count: int
    problem: str | None = None

    @property
    def readable(self) -> bool:
        return self.problem is None


def parse_quantity(value: Any) -> int:
    """A whole, non-negative GPU quantity (``2``, ``"2"``, ``"2000m"``, ``"2e0"``).

    Raises ``Unreadable`` for fractions, negatives, booleans and anything not a
    Kubernetes quantity.
    """
    if isinstance(value, str) and len(value) <= 9 and value.isascii() and value.isdigit():
        return _bounded(int(value), value)  # the usual "1": no pattern, no Decimal
    if isinstance(value, bool):
        raise Unreadable(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return _whole(Decimal(value), value)
    if not isinstance(value, str):
        raise Unreadable(f"{type(value).__name__} is not a quantity")
    return _whole(_decimal(value), value)


def _decimal(text: str) -> Decimal:
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise Unreadable(f"{text[:32]!r} is not a quantity")
    try:
        number = Decimal(match["num"])
    except InvalidOperation as exc:  # pragma: no cover - the pattern already checked
        raise Unreadable(f"{text[:32]!r} is not a quantity") from exc
    if match["exp"] is not None:
        return number * Decimal(10) ** int(match["exp"])
    return number * _SUFFIXES[match["suffix"] or ""]


def _whole(number: Decimal, original: Any) -> int:
    if number < 0 or number != number.to_integral_value():
        raise Unreadable(f"{str(original)[:32]!r} is not a whole number of GPUs")
    return _bounded(int(number), original)


def _bounded(count: int, original: Any) -> int:
    if count > MAX_GPUS:
        raise Unreadable(f"{str(original)[:32]!r} is more GPUs than any node has")
    return count


def container_gpus(container: Any) -> int:
    """GPUs of one container: its request, else its limit (limits imply requests)."""
    if not isinstance(container, MAP):
        raise Unreadable("a container is not an object")
    resources = container.get("resources") or {}
    if not isinstance(resources, MAP):
        raise Unreadable("container resources are not an object")
    for section in ("requests", "limits"):
        values = resources.get(section) or {}
        if not isinstance(values, MAP):
            raise Unreadable(f"container resources.{section} is not an object")
        if vocab.GPU_RESOURCE in values:
            return parse_quantity(values[vocab.GPU_RESOURCE])
    return 0


def _containers(spec: Mapping[str, Any], key: str) -> list[Any]:
    value = spec.get(key) or []
    if not isinstance(value, list):
        raise Unreadable(f"spec.{key} is not a list")
    return value


def _init_phase(init_containers: list[Any]) -> tuple[int, int]:
    """(peak GPUs while initialising, GPUs of the sidecars that keep running)."""
    peak = sidecars = 0
    for container in init_containers:
        gpus = container_gpus(container)
        if container.get("restartPolicy") == "Always":
            sidecars += gpus
            peak = max(peak, sidecars)
        else:
            peak = max(peak, sidecars + gpus)
    return peak, sidecars


def _overhead(spec: Mapping[str, Any]) -> int:
    overhead = spec.get("overhead") or {}
    if not isinstance(overhead, MAP):
        raise Unreadable("spec.overhead is not an object")
    return parse_quantity(overhead[vocab.GPU_RESOURCE]) if vocab.GPU_RESOURCE in overhead else 0


def effective_gpus(spec: Mapping[str, Any]) -> int:
    """The effective GPU request of a pod spec; raises ``Unreadable``."""
    peak, sidecars = _init_phase(_containers(spec, "initContainers"))
    running = sum(container_gpus(c) for c in _containers(spec, "containers")) + sidecars
    return max(running, peak) + _overhead(spec)


def pod_gpus(pod: Any) -> GpuRequest:
    """The pod's effective GPU request; a malformed pod gives an unreadable result."""
    spec = pod.get("spec") if isinstance(pod, MAP) else None
    if not isinstance(spec, MAP):
        return GpuRequest(0, "the pod has no spec")
    try:
        return GpuRequest(effective_gpus(spec))
    except Unreadable as exc:
        return GpuRequest(0, str(exc))
