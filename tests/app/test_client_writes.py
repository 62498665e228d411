"""The client's writes and selections against the emulator: every outcome class."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.appclient import (
    AdmissionCandidate,
    AppClient,
    BestEffortRequest,
    Cancelled,
    CancelReason,
    DenialCode,
    Denied,
    Fetched,
    Forbidden,
    Granted,
    Invalid,
    KeyScope,
    LeaseRequest,
    OverstayReport,
    PreemptionCandidate,
    Recorded,
    Rejected,
    ReplayedCancelled,
    ReservationKind,
    ReturnedExisting,
    Selection,
    Transient,
    TransientReason,
    Unauthorised,
    Victims,
    lease_key,
)
from tests.app.conftest import START, Running

pytestmark = pytest.mark.anyio


def lease(key: str = "pod-uid-1", **changes: Any) -> LeaseRequest:
    fields: dict[str, Any] = {
        "username": "carol",
        "group_name": "lab",
        "gpu_class_id": 1,
        "gpu_count": 1,
        "duration_seconds": 3000,
        "idempotency_key": key,
        "notes": "on-demand lease for pod carol/train",
    }
    fields.update(changes)
    return LeaseRequest(**fields)


async def test_lease_granted_then_replayed_then_cancelled_replay(client: AppClient) -> None:
    first = await client.create_lease(lease())
    assert isinstance(first, Granted)
    row = first.reservation
    assert (row.kind, row.status, row.username) == ("on_demand", "active", "carol")
    assert row.end_utc - row.start_utc == timedelta(seconds=3000)
    assert row.start_utc == START

    again = await client.create_lease(lease(gpu_count=3))  # same key, other body
    assert isinstance(again, ReturnedExisting)
    assert again.reservation.id == row.id
    assert again.reservation.gpu_count == 1

    cancelled = await client.cancel(row.id, CancelReason.CONTROLLER_REVOKED)
    assert isinstance(cancelled, Cancelled)
    assert cancelled.reservation is not None
    assert cancelled.reservation.cancel_reason == "controller-revoked"

    replay = await client.create_lease(lease())
    assert isinstance(replay, ReplayedCancelled)
    assert not replay.ok
    assert replay.reservation.id == row.id

    fresh = await client.create_lease(lease(lease_key("pod-uid-1", 2)))
    assert isinstance(fresh, Granted)
    assert fresh.reservation.id != row.id


async def test_best_effort_stub_is_granted_and_hidden_from_the_default_pull(
    client: AppClient,
) -> None:
    request = BestEffortRequest("dave", "lab", 2, 1, "be-1", "best-effort admission")
    result = await client.create_best_effort(request)
    assert isinstance(result, Granted)
    stub = result.reservation
    assert stub.kind == ReservationKind.BEST_EFFORT
    assert stub.start_utc == stub.end_utc
    assert stub.su_cost_user == 0
    pulled = await client.list_reservations(START.date(), START.date())
    assert isinstance(pulled, Fetched)
    assert stub.id not in {r.id for r in pulled.value}


@pytest.mark.parametrize("code", list(DenialCode), ids=str)
async def test_every_denial_code_is_read(app: Running, client: AppClient, code: str) -> None:
    retryable = code in {"capacity_physical", "su_budget_member", "outranked"}
    spec: dict[str, Any] = {"code": code, "retryable": retryable}
    if code == DenialCode.SU_BUDGET_MEMBER:
        spec["not_before"] = "2026-10-12T07:00:00Z"
    assert (await app.control("POST", "denials", spec)).status_code == 201
    result = await client.create_lease(lease())
    assert isinstance(result, Denied)
    assert result.status == 409
    assert (result.denial.code, result.denial.retryable) == (code, retryable)
    if code == DenialCode.SU_BUDGET_MEMBER:
        assert result.denial.not_before == datetime(2026, 10, 12, 7, tzinfo=UTC)
    assert result.detail


async def test_real_gates_refuse_with_their_envelope(client: AppClient) -> None:
    over_cap = await client.create_lease(lease("k1", gpu_count=9))
    assert isinstance(over_cap, Denied)
    assert over_cap.denial.code == DenialCode.GPU_COUNT_OVER_CLASS_CAP
    assert over_cap.denial.retryable is False
    stranger = await client.create_lease(lease("k2", username="alice", group_name="course-101"))
    assert isinstance(stranger, Denied)
    assert stranger.denial.code == DenialCode.NOT_A_MEMBER
    assert isinstance(await client.create_lease(lease("k3", gpu_count=8)), Granted)
    full = await client.create_lease(lease("k4", gpu_count=2))
    assert isinstance(full, Denied)
    assert (full.denial.code, full.denial.retryable) == (DenialCode.CAPACITY_PHYSICAL, True)


MALFORMED_ENVELOPES = [
    pytest.param(
        {"detail": "no", "retryable": "false", "code": 7, "not_before": "next week"},
        (True, None, None),
        id="wrong-types-ignored",
    ),
    pytest.param({"detail": "old app"}, (True, None, None), id="plain-409-is-retryable"),
    pytest.param(
        {"detail": "x", "code": "brand_new_gate", "retryable": False},
        (False, "brand_new_gate", None),
        id="unknown-code-retryable-authoritative",
    ),
    pytest.param(
        {"detail": "x", "code": "group_not_yet_valid", "not_before": "2026-11-01T00:00:00"},
        (True, "group_not_yet_valid", datetime(2026, 11, 1, tzinfo=UTC)),
        id="naive-not-before-is-utc",
    ),
    pytest.param(
        {"detail": "x", "retryable": True, "not_before": "2026-11-01T02:00:00+02:00"},
        (True, None, datetime(2026, 11, 1, tzinfo=UTC)),
        id="offset-not-before-converted",
    ),
    pytest.param({"detail": ["a", "b"], "retryable": None}, (True, None, None), id="array-detail"),
    pytest.param("", (True, None, None), id="empty-body"),
    pytest.param("<html>conflict</html>", (True, None, None), id="html-body"),
]


@pytest.mark.parametrize(("body", "expected"), MALFORMED_ENVELOPES)
async def test_malformed_envelopes_are_read_tolerantly(
    app: Running, client: AppClient, body: Any, expected: tuple[Any, ...]
) -> None:
    await app.fault(method="POST", path="/api/reservations", status=409, body=body)
    result = await client.create_lease(lease())
    assert isinstance(result, Denied)
    denial = result.denial
    assert (denial.retryable, denial.code, denial.not_before) == expected
    if body == "<html>conflict</html>":
        assert denial.detail == "<html>conflict</html>"
    if body == "":
        assert denial.detail == ""


async def test_a_400_with_an_envelope_is_a_denial_without_one_invalid(
    app: Running, client: AppClient
) -> None:
    envelope = {"detail": "budget", "code": "su_budget_member", "retryable": False}
    await app.fault(method="POST", path="/api/reservations", status=400, body=envelope)
    await app.fault(method="POST", path="/api/reservations", status=400, body={"detail": "bad"})
    first = await client.create_lease(lease())
    assert isinstance(first, Denied)
    assert first.status == 400
    assert isinstance(await client.create_lease(lease()), Invalid)


async def test_unknown_names_are_rejected_naming_them(client: AppClient) -> None:
    result = await client.create_lease(lease(username="mallory"))
    assert isinstance(result, Rejected)
    assert "'mallory'" in result.unknown
    assert "mallory" in result.detail
    assert isinstance(await client.create_lease(lease(gpu_class_id=77)), Rejected)
    assert isinstance(await client.create_lease(lease(group_name="nope")), Rejected)


async def test_read_only_key_is_forbidden_on_every_write(app: Running) -> None:
    async with app.client(KeyScope.READ_ONLY) as client:
        assert isinstance(await client.create_lease(lease()), Forbidden)
        assert isinstance(await client.cancel(1, CancelReason.NO_SHOW), Forbidden)
        assert isinstance(await client.select_admissions([]), Forbidden)
        assert isinstance(await client.select_victims({}, []), Forbidden)
        report = OverstayReport(1, "p", 1, START, START + timedelta(minutes=5))
        assert isinstance(await client.report_overstay(report), Forbidden)


async def test_revoked_key_is_unauthorised_on_writes(app: Running, client: AppClient) -> None:
    await app.control("POST", "keys/revoke", {"key": app.keys[KeyScope.READ_WRITE]})
    assert isinstance(await client.create_lease(lease()), Unauthorised)
    assert isinstance(await client.cancel(1, CancelReason.NO_SHOW), Unauthorised)


async def test_schema_violations_are_invalid(client: AppClient) -> None:
    result = await client.create_lease(lease(duration_seconds=10))
    assert isinstance(result, Invalid)
    assert result.status == 422
    assert "duration_seconds" in result.detail


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        pytest.param({"status": 503}, TransientReason.SERVER_ERROR, id="503"),
        pytest.param({"drop": True}, TransientReason.NETWORK, id="dropped"),
        pytest.param({"status": 201, "malformed": True}, TransientReason.MALFORMED, id="bad-2xx"),
    ],
)
async def test_create_failures_are_transient(
    app: Running, client: AppClient, fault: dict[str, Any], reason: TransientReason
) -> None:
    await app.fault(method="POST", path="/api/reservations", **fault)
    result = await client.create_lease(lease())
    assert isinstance(result, Transient)
    assert result.reason is reason


@pytest.mark.parametrize("reason", list(CancelReason), ids=str)
async def test_cancel_accepts_every_reason_and_is_idempotent(
    client: AppClient, reason: CancelReason
) -> None:
    granted = await client.create_lease(lease())
    assert isinstance(granted, Granted)
    first = await client.cancel(granted.reservation.id, reason)
    second = await client.cancel(granted.reservation.id, CancelReason.NO_SHOW)
    assert isinstance(first, Cancelled)
    assert isinstance(second, Cancelled)
    assert second.reservation is not None
    assert second.reservation.cancel_reason == reason


async def test_cancel_of_unknown_is_already_gone_and_unstarted_booking_forbidden(
    client: AppClient,
) -> None:
    gone = await client.cancel(999, CancelReason.NO_SHOW)
    assert isinstance(gone, Cancelled)
    assert gone.already_gone
    bob_not_started = await client.cancel(2, CancelReason.NO_SHOW)
    assert isinstance(bob_not_started, Forbidden)
    alice_started = await client.cancel(1, CancelReason.NO_SHOW)
    assert isinstance(alice_started, Cancelled)


async def test_cancel_transient_failures(app: Running, client: AppClient) -> None:
    await app.fault(method="POST", path="/api/reservations/*/cancel", status=500)
    result = await client.cancel(1, CancelReason.NO_SHOW)
    assert isinstance(result, Transient)


def candidate(uid: str, **changes: Any) -> AdmissionCandidate:
    fields: dict[str, Any] = {
        "pod_uid": uid,
        "username": "carol",
        "group_name": "lab",
        "gpu_class_id": 1,
        "gpu_count": 1,
        "duration_seconds": 1800,
        "pod_created_at": START,
        "pod_annotations": {"galends/x": "1"},
    }
    fields.update(changes)
    return AdmissionCandidate(**fields)


async def test_admission_grants_all_by_default(client: AppClient) -> None:
    result = await client.select_admissions([candidate("a"), candidate("b")])
    assert isinstance(result, Selection)
    assert result.granted == ("a", "b")
    assert result.withheld == ()


async def test_admission_withheld_entries_are_read_one_by_one(app: Running) -> None:
    withheld = [
        {"pod_uid": "b", "detail": "lost", "code": "outranked", "retryable": True},
        {"pod_uid": "c", "detail": "no", "code": "not_a_member", "retryable": "no"},
        {"detail": "no uid"},
        "garbage",
        {"pod_uid": "stranger", "code": "outranked"},
    ]
    policy = {"admission": "fixed", "granted": ["a", "zzz"], "withheld": withheld}
    assert (await app.control("POST", "policies", policy)).status_code == 200
    async with app.client() as client:
        result = await client.select_admissions([candidate(u) for u in "abc"])
    assert isinstance(result, Selection)
    assert result.granted == ("a",)
    assert [w.pod_uid for w in result.withheld] == ["b", "c"]
    assert result.withheld[0].outranked
    assert result.withheld[1].denial.retryable is True  # wrong type ignored


async def test_admission_judge_policy_withholds_what_the_gates_refuse(app: Running) -> None:
    await app.control("POST", "policies", {"admission": "judge"})
    async with app.client() as client:
        result = await client.select_admissions(
            [candidate("a", gpu_count=8), candidate("b", gpu_count=4), candidate("c", gpu_count=9)]
        )
    assert isinstance(result, Selection)
    assert result.granted == ("a",)
    assert {w.pod_uid: w.denial.code for w in result.withheld} == {
        "b": DenialCode.CAPACITY_PHYSICAL,
        "c": DenialCode.GPU_COUNT_OVER_CLASS_CAP,
    }


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        pytest.param({"status": 404}, Rejected, id="older-app-without-endpoint"),
        pytest.param({"status": 200, "body": {"withheld": []}}, Transient, id="missing-grants"),
        pytest.param({"status": 200, "body": [1]}, Transient, id="not-an-object"),
        pytest.param({"status": 422}, Invalid, id="422"),
    ],
)
async def test_admission_failures(
    app: Running, client: AppClient, fault: dict[str, Any], expected: type
) -> None:
    await app.fault(method="POST", path="/api/reservations/ondemand-admission", **fault)
    assert isinstance(await client.select_admissions([candidate("a")]), expected)


async def test_invalid_candidates_make_the_batch_invalid(client: AppClient) -> None:
    result = await client.select_admissions([candidate("a", gpu_count=0)])
    assert isinstance(result, Invalid)


def victim(
    uid: str, reservation_id: int, gpus: int = 1, label: str = "h100"
) -> PreemptionCandidate:
    return PreemptionCandidate(
        pod_uid=uid,
        namespace="carol",
        pod_name=uid,
        gpu_class=label,
        gpu_count=gpus,
        reservation_id=reservation_id,
    )


async def test_victims_best_effort_first_then_leases_then_bookings(client: AppClient) -> None:
    stub = await client.create_best_effort(BestEffortRequest("carol", "lab", 1, 1, "s1"))
    leased = await client.create_lease(lease())
    assert isinstance(stub, Granted)
    assert isinstance(leased, Granted)
    pool = [
        victim("booking-pod", 1, 2),
        victim("lease-pod", leased.reservation.id),
        victim("stub-pod", stub.reservation.id),
        victim("a100-pod", 1, label="a100"),
    ]
    result = await client.select_victims({"h100": 2, "a100": 0}, pool)
    assert isinstance(result, Victims)
    assert result.pod_uids == ("stub-pod", "lease-pod")
    nothing = await client.select_victims({"h100": 0}, pool)
    assert isinstance(nothing, Victims)
    assert nothing.pod_uids == ()


async def test_victims_failures(app: Running, client: AppClient) -> None:
    await app.fault(method="POST", path="/api/reservations/preemption-victims", status=502)
    await app.fault(
        method="POST", path="/api/reservations/preemption-victims", status=200, body={"x": 1}
    )
    assert isinstance(await client.select_victims({"h100": 1}, [victim("p", 1)]), Transient)
    assert isinstance(await client.select_victims({"h100": 1}, [victim("p", 1)]), Transient)
    assert isinstance(await client.select_victims({"h100": 1}, [victim("p", 1, 0)]), Invalid)


async def test_overstay_reports(client: AppClient) -> None:
    start = START + timedelta(minutes=5)
    report = OverstayReport(1, "pod-9", 1, start, start + timedelta(minutes=30), "preempted")
    first = await client.report_overstay(report)
    assert isinstance(first, Recorded)
    assert first.overstay.duration_seconds == 1800
    again = await client.report_overstay(
        OverstayReport(1, "pod-9", 2, start, start + timedelta(hours=1), "deleted")
    )
    assert isinstance(again, Recorded)
    assert again.overstay.id == first.overstay.id
    assert again.overstay.end_reason == "preempted"
    backwards = OverstayReport(1, "pod-10", 1, start, start - timedelta(seconds=1))
    assert isinstance(await client.report_overstay(backwards), Invalid)
    orphan = OverstayReport(404, "pod-11", 1, start, start + timedelta(minutes=1))
    assert isinstance(await client.report_overstay(orphan), Rejected)
