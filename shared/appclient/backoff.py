"""Retry timing as pure functions: no clock reads, randomness injected.

``rand`` is any zero-argument callable returning a float in ``[0, 1)`` — e.g.
``random.Random(seed).random`` — so tests can pin the jitter.

- ``PageRetryPolicy``: the per-page retry of the reservation list (§1.8): up to three
  attempts, pausing 1 s then 2 s, only after network errors and 5xx.
- ``exponential``: attempt → delay, doubling from ``base``, capped, jittered down to
  half at most (so it never exceeds the cap and never collapses to zero).
- ``cooldown``: the ordinary 2–5 minute jittered wait.
- ``after_denial``: when to try a refused lease again (the §1.5.2 table): contended →
  normal cooldown; scheduled → at ``not_before`` but never later than the error cap
  (cooldown when already past); structural → exponential backoff up to the cap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from shared.appclient.outcomes import Denial

Rand = Callable[[], float]

#: The ordinary retry cadence after a contended refusal, in seconds (§1.5.2).
COOLDOWN_SECONDS = (120.0, 300.0)
#: No refused lease waits longer than this before its next attempt.
ERROR_CAP_SECONDS = 1800.0


@dataclass(frozen=True)
class PageRetryPolicy:
    """How one page of a paged list is retried: ``len(pauses) + 1`` attempts."""

    pauses: tuple[float, ...] = (1.0, 2.0)

    @property
    def attempts(self) -> int:
        return len(self.pauses) + 1

    def pause_after(self, failed_attempt: int) -> float | None:
        """Seconds to wait after attempt ``failed_attempt`` (1-based) failed; None = give up."""
        if failed_attempt < 1 or failed_attempt > len(self.pauses):
            return None
        return self.pauses[failed_attempt - 1]


def exponential(attempt: int, base: float, cap: float, rand: Rand) -> float:
    """Delay before retry number ``attempt`` (0-based): ``min(cap, base·2^attempt)``,
    scaled by a factor in ``[0.5, 1)``. Monotone in its upper bound, never above ``cap``."""
    ceiling = min(cap, base * (2.0 ** min(max(attempt, 0), 62)))
    return ceiling * (0.5 + 0.5 * rand())


def cooldown(rand: Rand, bounds: tuple[float, float] = COOLDOWN_SECONDS) -> float:
    """A wait uniformly inside ``bounds`` (seconds)."""
    low, high = bounds
    return low + (high - low) * rand()


class DenialClass(StrEnum):
    """How a refusal behaves over time (§1.5.2)."""

    CONTENDED = "contended"
    SCHEDULED = "scheduled"
    STRUCTURAL = "structural"


@dataclass(frozen=True)
class RetryPlan:
    """When to try a refused lease again, and why."""

    at: datetime
    kind: DenialClass


def classify_denial(denial: Denial) -> DenialClass:
    """Structural when not retryable; scheduled when it names an instant; else contended."""
    if not denial.retryable:
        return DenialClass.STRUCTURAL
    if denial.not_before is not None:
        return DenialClass.SCHEDULED
    return DenialClass.CONTENDED


def after_denial(
    denial: Denial,
    now: datetime,
    attempt: int,
    rand: Rand,
    cap: float = ERROR_CAP_SECONDS,
) -> RetryPlan:
    """The next attempt after ``attempt`` consecutive refusals (0-based)."""
    kind = classify_denial(denial)
    if kind is DenialClass.STRUCTURAL:
        delay = exponential(attempt, COOLDOWN_SECONDS[0], cap, rand)
        return RetryPlan(now + timedelta(seconds=delay), kind)
    if denial.not_before is not None and denial.not_before > now:
        latest = now + timedelta(seconds=cap)
        return RetryPlan(min(denial.not_before, latest), kind)
    return RetryPlan(now + timedelta(seconds=cooldown(rand)), kind)
