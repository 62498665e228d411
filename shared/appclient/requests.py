"""Bodies we send to the app (reservation-api.md §3.7) and the lease-key rule.

Kept apart from the response models: these are strict (we build them), those are
tolerant (the app builds them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from shared.clock import format_utc


@dataclass(frozen=True)
class LeaseRequest:
    """An on-demand lease (§2.5) for a pending pod."""

    username: str
    group_name: str
    gpu_class_id: int
    gpu_count: int
    duration_seconds: int
    idempotency_key: str
    notes: str | None = None

    def body(self) -> dict[str, Any]:
        return {
            "on_demand": True,
            "username": self.username,
            "group_name": self.group_name,
            "gpu_class_id": self.gpu_class_id,
            "gpu_count": self.gpu_count,
            "duration_seconds": self.duration_seconds,
            "idempotency_key": self.idempotency_key,
            "notes": self.notes,
        }


@dataclass(frozen=True)
class BestEffortRequest:
    """A zero-length best-effort stub (§2.6); deliberately no duration."""

    username: str
    group_name: str
    gpu_class_id: int
    gpu_count: int
    idempotency_key: str
    notes: str | None = None

    def body(self) -> dict[str, Any]:
        return {
            "best_effort": True,
            "username": self.username,
            "group_name": self.group_name,
            "gpu_class_id": self.gpu_class_id,
            "gpu_count": self.gpu_count,
            "idempotency_key": self.idempotency_key,
            "notes": self.notes,
        }


@dataclass(frozen=True)
class OverstayReport:
    """An overstay that ended (§2.10)."""

    reservation_id: int
    pod_uid: str
    gpu_count: int
    start: datetime
    end: datetime
    end_reason: str | None = None

    def body(self) -> dict[str, Any]:
        return {
            "pod_uid": self.pod_uid,
            "gpu_count": self.gpu_count,
            "start_utc": format_utc(self.start),
            "end_utc": format_utc(self.end),
            "end_reason": self.end_reason,
        }


def lease_key(pod_uid: str, attempt: int) -> str:
    """The idempotency key of lease attempt ``attempt`` (1-based) for a pod (§5 item 15).

    The first attempt uses the bare uid; later ones ``<uid>.2``, ``<uid>.3`` … so that a
    retry after a compensating cancel is not answered with the cancelled original.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    return pod_uid if attempt == 1 else f"{pod_uid}.{attempt}"


def fetch_window(today: date, lookahead_days: int) -> tuple[date, date]:
    """The pull's day window: yesterday (slack for the app's local calendar) to
    ``today + lookahead_days`` (§2.1)."""
    return today - timedelta(days=1), today + timedelta(days=lookahead_days)
