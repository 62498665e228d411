"""The reservation-app client (reservation-api.md §2): typed outcomes, never exceptions.

``AppClient`` is the entry point; see ``docs/developer/reservation-app.md`` for the outcome
classes and the retry policy. This package is the only product code that imports
``httpx``.
"""

from __future__ import annotations

from shared.appclient.backoff import (
    DenialClass,
    PageRetryPolicy,
    RetryPlan,
    after_denial,
    classify_denial,
    cooldown,
    exponential,
)
from shared.appclient.client import AppClient
from shared.appclient.http import Timeouts, key_prefix
from shared.appclient.models import (
    AdmissionCandidate,
    CancelReason,
    DenialCode,
    GpuClass,
    Group,
    GroupMember,
    KeyScope,
    Overstay,
    PreemptionCandidate,
    Reservation,
    ReservationKind,
    ReservationStatus,
    StatusFilter,
)
from shared.appclient.outcomes import (
    Cancelled,
    CancelResult,
    Denial,
    Denied,
    Failure,
    Fetched,
    Forbidden,
    Granted,
    Invalid,
    LeaseResult,
    Recorded,
    Rejected,
    ReplayedCancelled,
    ReturnedExisting,
    Selection,
    Transient,
    TransientReason,
    Unauthorised,
    Victims,
    WithheldPod,
)
from shared.appclient.requests import (
    BestEffortRequest,
    LeaseRequest,
    OverstayReport,
    fetch_window,
    lease_key,
)
from shared.appclient.trace import unit_of_work

__all__ = [
    "AdmissionCandidate",
    "AppClient",
    "BestEffortRequest",
    "CancelReason",
    "CancelResult",
    "Cancelled",
    "Denial",
    "DenialClass",
    "DenialCode",
    "Denied",
    "Failure",
    "Fetched",
    "Forbidden",
    "GpuClass",
    "Granted",
    "Group",
    "GroupMember",
    "Invalid",
    "KeyScope",
    "LeaseRequest",
    "LeaseResult",
    "Overstay",
    "OverstayReport",
    "PageRetryPolicy",
    "PreemptionCandidate",
    "Recorded",
    "Rejected",
    "ReplayedCancelled",
    "Reservation",
    "ReservationKind",
    "ReservationStatus",
    "RetryPlan",
    "ReturnedExisting",
    "Selection",
    "StatusFilter",
    "Timeouts",
    "Transient",
    "TransientReason",
    "Unauthorised",
    "Victims",
    "WithheldPod",
    "after_denial",
    "classify_denial",
    "cooldown",
    "exponential",
    "fetch_window",
    "key_prefix",
    "lease_key",
    "unit_of_work",
]
