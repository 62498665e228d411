"""The warnings ``kubectl`` prints for each webhook answer.

Each is one short line (≤120 characters, kubernetes-facts §1.4) naming the specific
reason; instants render in the display zone (EVENT_DISPLAY_TIMEZONE, else TZ, else
UTC) with the zone named, because a person reads them (DESIGN §6).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from shared import vocab
from shared.model import GPUReservation
from shared.policy.matching import Miss

_MISS_TEXT: dict[Miss, str] = {
    Miss.UNREADABLE_GPUS: f"its {vocab.GPU_RESOURCE} request is not a whole number",
    Miss.NO_CLASS_LABEL: f"the pod has no {vocab.GPU_CLASS_LABEL} label",
    Miss.NO_GROUP: "the pod names no usage group",
    Miss.NOT_A_BOOKING: "your reservations are on-demand leases of other pods",
    Miss.CANCELLED: "your booking was cancelled",
    Miss.OTHER_OWNER: "you hold no booking",
    Miss.OTHER_CLASS: "your bookings are for another GPU class",
    Miss.OTHER_GROUP: "your bookings are under another usage group",
    Miss.ENDED: "your booking has ended",
    Miss.NO_SHOW: "your booking was declared a no-show",
}


def when(instant: datetime, zone: ZoneInfo | None) -> str:
    """``2026-01-05 14:00 CET``: minute precision, zone named."""
    local = instant.astimezone(zone or UTC)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()}"


def admitted(res: GPUReservation, until: datetime, zone: ZoneInfo | None) -> str:
    return f"admitted under reservation {res.name}, guaranteed until {when(until, zone)}"


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


def no_match(misses: Sequence[Miss]) -> str:
    reasons = "; ".join(_MISS_TEXT[m] for m in misses[:2]) or "nothing matches"
    return f"no reservation matches: {reasons}"


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
