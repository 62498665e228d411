"""Typed outcomes of reservation-app calls: what the controller must tell apart.

Every client call returns one of these values; no exception from the HTTP layer
reaches a caller. Successes differ per endpoint (``Granted``, ``Fetched``,
``Cancelled`` …); failures are shared:

- ``Denied`` — an admission gate refused (409, or a 400 carrying the envelope);
- ``Rejected`` — 404: something the request named is unknown or inactive;
- ``Unauthorised`` (401) and ``Forbidden`` (403) — configuration faults (a 403 is also
  the answer to cancelling a booking that has not started);
- ``Invalid`` — 422 or another 4xx: the request is wrong, retrying will not help;
- ``Transient`` — network error, timeout, 5xx, or a body we could not read.

``detail`` is always an excerpt of what the app said (at most ~200 characters, empty
when it said nothing); it is for humans, never for control flow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Generic, TypeVar

from shared.appclient.models import DenialCode, Overstay, Reservation

T = TypeVar("T")


class TransientReason(StrEnum):
    """Why a call is worth repeating later."""

    NETWORK = "network"
    TIMEOUT = "timeout"
    SERVER_ERROR = "server_error"
    #: A body that is not JSON or does not have the contract's shape.
    MALFORMED = "malformed"
    #: The paged list kept shifting under us (see ``AppClient.list_reservations``).
    UNSTABLE = "unstable"


@dataclass(frozen=True)
class Denial:
    """A tolerant reading of the admission-denial envelope (§1.5.2).

    ``code`` is None when absent or not a string; ``retryable`` defaults to True when
    absent or not a boolean; ``not_before`` is None when absent or unparseable.
    """

    retryable: bool = True
    code: str | None = None
    not_before: datetime | None = None
    detail: str = ""


# --- failures -------------------------------------------------------------------------


@dataclass(frozen=True)
class Denied:
    """An admission gate refused the request."""

    denial: Denial
    status: int = 409
    ok: bool = field(default=False, init=False)

    @property
    def detail(self) -> str:
        return self.denial.detail


@dataclass(frozen=True)
class Rejected:
    """404: ``unknown`` names what the request referred to (e.g. ``gpu class 77``)."""

    unknown: str
    detail: str = ""
    status: int = 404
    ok: bool = field(default=False, init=False)


@dataclass(frozen=True)
class Unauthorised:
    """401: the key is missing, malformed, unknown or revoked."""

    detail: str = ""
    status: int = 401
    ok: bool = field(default=False, init=False)


@dataclass(frozen=True)
class Forbidden:
    """403: insufficient scope, or a rule (cancelling a booking before it starts)."""

    detail: str = ""
    status: int = 403
    ok: bool = field(default=False, init=False)


@dataclass(frozen=True)
class Invalid:
    """422 or another 4xx without an envelope: our request is wrong."""

    status: int
    detail: str = ""
    ok: bool = field(default=False, init=False)


@dataclass(frozen=True)
class Transient:
    """Network error, timeout, 5xx or an unreadable body; ``status`` when one came."""

    reason: TransientReason
    detail: str = ""
    status: int | None = None
    ok: bool = field(default=False, init=False)


#: Every failure any call may return.
Failure = Denied | Rejected | Unauthorised | Forbidden | Invalid | Transient


# --- successes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Fetched(Generic[T]):
    """A read that succeeded."""

    value: T
    ok: bool = field(default=True, init=False)


@dataclass(frozen=True)
class Granted:
    """201: a new lease or best-effort stub."""

    reservation: Reservation
    ok: bool = field(default=True, init=False)


@dataclass(frozen=True)
class ReturnedExisting:
    """200: the idempotency key was used before; this is the original, still active."""

    reservation: Reservation
    ok: bool = field(default=True, init=False)


@dataclass(frozen=True)
class ReplayedCancelled:
    """2xx whose reservation is not active: a replay of a cancelled lease (§5 item 15).

    Not a grant. The next attempt for the same pod must use a derived key.
    """

    reservation: Reservation
    ok: bool = field(default=False, init=False)


@dataclass(frozen=True)
class Cancelled:
    """The reservation is cancelled (now or before); ``already_gone`` on a 404."""

    reservation: Reservation | None
    already_gone: bool = False
    ok: bool = field(default=True, init=False)


@dataclass(frozen=True)
class WithheldPod:
    """A candidate the app chose not to admit this round, with its reason."""

    pod_uid: str
    denial: Denial

    @property
    def outranked(self) -> bool:
        """Lost to other candidates this round: not a denial, just retry later."""
        return self.denial.code == DenialCode.OUTRANKED


@dataclass(frozen=True)
class Selection:
    """The app's admission choice: offered uids to admit, in order, and why not others."""

    granted: tuple[str, ...]
    withheld: tuple[WithheldPod, ...] = ()
    ok: bool = field(default=True, init=False)


@dataclass(frozen=True)
class Victims:
    """The app's choice of pods to preempt (only offered uids)."""

    pod_uids: tuple[str, ...]
    ok: bool = field(default=True, init=False)


@dataclass(frozen=True)
class Recorded:
    """An overstay report stored (new or the existing record for that pod)."""

    overstay: Overstay
    ok: bool = field(default=True, init=False)


LeaseResult = Granted | ReturnedExisting | ReplayedCancelled | Failure
CancelResult = Cancelled | Failure
SelectionResult = Selection | Failure
VictimsResult = Victims | Failure
OverstayResult = Recorded | Failure
