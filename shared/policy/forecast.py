"""The preemption-risk forecast (R41, contract §4.2); no side effects.

Three calendar-aligned buckets: ``[now, next top of the hour)`` then two full hours.
Boundaries are the booking starts in ``(now, last bucket end + lead]``, planned by
``shared.policy.outlook.ahead`` — the sweep's own planning, so the forecast names the
pods the sweep would take. A pod at risk at boundary ``S`` carries its risk there in
every bucket overlapping its kill window ``[max(S - lead, guarantee end), S]`` (buckets
half-open, the window closed); risks in one bucket combine as ``1 - Π(1 - r)``.

Per bucket and class: ``capacity`` and ``free`` from the inventory (free may be
negative), ``demand`` and ``shortfall`` summed over the boundaries whose kills would
land in the bucket (the bucket holding ``max(now, S - lead)``), ``eligible_pool_gpus``
the GPUs of pods past their guarantee at the bucket's end, and ``pending_jit_gpus``
(bucket 0 only, never part of the shortfall).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shared import vocab
from shared.clock import format_utc
from shared.model import ReservationFacts
from shared.policy.outlook import Stop, ahead, kill_from
from shared.policy.preemption import Holder, Room

BUCKETS = 3
HOUR = timedelta(hours=1)
GUARANTEED = vocab.GUARANTEE_STATUS_GUARANTEED
OVERSTAY = vocab.GUARANTEE_STATUS_OVERSTAY
MIXED = "mixed"


@dataclass(frozen=True)
class Bucket:
    start: datetime
    end: datetime

    def overlaps(self, first: datetime, last: datetime) -> bool:
        """Whether the closed interval ``[first, last]`` meets ``[start, end)``."""
        return first < self.end and last >= self.start

    def holds(self, instant: datetime) -> bool:
        return self.start <= instant < self.end


def buckets(now: datetime) -> list[Bucket]:
    """``[now, top of the next hour)``, then full hours (``BUCKETS`` in all)."""
    top = now.replace(minute=0, second=0, microsecond=0) + HOUR
    found = [Bucket(now, top)]
    for _ in range(BUCKETS - 1):
        found.append(Bucket(found[-1].end, found[-1].end + HOUR))
    return found


def state_in(bucket: Bucket, end: datetime | None) -> str:
    """``guaranteed`` for the whole bucket, ``overstay`` for all of it, else ``mixed``."""
    if end is not None and end >= bucket.end:
        return GUARANTEED
    if end is None or end <= bucket.start:
        return OVERSTAY
    return MIXED


def pod_risks(
    holder: Holder, found: Sequence[Stop], spans: Sequence[Bucket], lead: timedelta
) -> list[float]:
    """The pod's combined risk per bucket."""
    spared = [1.0] * len(spans)
    for stop in found:
        out = stop.classes.get(holder.gpu_class)
        risk = out.risks.get(holder.uid, 0.0) if out is not None else 0.0
        if not risk:
            continue
        first = kill_from(holder, stop.boundary, lead)
        for i, bucket in enumerate(spans):
            if bucket.overlaps(first, stop.boundary):
                spared[i] *= 1.0 - risk
    return [round(1.0 - s, 4) for s in spared]


def forecast(
    now: datetime,
    lead: timedelta,
    bookings: Sequence[ReservationFacts],
    holders: Sequence[Holder],
    rooms: Mapping[str, Room],
    *,
    delegated: bool,
    namespace: str | None = None,
    pending_jit: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The ``PreemptionRiskForecastResponse`` body (``namespace`` filters pods only)."""
    spans = buckets(now)
    until = spans[-1].end + lead
    found = ahead(now, lead, until, bookings, holders, rooms, delegated=delegated)
    return {
        "generated_at": format_utc(now),
        "lead_minutes": int(lead.total_seconds() // 60),
        "selection_delegated": delegated,
        "buckets": [
            {
                "start": format_utc(b.start),
                "end": format_utc(b.end),
                "classes": _classes(i, b, now, lead, found, holders, rooms, pending_jit or {}),
            }
            for i, b in enumerate(spans)
        ],
        "pods": [
            _pod(h, found, spans, lead)
            for h in sorted(holders, key=lambda h: (h.namespace, h.name))
            if namespace is None or h.namespace == namespace
        ],
    }


def _classes(
    index: int,
    bucket: Bucket,
    now: datetime,
    lead: timedelta,
    found: Sequence[Stop],
    holders: Sequence[Holder],
    rooms: Mapping[str, Room],
    pending: Mapping[str, int],
) -> dict[str, dict[str, int]]:
    names = set(rooms) | {c for s in found for c in s.classes}
    out: dict[str, dict[str, int]] = {}
    for cls in sorted(names):
        room = rooms.get(cls)
        here = [
            s.classes[cls]
            for s in found
            if cls in s.classes and bucket.holds(max(now, s.boundary - lead))
        ]
        pool = sum(
            h.gpus
            for h in holders
            if room is not None
            and h.gpu_class == cls
            and h.node in room.node_gpus
            and h.past_guarantee(bucket.end)
        )
        out[cls] = {
            "capacity": room.total if room else 0,
            "free": room.free if room else 0,
            "demand": sum(o.demand for o in here),
            "shortfall": sum(o.shortfall for o in here),
            "eligible_pool_gpus": pool,
            "pending_jit_gpus": pending.get(cls, 0) if index == 0 else 0,
        }
    return out


def _pod(
    holder: Holder, found: Sequence[Stop], spans: Sequence[Bucket], lead: timedelta
) -> dict[str, Any]:
    risks = pod_risks(holder, found, spans, lead)
    return {
        "namespace": holder.namespace,
        "name": holder.name,
        "uid": holder.uid,
        "gpu_class": holder.gpu_class,
        "gpu_count": holder.gpus,
        "reservation_id": holder.reservation_id,
        "guarantee_end": format_utc(holder.guarantee_end) if holder.guarantee_end else None,
        "buckets": [
            {"risk": risk, "state": state_in(b, holder.guarantee_end)}
            for risk, b in zip(risks, spans, strict=True)
        ],
    }
