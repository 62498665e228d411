"""The compare-and-swap shell: the only functions that write a ledger.

``write_claims`` carries out one ``ClaimPlan`` (a group of asks on one reservation):
read, decide every ask (``decide_group``), append the new holds with one conditional
JSON Patch of ``/status`` (``appended_ops``), and on a lost race re-read and decide
again until the plan's deadline. ``amend`` applies a pure change (drop, bind, expire,
rebuild) the same way. A ``WriteLog`` hears of each claim write as it is sent — the
one thing a pipelining caller needs; nothing else calls back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NotRequired, Protocol, Required, TypedDict, Unpack

from shared import model
from shared.ledger.arithmetic import Ask, Decision, Reason, decide_group, new_claim_ids
from shared.ledger.calls import LedgerGateway, Stop, Target, echo, log_stop
from shared.ledger.patches import appended_ops, expected_after, shrink_ops, status_body
from shared.logs import log
from shared.model import GPUReservation, Hold

_log = logging.getLogger("shared.ledger")

#: Safety bound on read-decide-write rounds inside one call (the deadline is the real one).
MAX_ATTEMPTS = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class Write:
    """One attempt of a claim write as it is sent: what a cache or a pipelining caller
    needs to recognise the object it leaves once it lands."""

    #: The reservation written.
    name: str
    #: The ledger token the write tests ("" for a ledger without one: the write is then
    #: conditional on the resourceVersion) and the one it sets.
    tested: str
    token: str
    #: The write's JSON Patch (``appended_ops``) and the holds it appends.
    ops: Sequence[dict[str, Any]]
    holds: tuple[Hold, ...]
    #: The resourceVersion of the object it was decided on; "" when that was the
    #: expected result of a write still in flight (a pipelined plan).
    base_version: str
    #: The object and the ledger the write leaves when it lands on the state it was
    #: decided on (``expected_after``, the ledger decided).
    after: dict[str, Any] = field(compare=False, repr=False)
    result: GPUReservation = field(compare=False, repr=False)
    #: 0 for the plan's first attempt; a retry after a lost race counts up.
    attempt: int = field(default=0, compare=False)
    #: The answer is not read (``ClaimPlan.echo`` off, and a token to place it by).
    quiet: bool = field(default=False, compare=False)


#: The name this record had when only quiet writes were told.
QuietWrite = Write


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimResult:
    """One ask's outcome."""

    admitted: bool
    #: The new hold's claim id when admitted (also for a dry run).
    claim: str | None = None
    #: The object as written (or, when refused, the ledger the ask was judged on: as
    #: last read, plus the admitted asks before it in a written group; None if never
    #: read).
    reservation: GPUReservation | None = None
    reason: Reason
    #: Races lost on the way (a 409, or a 422 from a failed ``test``).
    conflicts: int = 0
    #: The raw object ``reservation`` stands for (as written when admitted, as read when
    #: refused without a write; None for a dry run, when never read, or for an ask
    #: refused within a written group) — unless ``landed`` is set: ``raw`` is then the
    #: object the write was expected to leave (``expected_after``), the answer not read.
    raw: dict[str, Any] | None = None
    #: The admitting write when its answer was not read.
    landed: Write | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimPlan:
    """A group of asks on one reservation, and how to write them."""

    namespace: str
    name: str
    asks: Sequence[Ask]
    #: A ``monotonic()`` instant: no call starts after it, every call is cut off at it.
    deadline: float
    #: The object to decide on first instead of a GET (a watch cache's copy), and the
    #: same parsed when the caller has it. Every retry after a lost race GETs it.
    base: dict[str, Any] | None = None
    parsed: GPUReservation | None = None
    #: ``base`` is the expected result of a write still in flight, not a read: that
    #: write may reach the server after this one, so a first 422 whose tests hold on
    #: the re-read is decided again instead of ending in ``error``.
    pipelined: bool = False
    #: Read the answer to a write that lands. Off: the results carry the ledger decided
    #: and, as ``raw``, what the write leaves (``landed`` set) — unless the ledger had
    #: no token to place the write by, when the answer is read anyway.
    echo: bool = True
    #: Decide and write nothing.
    dry_run: bool = False
    monotonic: Callable[[], float] = time.monotonic

    def target(self, gateway: LedgerGateway) -> Target:
        return Target(gateway, self.namespace, self.name, self.deadline, self.monotonic)


class WriteLog(Protocol):
    """Hears of each claim write as it is sent (before its answer)."""

    def sent(self, write: Write) -> None:
        """``write`` is on its way (every attempt, each with its ``attempt``)."""
        ...


async def write_claims(
    gateway: LedgerGateway, plan: ClaimPlan, journal: WriteLog | None = None
) -> list[ClaimResult]:
    """Claim every ask of ``plan`` that fits, in order, with one ``/status`` write; one
    result each. Never raises for API errors: they come back as reason ``error``.

    A lost race re-reads and re-decides every ask, so each is told the outcome of the
    write that landed. The write appends the new holds to the stored ones,
    conditional on what the decision read (``appended_ops``), so neither the request
    nor its encoding grows with the holds already stored. A stop (not found, deadline,
    error) is every ask's reason. A write cut off mid-flight may still land; its hold
    then expires unbound after the claim TTL.
    """
    target = plan.target(gateway)
    asks, conflicts = plan.asks, 0
    raw, parsed = plan.base, plan.parsed if plan.base is not None else None
    last: GPUReservation | None = None
    claim_ids = new_claim_ids(len(asks))
    try:
        for attempt in range(MAX_ATTEMPTS):
            raw = raw if raw is not None else await target.read()
            last = parsed if parsed is not None else target.parse(raw)
            parsed = None
            token = None if plan.dry_run else model.new_token()
            decision = decide_group(last, asks, claim_ids, token)
            if plan.dry_run:
                return _dry(decision, last, claim_ids)
            if not decision.new:
                return [
                    ClaimResult(
                        admitted=False, reservation=last, reason=r, conflicts=conflicts, raw=raw
                    )
                    for r in decision.reasons
                ]
            updated = decision.ledger
            ops = _ops(raw, updated, decision.new, max(a.now for a in asks))
            write = _write_of(plan, raw, ops, decision, attempt)
            if write is not None and journal is not None:
                journal.sent(write)
            quiet = write is not None and write.quiet
            written = await target.patch(ops, quiet=quiet)
            if not isinstance(written, int):
                echoed: dict[str, Any] | None
                if write is not None and quiet:
                    res, echoed, landed = updated, write.after, write
                else:
                    (res, echoed), landed = echo(written, updated), None
                return [
                    ClaimResult(
                        admitted=True,
                        claim=cid,
                        reservation=res,
                        reason=r,
                        conflicts=conflicts,
                        raw=echoed,
                        landed=landed,
                    )
                    if r is Reason.ADMITTED
                    else ClaimResult(
                        admitted=False, reservation=updated, reason=r, conflicts=conflicts
                    )
                    for r, cid in zip(decision.reasons, claim_ids, strict=True)
                ]
            conflicts += 1
            code = 409 if plan.pipelined and conflicts == 1 else written  # overtaken: no stop
            raw = await target.reread(code, ops)
        raise Stop(Reason.DEADLINE)
    except Stop as stop:
        log_stop("ledger.claim_failed", plan.name, stop.reason, conflicts)
        return [
            ClaimResult(admitted=False, reservation=last, reason=stop.reason, conflicts=conflicts)
            for _ in asks
        ]


def _dry(decision: Decision, last: GPUReservation, claim_ids: Sequence[str]) -> list[ClaimResult]:
    """A dry run's results: admitted asks told the ledger decided and a claim id,
    refused ones the ledger read."""
    return [
        ClaimResult(admitted=True, claim=cid, reservation=decision.ledger, reason=r)
        if r is Reason.ADMITTED
        else ClaimResult(admitted=False, reservation=last, reason=r)
        for r, cid in zip(decision.reasons, claim_ids, strict=True)
    ]


def _ops(
    raw: dict[str, Any], res: GPUReservation, new: Sequence[Hold], now: datetime
) -> list[dict[str, Any]]:
    entries = [model.hold_to_status(h) for h in new]
    try:
        return appended_ops(raw, res, entries, now)
    except ValueError as exc:
        log(_log, logging.WARNING, "ledger.malformed", reservation=res.name, error=str(exc))
        raise Stop(Reason.ERROR) from exc


def _write_of(
    plan: ClaimPlan,
    raw: dict[str, Any],
    ops: list[dict[str, Any]],
    decision: Decision,
    attempt: int,
) -> Write | None:
    """The write as a ``WriteLog`` hears of it; None when a follower could not be
    conditional on what it leaves (no uid or generation on the object)."""
    after = expected_after(raw, ops)
    if after is None:
        return None
    tested = model.token_of(raw.get("status")) or ""
    version = str((raw.get("metadata") or {}).get("resourceVersion") or "")
    updated = decision.ledger
    return Write(
        name=plan.name,
        tested=tested,
        token=updated.token or "",
        ops=ops,
        holds=tuple(decision.new),
        base_version=version,
        after=after,
        result=updated,
        attempt=attempt,
        quiet=bool(tested) and not plan.echo,
    )


# --- the calls the reconciler makes (keyword terms over a plan) -----------------------


class ClaimTerms(TypedDict, total=False):
    """``claim``'s keyword terms (``ClaimPlan`` and ``Ask`` fields)."""

    pod: Required[str | None]
    now: Required[datetime]
    deadline: Required[float]
    dry_run: NotRequired[bool]
    cached: NotRequired[dict[str, Any] | None]
    monotonic: NotRequired[Callable[[], float]]
    #: The hold is written already announced (see ``Ask.announced``).
    announced: NotRequired[bool]


class GroupTerms(TypedDict, total=False):
    """``claim_group``'s keyword terms (``ClaimPlan`` fields)."""

    deadline: Required[float]
    cached: NotRequired[dict[str, Any] | None]
    monotonic: NotRequired[Callable[[], float]]


async def claim(
    gateway: LedgerGateway, namespace: str, name: str, gpus: int, **terms: Unpack[ClaimTerms]
) -> ClaimResult:
    """Claim ``gpus`` of reservation ``name`` for one pod: ``write_claims`` of a plan
    with one ask (``dry_run``: decided the same way, nothing written)."""
    ask = Ask(gpus, terms["pod"], terms["now"], announced=terms.get("announced", False))
    plan = ClaimPlan(
        namespace=namespace,
        name=name,
        asks=[ask],
        deadline=terms["deadline"],
        base=terms.get("cached"),
        dry_run=terms.get("dry_run", False),
        monotonic=terms.get("monotonic", time.monotonic),
    )
    (result,) = await write_claims(gateway, plan)
    return result


async def claim_group(
    gateway: LedgerGateway,
    namespace: str,
    name: str,
    asks: Sequence[Ask],
    **terms: Unpack[GroupTerms],
) -> list[ClaimResult]:
    """``write_claims`` of a plan with ``asks`` (read unless ``cached`` is given)."""
    plan = ClaimPlan(
        namespace=namespace,
        name=name,
        asks=asks,
        deadline=terms["deadline"],
        base=terms.get("cached"),
        monotonic=terms.get("monotonic", time.monotonic),
    )
    return await write_claims(gateway, plan)


class AmendTerms(TypedDict, total=False):
    """``amend``'s keyword terms: the instant of the change and the call's deadline;
    ``seen``, the reservation as a watch cache holds it, to start from instead of a
    read."""

    now: Required[datetime]
    deadline: Required[float]
    monotonic: NotRequired[Callable[[], float]]
    seen: NotRequired[GPUReservation | None]


def _unchanged(change: Callable[[GPUReservation], GPUReservation], res: GPUReservation) -> bool:
    """Whether ``change`` leaves ``res``'s holds and other status fields as they are."""
    after = change(res)
    return (after.holds, after.status_extra) == (res.holds, res.status_extra)


async def amend(
    gateway: LedgerGateway,
    namespace: str,
    name: str,
    change: Callable[[GPUReservation], GPUReservation],
    **terms: Unpack[AmendTerms],
) -> GPUReservation | None:
    """Apply the pure ``change`` (drop, bind, expire, rebuild…) to the ledger by CAS.

    A change that only drops, binds or marks holds (``shrink_ops``) is a JSON Patch
    testing each hold it touches and keeping the ledger token, so claims appending
    meanwhile neither fail it nor fail by it; anything else (holds added or raised, a
    rewritten ledger, other status fields) is a PUT of the whole status with the
    resourceVersion read and a new ledger token. Re-reads and re-applies on a lost race
    (409, or 422 from a failed ``test``) until ``deadline``. Writes nothing when the
    change leaves the holds and the other status fields (``status_extra``: e.g. the
    no-show record) as they were. Returns the object as written (or as read when
    unchanged); ``None`` when it is gone, malformed, or the deadline passed.

    ``seen`` (a watch cache's copy) stands in for the first read: the patch's
    ``test`` operations, or the PUT's resourceVersion, refuse a write on a copy that
    lags; a change that looks done on the copy is read again before it is believed,
    and one the write's answer still wants (a hold the copy lacked) is applied again.
    """
    now = terms["now"]
    monotonic = terms.get("monotonic", time.monotonic)
    target = Target(gateway, namespace, name, terms["deadline"], monotonic)
    seen = terms.get("seen")
    raw = model.to_object(seen, namespace, now) if seen is not None else None
    try:
        for _ in range(MAX_ATTEMPTS):
            guessed, seen = seen is not None, None
            raw = raw if raw is not None else await target.read()
            current = target.parse(raw)
            updated = change(current)
            if (updated.holds, updated.status_extra) == (current.holds, current.status_extra):
                if guessed:  # the copy may lag a write that undid it: look again
                    raw = None
                    continue
                return current
            ops = shrink_ops(raw, current, updated, now)
            if ops is not None:
                patched = await target.patch(ops)
                if isinstance(patched, int):
                    raw = await target.reread(patched, ops)
                    continue
                done, raw = echo(patched, updated)
            else:
                # Anything else may take room from a claim decided before it: a new token.
                updated = replace(updated, token=model.new_token())
                written = await target.put(status_body(raw, updated, now))
                if written is None:
                    raw = None
                    continue
                done, raw = echo(written, updated)
            if not guessed or raw is None or _unchanged(change, done):
                return done
            # The copy lacked something the change is for (a hold claimed since): the
            # write's answer is the ledger as it is now; apply the change to it too.
        raise Stop(Reason.DEADLINE)
    except Stop as stop:
        log_stop("ledger.amend_failed", name, stop.reason, None)
        return None
