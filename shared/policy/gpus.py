"""How many GPUs a pod asks for, computed the way Kubernetes computes it.

The scheduler charges a pod its *effective request* of each extended resource:

- the sum over regular containers, plus every restartable init container ("sidecar",
  ``restartPolicy: Always``), because they all run together;
- or, if larger, the peak during initialisation: each ordinary init container runs
  alone next to the sidecars started before it;
- plus the pod's ``spec.overhead``.

For an extended resource a limit without a request implies the request (the apiserver
defaults it), so a container's GPUs are its request, else its limit. Quantities must be
whole, non-negative numbers; anything else makes the count *unreadable* — an outcome,
never an exception — so callers can answer safely instead of crashing on user input.

Which resources are GPUs (``GpuResources``, the setting ``GPU_RESOURCE_WEIGHTS``, default
``nvidia.com/gpu=1``): a pod's charged GPUs are the sum, over the listed resources, of
its effective request × the resource's weight (e.g. ``nvidia.com/mig-1g.10gb=1``
charges a whole GPU per MIG slice). A resource under a GPU vendor's prefix
(``GPU_RESOURCE_PREFIXES``, default ``nvidia.com/,amd.com/,gpu.intel.com/``) that is
not listed is *unlisted*: it is not counted, and the webhook refuses the pod.
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
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
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
    r"^(?P<num>[+-]?(\d+\.?\d*|\.\d+))(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exp>[+-]?\d{1,3}))?$"
)
#: A GPU count beyond this is not a real request (and keeps arithmetic small).
MAX_GPUS = 1_000_000


#: GPU_RESOURCE_WEIGHTS's default: only the whole-GPU resource, one GPU each.
DEFAULT_GPU_WEIGHTS: tuple[tuple[str, int], ...] = ((vocab.GPU_RESOURCE, 1),)
#: GPU_RESOURCE_PREFIXES's default: the device plugins' resource domains of NVIDIA, AMD
#: and Intel GPUs.
DEFAULT_GPU_PREFIXES: tuple[str, ...] = ("nvidia.com/", "amd.com/", "gpu.intel.com/")
#: Largest weight a listed resource may have.
MAX_WEIGHT = 1024
_RESOURCE_NAME = re.compile(
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/$")


@dataclass(frozen=True, slots=True)
class GpuResources:
    """The resources that are GPUs: the listed ones with their weights, and the vendor
    prefixes under which an unlisted resource is refused."""

    weights: tuple[tuple[str, int], ...] = DEFAULT_GPU_WEIGHTS
    prefixes: tuple[str, ...] = DEFAULT_GPU_PREFIXES

    @property
    def names(self) -> tuple[str, ...]:
        """The listed resources, in the setting's order."""
        return tuple(name for name, _ in self.weights)

    def is_unlisted(self, name: str) -> bool:
        """A resource under a GPU prefix that is not listed (refused at admission)."""
        return name.startswith(self.prefixes) and name not in self.names


DEFAULT_GPU_RESOURCES = GpuResources()


def parse_weights(text: str) -> tuple[tuple[str, int], ...]:
    """``name=weight`` pairs, comma-separated (GPU_RESOURCE_WEIGHTS); raises
    ``ValueError`` saying what is wrong. Each name is an extended resource
    (``domain/name``) listed once, each weight a whole number from 1 to ``MAX_WEIGHT``."""
    found: dict[str, int] = {}
    for item in text.split(","):
        name, sep, weight = item.strip().partition("=")
        name, weight = name.strip(), weight.strip()
        if not sep or not _RESOURCE_NAME.match(name):
            raise ValueError(f"{item.strip()!r} is not <domain>/<resource>=<weight>")
        if not (weight.isascii() and weight.isdigit()) or not 1 <= int(weight) <= MAX_WEIGHT:
            raise ValueError(f"the weight of {name} is not a whole number from 1 to {MAX_WEIGHT}")
        if name in found:
            raise ValueError(f"{name} is listed twice")
        found[name] = int(weight)
    return tuple(found.items())


def parse_prefixes(text: str) -> tuple[str, ...]:
    """Comma-separated resource domains ending in ``/`` (GPU_RESOURCE_PREFIXES); an
    empty text is none. Raises ``ValueError``."""
    found = [p.strip() for p in text.split(",") if p.strip()]
    for prefix in found:
        if not _PREFIX.match(prefix):
            raise ValueError(f"{prefix!r} is not a resource domain ending in '/'")
    return tuple(dict.fromkeys(found))


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
    #: GPU resources the pod asks for that are not listed (``GpuResources.is_unlisted``).
    unlisted: tuple[str, ...] = ()

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


def container_gpus(container: Any, resource: str = vocab.GPU_RESOURCE) -> int:
    """``resource`` of one container: its request, else its limit (limits imply
    requests)."""
    if not isinstance(container, MAP):
        raise Unreadable("a container is not an object")
    resources = container.get("resources") or {}
    if not isinstance(resources, MAP):
        raise Unreadable("container resources are not an object")
    for section in ("requests", "limits"):
        values = resources.get(section) or {}
        if not isinstance(values, MAP):
            raise Unreadable(f"container resources.{section} is not an object")
        if resource in values:
            return parse_quantity(values[resource])
    return 0


def _containers(spec: Mapping[str, Any], key: str) -> list[Any]:
    value = spec.get(key) or []
    if not isinstance(value, list):
        raise Unreadable(f"spec.{key} is not a list")
    return value


def _init_phase(init_containers: list[Any], resource: str) -> tuple[int, int]:
    """(peak of ``resource`` while initialising, that of the sidecars that keep running)."""
    peak = sidecars = 0
    for container in init_containers:
        gpus = container_gpus(container, resource)
        if container.get("restartPolicy") == "Always":
            sidecars += gpus
            peak = max(peak, sidecars)
        else:
            peak = max(peak, sidecars + gpus)
    return peak, sidecars


def _overhead(spec: Mapping[str, Any], resource: str) -> int:
    overhead = spec.get("overhead") or {}
    if not isinstance(overhead, MAP):
        raise Unreadable("spec.overhead is not an object")
    return parse_quantity(overhead[resource]) if resource in overhead else 0


def effective_gpus(spec: Mapping[str, Any], resource: str = vocab.GPU_RESOURCE) -> int:
    """The effective request of ``resource`` of a pod spec; raises ``Unreadable``."""
    peak, sidecars = _init_phase(_containers(spec, "initContainers"), resource)
    running = sum(container_gpus(c, resource) for c in _containers(spec, "containers"))
    return max(running + sidecars, peak) + _overhead(spec, resource)


def charged_gpus(spec: Mapping[str, Any], resources: GpuResources = DEFAULT_GPU_RESOURCES) -> int:
    """GPUs a pod spec is charged: each listed resource's effective request × its
    weight, summed; raises ``Unreadable``."""
    total = sum(weight * effective_gpus(spec, name) for name, weight in resources.weights)
    return _bounded(total, total)


def unlisted_resources(spec: Mapping[str, Any], resources: GpuResources) -> tuple[str, ...]:
    """Resources under a GPU prefix that are not listed, requested or limited by any
    container or init container of a readable spec (sorted, each once)."""
    found: set[str] = set()
    for key in ("initContainers", "containers"):
        for container in _containers(spec, key):
            box = (container.get("resources") or {}) if isinstance(container, MAP) else {}
            for section in ("requests", "limits"):
                values = (box.get(section) or {}) if isinstance(box, MAP) else {}
                if isinstance(values, MAP):
                    found.update(k for k in values if isinstance(k, str))
    return tuple(sorted(k for k in found if resources.is_unlisted(k)))


def pod_gpus(pod: Any, resources: GpuResources = DEFAULT_GPU_RESOURCES) -> GpuRequest:
    """The pod's charged GPUs (``charged_gpus``) and the unlisted GPU resources it asks
    for; a malformed pod gives an unreadable result."""
    spec = pod.get("spec") if isinstance(pod, MAP) else None
    if not isinstance(spec, MAP):
        return GpuRequest(0, "the pod has no spec")
    try:
        count = charged_gpus(spec, resources)
        unlisted = unlisted_resources(spec, resources) if resources.prefixes else ()
    except Unreadable as exc:
        return GpuRequest(0, str(exc))
    return GpuRequest(count, unlisted=unlisted)
