"""The warnings ``kubectl`` prints for each webhook answer.

Each is one short line (≤120 characters, kubernetes-facts §1.4) naming the specific
reason; instants render in the display zone (EVENT_DISPLAY_TIMEZONE, else TZ, else
UTC) with the zone named, because a person reads them (DESIGN §6).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from zoneinfo import ZoneInfo

from shared import vocab
from shared.model import GPUReservation
from shared.policy.matching import Miss
from shared.policy.wording import misses as _misses
from shared.policy.wording import when


def admitted(res: GPUReservation, until: datetime, zone: ZoneInfo | None) -> str:
    return _admitted(res.name, until, zone)


@lru_cache(maxsize=1024)
def _admitted(name: str, until: datetime, zone: ZoneInfo | None) -> str:
    """Rendered once per reservation and guarantee end: every pod admitted under it
    reads the same line."""
    return f"admitted under reservation {name}, guaranteed until {when(until, zone)}"


def opens_later(res: GPUReservation, gated: bool, zone: ZoneInfo | None) -> str:
    tail = "; held by a scheduling gate until then" if gated else ""
    return f"queued for reservation {res.name}, opens at {when(res.facts.start, zone)}{tail}"


def full(res: GPUReservation, gated: bool) -> str:
    tail = "; held by a scheduling gate" if gated else ""
    count = res.facts.gpu_count
    return f"reservation {res.name} is full ({count} GPUs in use); queued until GPUs free up{tail}"


def too_small(res: GPUReservation, gpus: int) -> str:
    return (
        f"reservation {res.name} holds {res.facts.gpu_count} GPUs but the pod asks for {gpus}; "
        "it cannot be admitted under it"
    )


def jit() -> str:
    return "no reservation is open now; will request an on-demand lease if it cannot schedule"


def no_match(found: Sequence[Miss]) -> str:
    return _no_match(tuple(found))


@lru_cache(maxsize=256)
def _no_match(found: tuple[Miss, ...]) -> str:
    """Rendered once per set of reasons (a few dozen exist)."""
    return f"no reservation matches: {_misses(found, 2)}"


def toleration_removed() -> str:
    return (
        f"toleration removed: {vocab.RESERVATION_TAINT_KEY} is granted with a reservation, "
        "never declared"
    )


def toleration_denied() -> str:
    return (
        f"a {vocab.RESERVATION_TAINT_KEY} toleration is granted with a reservation, never "
        "declared; remove it"
    )


def annotations_removed(keys: Sequence[str]) -> str:
    shown = ", ".join(sorted(keys)[:2]) + (" …" if len(keys) > 2 else "")
    return f"removed {shown}: set by the reservation system only"


def annotation_change_denied(keys: Sequence[str]) -> str:
    return f"{', '.join(sorted(keys)[:3])} can be changed by the reservation system only"


def not_admitted(why: str) -> str:
    return f"not admitted now ({why}); the reservation controller will retry"


def no_gpus() -> str:
    return (
        "not admitted: the pod asks for no GPU; reservations admit GPU pods only "
        "(request a GPU resource)"
    )


def unlisted_resources(names: Sequence[str]) -> str:
    shown = ", ".join(names[:2]) + (" …" if len(names) > 2 else "")
    return (
        f"{shown} is a GPU resource this cluster does not count (GPU_RESOURCE_WEIGHTS); "
        "request a listed GPU resource or ask the operator to list it"
    )


def pinned_denied(node: str) -> str:
    return (
        f"pods may not be pinned to reserved node {node} with spec.nodeName; create it "
        "without nodeName and it will be admitted or queued as usual"
    )


def label_change_denied(key: str, why: str) -> str:
    """``why`` is ``admitted`` or ``queued``: "an admitted pod", "a queued pod"."""
    article = "an" if why[:1] in "aeiou" else "a"
    return (
        f"the {key} label of {article} {why} pod cannot be changed or removed; "
        "delete and recreate it"
    )
