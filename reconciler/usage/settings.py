"""The usage accounting's settings (``docs/usage.md``; strict: a bad value stops the
process with the other problems)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from shared.settings import EnvReader


@dataclass(frozen=True)
class UsageSettings:
    """How often usage is counted and written, and how long ended bookings stay."""

    #: USAGE_INTERVAL_SECONDS (1..3600, default 30): the usage pass period (metrics).
    interval_s: float = 30.0
    #: USAGE_CHECKPOINT_SECONDS (1..86400, default 600): an open reservation has its
    #: record rewritten at least this often (bounds what a pod that vanishes while no
    #: leader watches can cost the figures, and what a new leader counts twice).
    checkpoint_s: float = 600.0
    #: USAGE_RETENTION_DAYS (0..365, default 7): an ended reservation's object (and its
    #: usage record) is kept this long after its window stopped, then deleted.
    retention: timedelta = timedelta(days=7)


def usage_from(reader: EnvReader) -> UsageSettings:
    """The three variables."""
    return UsageSettings(
        interval_s=float(reader.integer("USAGE_INTERVAL_SECONDS", 30, 1, 3600)),
        checkpoint_s=float(reader.integer("USAGE_CHECKPOINT_SECONDS", 600, 1, 86400)),
        retention=timedelta(days=reader.integer("USAGE_RETENTION_DAYS", 7, 0, 365)),
    )
