"""The values of an admission decision: what was decided, and what it was decided in.

``webhook.decide`` (CREATE) and ``webhook.update`` (UPDATE) return a ``Verdict``; the
handler answers it. No side effects.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

from shared.model import GPUReservation
from webhook.settings import PolicySettings


class Outcome(StrEnum):
    """What the webhook answered (also the ``outcome`` metric label)."""

    ADMIT = "admit"
    ADMITTED = "admitted"
    ALREADY_ADMITTED = "already_admitted"
    QUEUED = "queued"
    JIT = "jit"
    NO_MATCH = "no_match"
    PASS = "pass"
    DENIED = "denied"
    FAIL_OPEN = "fail_open"


@dataclass(frozen=True, slots=True)
class Candidate:
    """An open reservation to claim, with the guarantee admission under it gives."""

    reservation: GPUReservation
    guaranteed_until: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The decision. ``edited`` is the pod to diff against (None: no change); it may be
    the request's own pod object when the decision changes nothing — never edit it in
    place (``admit`` stamps a copy)."""

    outcome: Outcome
    edited: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()
    candidates: tuple[Candidate, ...] = ()
    gpus: int = 0
    message: str = ""
    #: Reservation the answer is about (logs and metrics).
    reservation: str | None = None
    #: The warnings about removed forgeries alone (kept when the answer fails open).
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Pin:
    """The reserved node a pod names in ``spec.nodeName``, and the classes of its
    reservation taints."""

    node: str
    classes: frozenset[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """Everything ``decide`` reads besides the pod."""

    policy: PolicySettings
    now: datetime
    zone: ZoneInfo | None = None
    #: Reservations whose claim was just refused (count them as full).
    exclude: Set[str] = field(default_factory=frozenset)
    #: The request is a dry run (no hold is written, none can be found).
    dry_run: bool = False
    #: The pod names a reserved node in ``spec.nodeName`` (None: it names none, or a
    #: node that carries no reservation taint or that the node cache does not know).
    pinned: Pin | None = None
