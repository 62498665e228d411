"""``AppClient``: every reservation-app endpoint the controller calls (§2).

Each method returns a typed outcome (``shared.appclient.outcomes``) and never raises
for anything the network or the app does. Reads return ``Fetched``; the lease
creates return ``Granted`` / ``ReturnedExisting`` / ``ReplayedCancelled`` or a failure;
a cancel answered 404 is ``Cancelled(already_gone=True)`` (the reservation is gone,
which is what the caller wanted, §5 item 17).

Only the reservation list retries inside the client (per page, ``PageRetryPolicy``,
sleeping on the injected clock); every other call reports its failure at once and
the caller decides when to try again (``shared.appclient.backoff``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from shared.appclient.backoff import PageRetryPolicy
from shared.appclient.http import Answer, Http, Timeouts
from shared.appclient.models import (
    AdmissionCandidate,
    CancelReason,
    GpuClass,
    Group,
    Overstay,
    PreemptionCandidate,
    Reservation,
    ReservationStatus,
    StatusFilter,
)
from shared.appclient.outcomes import (
    Cancelled,
    CancelResult,
    Failure,
    Fetched,
    Granted,
    LeaseResult,
    OverstayResult,
    Recorded,
    Rejected,
    ReplayedCancelled,
    ReturnedExisting,
    Selection,
    SelectionResult,
    Transient,
    TransientReason,
    Victims,
    VictimsResult,
)
from shared.appclient.paging import pull_all
from shared.appclient.reading import (
    classify_failure,
    malformed,
    only_offered,
    parse_json,
    read_withheld,
)
from shared.appclient.requests import BestEffortRequest, LeaseRequest, OverstayReport
from shared.clock import Clock, SystemClock
from shared.logs import log

logger = logging.getLogger("shared.appclient")

M = TypeVar("M", bound=BaseModel)
_RESERVATIONS = "/api/reservations"


class AppClient:
    """The controller's client of one reservation app, with one service key."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        clock: Clock | None = None,
        timeouts: Timeouts | None = None,
        page_retry: PageRetryPolicy | None = None,
        page_size: int = 200,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = Http(base_url, api_key, transport)
        self._clock = clock or SystemClock()
        self._timeouts = timeouts or Timeouts()
        self._page_retry = page_retry or PageRetryPolicy()
        self.page_size = page_size

    def __repr__(self) -> str:
        return f"AppClient({self._http!r})"

    @property
    def key_prefix(self) -> str:
        return self._http.key_prefix

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AppClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- reads ------------------------------------------------------------------------

    async def list_reservations(
        self,
        date_start: date,
        date_end: date,
        *,
        status: StatusFilter = StatusFilter.ALL,
        include_best_effort: bool = False,
    ) -> Fetched[tuple[Reservation, ...]] | Failure:
        """Every reservation overlapping ``[date_start, date_end]`` (local days), each
        id once; a failure instead of any partial list."""
        params: dict[str, Any] = {
            "status": str(status),
            "date_start": date_start.isoformat(),
            "date_end": date_end.isoformat(),
        }
        if include_best_effort:
            params["include_best_effort"] = "true"

        async def fetch(offset: int, limit: int) -> list[Reservation] | Failure:
            return await self._reservation_page({**params, "limit": limit, "offset": offset})

        rows = await pull_all(fetch, key=lambda r: r.id, page_size=self.page_size)
        if isinstance(rows, list):
            return Fetched(tuple(rows))
        return rows

    async def list_gpu_classes(self) -> Fetched[tuple[GpuClass, ...]] | Failure:
        """Every GPU class (inactive ones included, order unspecified)."""
        answer = await self._http.send("GET", "/api/gpu-classes", seconds=self._timeouts.default)
        return _parse_list(answer, GpuClass, "gpu classes")

    async def get_gpu_class(self, class_id: int) -> Fetched[GpuClass] | Failure:
        """One class; ``Rejected`` when the app does not know it."""
        path = f"/api/gpu-classes/{class_id}"
        answer = await self._http.send("GET", path, seconds=self._timeouts.default)
        return _parse_one(answer, GpuClass, f"gpu class {class_id}")

    async def list_groups(
        self, names: Sequence[str] | None = None
    ) -> Fetched[tuple[Group, ...]] | Failure:
        """Groups (by name). With ``names``, only those entries are read — a malformed
        entry for any other group cannot break the refresh (§2.4)."""
        answer = await self._http.send("GET", "/api/groups", seconds=self._timeouts.default)
        if isinstance(answer, Transient):
            return answer
        if not answer.is_success:
            return classify_failure(answer.status, answer.text, "groups")
        is_json, body = parse_json(answer.text)
        if not is_json or not isinstance(body, list):
            return malformed("groups: not a JSON array", answer.status)
        wanted = None if names is None else set(names)
        entries = [e for e in body if wanted is None or _entry_name(e) in wanted]
        return _validate_list(entries, Group, "groups", answer.status)

    # --- writes -----------------------------------------------------------------------

    async def create_lease(self, request: LeaseRequest) -> LeaseResult:
        """An on-demand lease; check the outcome type, a 2xx may be a cancelled replay."""
        return await self._create(request.body(), _names(request))

    async def create_best_effort(self, request: BestEffortRequest) -> LeaseResult:
        """A best-effort stub (same outcomes as a lease)."""
        return await self._create(request.body(), _names(request))

    async def cancel(self, reservation_id: int, reason: CancelReason) -> CancelResult:
        """Cancel with a machine reason; idempotent on the app side."""
        path = f"{_RESERVATIONS}/{reservation_id}/cancel"
        answer = await self._http.send(
            "POST", path, body={"reason": str(reason)}, seconds=self._timeouts.long
        )
        parsed = _parse_one(answer, Reservation, f"reservation {reservation_id}")
        if isinstance(parsed, Fetched):
            return Cancelled(parsed.value)
        if isinstance(parsed, Rejected):
            log(logger, logging.INFO, "appclient.cancel_already_gone", reservation=reservation_id)
            return Cancelled(None, already_gone=True)
        if isinstance(parsed, Transient) and parsed.reason is TransientReason.MALFORMED:
            return Cancelled(None)  # any 2xx is success; the body is not needed
        return parsed

    async def select_admissions(self, candidates: Sequence[AdmissionCandidate]) -> SelectionResult:
        """Which offered pods to admit this round (advisory). Only offered uids are kept."""
        body = {"candidates": [c.model_dump(mode="json") for c in candidates]}
        answer = await self._post_json(f"{_RESERVATIONS}/ondemand-admission", body)
        if not isinstance(answer, dict):
            return answer
        offered = [c.pod_uid for c in candidates]
        granted = only_offered(answer.get("granted_pod_uids"), offered)
        if granted is None:
            return malformed("admission: granted_pod_uids missing or not an array", 200)
        return Selection(granted, read_withheld(answer.get("withheld"), offered))

    async def select_victims(
        self,
        needed_by_class: Mapping[str, int],
        candidates: Sequence[PreemptionCandidate],
    ) -> VictimsResult:
        """Which offered pods to preempt (advisory). An empty tuple is a real answer."""
        body = {
            "needed_by_class": dict(needed_by_class),
            "candidates": [c.model_dump(mode="json") for c in candidates],
        }
        answer = await self._post_json(f"{_RESERVATIONS}/preemption-victims", body)
        if not isinstance(answer, dict):
            return answer
        victims = only_offered(answer.get("victim_pod_uids"), [c.pod_uid for c in candidates])
        if victims is None:
            return malformed("victims: victim_pod_uids missing or not an array", 200)
        return Victims(victims)

    async def report_overstay(self, report: OverstayReport) -> OverstayResult:
        """Record an ended overstay (deduplicated by pod uid on the app side)."""
        path = f"{_RESERVATIONS}/{report.reservation_id}/overstay"
        answer = await self._http.send(
            "POST", path, body=report.body(), seconds=self._timeouts.long
        )
        parsed = _parse_one(answer, Overstay, f"reservation {report.reservation_id}")
        return Recorded(parsed.value) if isinstance(parsed, Fetched) else parsed

    # --- plumbing ---------------------------------------------------------------------

    async def _create(self, body: dict[str, Any], names: str) -> LeaseResult:
        answer = await self._http.send(
            "POST", _RESERVATIONS, body=body, seconds=self._timeouts.long
        )
        parsed = _parse_one(answer, Reservation, names)
        if not isinstance(parsed, Fetched):
            return parsed
        if isinstance(answer, Transient):  # unreachable: a Transient never parses
            return answer
        reservation = parsed.value
        if reservation.status != ReservationStatus.ACTIVE:
            log(logger, logging.INFO, "appclient.replayed_cancelled", reservation=reservation.id)
            return ReplayedCancelled(reservation)
        return Granted(reservation) if answer.status == 201 else ReturnedExisting(reservation)

    async def _post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any] | Failure:
        answer = await self._http.send("POST", path, body=body, seconds=self._timeouts.long)
        if isinstance(answer, Transient):
            return answer
        if not answer.is_success:
            return classify_failure(answer.status, answer.text, path)
        is_json, parsed = parse_json(answer.text)
        if not is_json or not isinstance(parsed, dict):
            return malformed(f"{path}: not a JSON object", answer.status)
        return parsed

    async def _reservation_page(self, params: dict[str, Any]) -> list[Reservation] | Failure:
        """One page, retried per policy on network errors and 5xx only."""
        attempt = 1
        while True:
            answer = await self._http.send(
                "GET", _RESERVATIONS, params=params, seconds=self._timeouts.long
            )
            result = _parse_list(answer, Reservation, "reservations")
            if isinstance(result, Fetched):
                return list(result.value)
            pause = self._page_retry.pause_after(attempt) if _worth_retrying(result) else None
            if pause is None:
                return result
            log(logger, logging.INFO, "appclient.page_retry", offset=params["offset"], pause=pause)
            await self._clock.sleep(pause)
            attempt += 1


def _worth_retrying(failure: Failure) -> bool:
    """Network errors, timeouts and 5xx (not a malformed 2xx, not a 4xx)."""
    return isinstance(failure, Transient) and failure.reason in (
        TransientReason.NETWORK,
        TransientReason.TIMEOUT,
        TransientReason.SERVER_ERROR,
    )


def _names(request: LeaseRequest | BestEffortRequest) -> str:
    return (
        f"username {request.username!r}, group {request.group_name!r}"
        f" or gpu class {request.gpu_class_id}"
    )


def _entry_name(entry: Any) -> Any:
    return entry.get("name") if isinstance(entry, dict) else None


def _parse_one(answer: Answer | Transient, model: type[M], unknown: str) -> Fetched[M] | Failure:
    if isinstance(answer, Transient):
        return answer
    if not answer.is_success:
        return classify_failure(answer.status, answer.text, unknown)
    try:
        return Fetched(model.model_validate_json(answer.text))
    except ValidationError as exc:
        return malformed(f"{model.__name__}: {exc.error_count()} invalid field(s)", answer.status)


def _parse_list(
    answer: Answer | Transient, model: type[M], what: str
) -> Fetched[tuple[M, ...]] | Failure:
    if isinstance(answer, Transient):
        return answer
    if not answer.is_success:
        return classify_failure(answer.status, answer.text, what)
    is_json, body = parse_json(answer.text)
    if not is_json or not isinstance(body, list):
        return malformed(f"{what}: not a JSON array", answer.status)
    return _validate_list(body, model, what, answer.status)


def _validate_list(
    entries: list[Any], model: type[M], what: str, status: int
) -> Fetched[tuple[M, ...]] | Failure:
    try:
        return Fetched(tuple(model.model_validate(entry) for entry in entries))
    except ValidationError as exc:
        return malformed(f"{what}: {exc.error_count()} invalid field(s)", status)
