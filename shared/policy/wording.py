"""Prose a person reads about their pod: the webhook's warnings and the reconciler's Events.

Pure functions only. The rules (R39, R40, DESIGN §6):
- instants render in the display zone (``EVENT_DISPLAY_TIMEZONE``, else ``TZ``, else
  UTC) at minute precision with the zone named — never as relative times;
- waiting messages carry no counts that change while the pod waits (free GPUs), so
  an unchanged status renders the same text and the throttle can hold it back;
- other users' pods are never named (holders are the owner's own pods);
- user text quoted back (a label or annotation value) is scrubbed and cut to 64
  characters;
- a "contact support" ending names ``SUPPORT_CONTACT`` when set, without a period;
- an Event message never exceeds 1024 characters (``clip``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from shared import vocab
from shared.model import GPUReservation, ReservationFacts
from shared.policy.matching import Miss

#: The longest Event message we write (the API's limit for ``note``).
MAX_MESSAGE = 1024
#: Quoted user text is cut to this many characters.
MAX_QUOTED = 64
#: At most this many holder pods are named in ReservationFull.
MAX_HOLDERS = 3

MISS_TEXT: dict[Miss, str] = {
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


def window(facts: ReservationFacts, zone: ZoneInfo | None) -> str:
    """``2026-01-05 14:00 CET to 2026-01-05 16:00 CET``."""
    return f"{when(facts.start, zone)} to {when(facts.end, zone)}"


def quoted(text: str) -> str:
    """User text made safe to quote: printable, one line, at most 64 characters."""
    clean = "".join(c if c.isprintable() else " " for c in text).strip()
    return clean if len(clean) <= MAX_QUOTED else clean[: MAX_QUOTED - 1] + "…"


def support(contact: str | None) -> str:
    """The "contact support" ending (no trailing period)."""
    return f"If this persists, contact support: {contact}" if contact else ""


def with_support(text: str, contact: str | None) -> str:
    """``text`` followed by the support ending, when there is one."""
    ending = support(contact)
    return f"{text} {ending}" if ending else text


def clip(message: str) -> str:
    """``message`` cut to the 1024 characters an Event may carry."""
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"


def misses(found: Sequence[Miss], limit: int | None = None) -> str:
    """The reasons no reservation matches, joined (``limit`` keeps the first few)."""
    chosen = found if limit is None else found[:limit]
    return "; ".join(MISS_TEXT[m] for m in chosen) or "nothing matches"


# --- Events on admitted pods --------------------------------------------------------


def runtime_guaranteed(res: GPUReservation, until: datetime, zone: ZoneInfo | None) -> str:
    """RuntimeGuaranteed: the reservation, the guarantee's end, what happens after."""
    return (
        f"Admitted under reservation {res.name} ({res.facts.gpu_class_name}); its runtime is "
        f"guaranteed until {when(until, zone)}. After that the pod may be preempted when "
        "another booking needs its GPUs."
    )


def best_effort_admitted(res: GPUReservation) -> str:
    """BestEffortAdmitted: no guarantee at all."""
    return (
        f"Admitted best-effort under reservation {res.name}: no runtime guarantee; the pod "
        "may be preempted whenever a booking needs its GPUs."
    )


# --- Waiting Events -------------------------------------------------------------------


def waiting_for_reservation(res: GPUReservation, zone: ZoneInfo | None) -> str:
    """WaitingForReservation: the id and the local window."""
    return (
        f"Waiting for reservation {res.name}, booked from {window(res.facts, zone)}; "
        "the pod is admitted as soon as it opens."
    )


def reservation_full(res: GPUReservation, holders: Sequence[str]) -> str:
    """ReservationFull: names up to three of the owner's own pods holding its GPUs."""
    shown = sorted(holders)[:MAX_HOLDERS]
    more = " and others" if len(holders) > MAX_HOLDERS else ""
    held = (
        f"your pods {', '.join(shown)}{more} hold its GPUs"
        if shown
        else "its GPUs are claimed by admissions in progress"
    )
    return (
        f"Reservation {res.name} is open but full: {held}. The pod is admitted as soon as "
        "enough of them finish or are deleted."
    )


def reservation_too_small(res: GPUReservation, gpus: int) -> str:
    """ReservationTooSmall: it can never admit the pod."""
    return (
        f"Reservation {res.name} holds {res.facts.gpu_count} GPUs but the pod requests {gpus}, "
        "so it can never admit it. Request fewer GPUs or book more."
    )


def near_miss(res: GPUReservation, miss: Miss, zone: ZoneInfo | None) -> str:
    """One booking of the owner the pod narrowly misses, and why."""
    return (
        f"your booking {res.name} ({res.facts.gpu_class_name}, {window(res.facts, zone)}) "
        f"does not match: {MISS_TEXT[miss]}"
    )


def no_reservation(
    found: Sequence[Miss],
    near: Sequence[str],
    contact: str | None,
    why_not_on_demand: Sequence[str] = (),
) -> str:
    """NoReservation: every reason, the near misses, every reason on-demand cannot help."""
    text = f"No reservation matches this pod: {misses(found)}."
    if near:
        text += " " + "; ".join(near) + "."
    if why_not_on_demand:
        text += f" It cannot be admitted on demand either: {'; '.join(why_not_on_demand)}."
    return clip(with_support(text, contact))


def unknown_gpu_class(label: str, known: Sequence[str], contact: str | None) -> str:
    """UnknownGpuClass: the label is no class the app knows; the ones that exist."""
    listed = ", ".join(sorted(known)) or "(none)"
    text = (
        f"The {vocab.GPU_CLASS_LABEL} label {quoted(label)!r} names no GPU class the "
        f"reservation system knows, so nothing can admit the pod. Known classes: {listed}."
    )
    return clip(with_support(text, contact))


def annotation_ignored(key: str, value: str, effect: str, contact: str | None) -> str:
    """AnnotationIgnored: which annotation, its value, what happens instead."""
    text = f"Annotation {key}={quoted(value)!r} was ignored: {effect}."
    return clip(with_support(text, contact))


# --- Preemption -----------------------------------------------------------------------


def preempted(gpu_class: str, boundary: datetime | None, zone: ZoneInfo | None) -> str:
    """Preempted: past its guarantee, its GPUs go to a booking (or the headroom)."""
    why = (
        f"a booking of {gpu_class} GPUs starting {when(boundary, zone)}"
        if boundary is not None
        else f"the {gpu_class} GPUs kept free for on-demand work"
    )
    return (
        f"This pod ran past its runtime guarantee and was preempted: its GPUs are needed for {why}."
    )


def termination_warning(
    gpu_class: str,
    at: datetime,
    boundary: datetime | None,
    zone: ZoneInfo | None,
    guarantee_ends: datetime | None = None,
) -> str:
    """The termination-warning text (annotation and Event): when, and why; no risk
    figure, so the Event is not repeated when only the risk moves. ``guarantee_ends``:
    the end of a guarantee still running (the pod is not yet past it)."""
    why = (
        f"a booking of {gpu_class} GPUs starting {when(boundary, zone)}"
        if boundary is not None
        else f"the {gpu_class} GPUs kept free for on-demand work"
    )
    status = (
        "This pod is past its runtime guarantee and"
        if guarantee_ends is None
        else f"This pod's runtime guarantee ends {when(guarantee_ends, zone)}; after that it"
    )
    return (
        f"{status} may be preempted from "
        f"{when(at, zone)} to free GPUs for {why}. Save your work (checkpoint) before then."
    )
