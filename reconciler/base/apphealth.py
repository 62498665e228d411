"""The reservation app's health as this replica last saw it, and where it is published.

Every answer of the app to a call this replica made (the reservation poll, a lease
request) marks it answering; a call that failed for an outage (network error,
timeout, 5xx: ``OUTAGES``) marks it unreachable. A refusal (401, 403, 404, 409,
422) and an unreadable answer are answers. Only changes count:
``since`` is when the current state began, and listeners hear each change once.

The leader publishes the state on its coordination Lease as the annotation
``vocab.APP_HEALTH_ANNOTATION`` — ``ok since <UTC>`` or ``unreachable since <UTC>`` —
inside its own renew writes (``reconciler.leader``), so the annotation never races the
election's writes, and ``kubectl gpures explain`` reads it with the user's own rights
(docs/user/explain.md). ``format_health`` and ``parse_health`` are pure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from shared import vocab
from shared.appclient import Transient, TransientReason
from shared.clock import Clock, format_utc, parse_utc
from shared.logs import log

_log = logging.getLogger(__name__)
#: The two states' words in the annotation.
OK = "ok"
UNREACHABLE = "unreachable"
_SINCE = " since "


@dataclass(frozen=True)
class Health:
    """The app answering (``ok``) or not, since when."""

    ok: bool
    since: datetime


def format_health(health: Health) -> str:
    """``ok since 2026-12-04T20:00:00Z``."""
    return f"{OK if health.ok else UNREACHABLE}{_SINCE}{format_utc(health.since)}"


def parse_health(text: object) -> Health | None:
    """The annotation's value read back; None when absent or malformed."""
    if not isinstance(text, str):
        return None
    word, sep, instant = text.strip().partition(_SINCE)
    if not sep or word not in (OK, UNREACHABLE):
        return None
    try:
        since = parse_utc(instant.strip())
    except ValueError:
        return None
    return Health(word == OK, since)


#: The transient failures that mean the app did not answer (an answer that is not
#: JSON, or a list that kept shifting, came from an app that answers).
OUTAGES = frozenset(
    {TransientReason.NETWORK, TransientReason.TIMEOUT, TransientReason.SERVER_ERROR}
)


def is_outage(result: object) -> bool:
    """Whether an app call's result says the app did not answer (an outage)."""
    return isinstance(result, Transient) and result.reason in OUTAGES


class AppHealth:
    """One replica's view of the app (memory only: a new leader learns it at its first
    call, and keeps publishing the previous leader's value until then)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.current: Health | None = None
        self.listeners: list[Callable[[Health], None]] = []

    @property
    def unreachable(self) -> bool:
        return self.current is not None and not self.current.ok

    def note(self, result: object) -> None:
        """Record the result of one app call (any outcome type)."""
        self._set(not is_outage(result))

    def _set(self, ok: bool) -> None:
        if self.current is not None and self.current.ok == ok:
            return
        self.current = Health(ok, self._clock.now())
        log(
            _log,
            logging.INFO if ok else logging.WARNING,
            "app.health_changed",
            health=OK if ok else UNREACHABLE,
        )
        for listener in list(self.listeners):
            listener(self.current)

    def annotations(self) -> dict[str, str]:
        """What the leader writes on its Lease (nothing while the state is unknown)."""
        if self.current is None:
            return {}
        return {vocab.APP_HEALTH_ANNOTATION: format_health(self.current)}
