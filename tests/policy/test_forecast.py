"""The preemption-risk forecast (R41, contract §4.2)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from shared.clock import utc
from shared.policy.forecast import GUARANTEED, MIXED, OVERSTAY, Bucket, buckets, forecast, state_in
from tests.policy.test_preemption import LEAD, MIN, booking, holder, room

NOW = utc(2026, 1, 5, 10, 20)


def test_three_calendar_aligned_buckets() -> None:
    spans = buckets(NOW)
    assert [(b.start, b.end) for b in spans] == [
        (NOW, utc(2026, 1, 5, 11)),
        (utc(2026, 1, 5, 11), utc(2026, 1, 5, 12)),
        (utc(2026, 1, 5, 12), utc(2026, 1, 5, 13)),
    ]
    assert buckets(utc(2026, 1, 5, 10))[0].end == utc(2026, 1, 5, 11)


def test_state_per_bucket() -> None:
    b = Bucket(utc(2026, 1, 5, 11), utc(2026, 1, 5, 12))
    assert state_in(b, utc(2026, 1, 5, 12)) == GUARANTEED
    assert state_in(b, utc(2026, 1, 5, 11)) == OVERSTAY
    assert state_in(b, None) == OVERSTAY
    assert state_in(b, utc(2026, 1, 5, 11, 30)) == MIXED


def body(**kw: Any) -> dict[str, Any]:
    s = NOW + 10 * MIN
    pods = [
        holder("over", ends=NOW - MIN),
        holder("guarded", ends=NOW + 5 * timedelta(hours=1)),
        holder("late", ends=utc(2026, 1, 5, 11, 30)),
    ]
    books = [booking(1, 1, s), booking(2, 1, utc(2026, 1, 5, 11, 40))]
    return forecast(
        NOW,
        LEAD,
        books,
        pods,
        {"h100": room(n1=(3, 3))},
        delegated=True,
        **kw,
    )


def test_risk_lands_in_the_bucket_of_the_kill_window() -> None:
    out = body(pending_jit={"h100": 2})
    pods = {p["uid"]: p for p in out["pods"]}
    # Running pods are assumed to keep running: "over" is in both boundaries' pools.
    assert [b["risk"] for b in pods["over"]["buckets"]] == [1.0, 0.5, 0.0]
    assert [b["state"] for b in pods["guarded"]["buckets"]] == [GUARANTEED] * 3
    assert [b["risk"] for b in pods["guarded"]["buckets"]] == [0.0, 0.0, 0.0]
    # The second booking (11:40) is met by the pool that now includes "late" (ends 11:30).
    late = pods["late"]["buckets"]
    assert [b["state"] for b in late] == [GUARANTEED, MIXED, OVERSTAY]
    assert [b["risk"] for b in late] == [0.0, 0.5, 0.0]
    first = out["buckets"][0]["classes"]["h100"]
    assert first == {
        "capacity": 3,
        "free": 0,
        "demand": 1,
        "shortfall": 1,
        "eligible_pool_gpus": 1,
        "pending_jit_gpus": 2,
    }
    assert out["buckets"][1]["classes"]["h100"]["pending_jit_gpus"] == 0
    assert out["selection_delegated"] is True
    assert out["lead_minutes"] == 15


def test_namespace_filters_pods_only() -> None:
    out = body(namespace="nobody")
    assert out["pods"] == []
    assert out["buckets"][0]["classes"]["h100"]["demand"] == 1
