"""The GPU budget ledger of a reservation (DESIGN §3.2, refined: docs/developer/architecture.md
"The ledger protocol").

Every admission under a reservation — by any webhook replica or by the reconciler —
claims GPUs on its ``GPUReservation`` object through ``claim``: read, check that the
holds plus the request fit ``spec.gpuCount``, append a hold with one conditional write
of ``/status``. A lost race (409, or a failed JSON Patch ``test``: 422) means someone
wrote in between: re-read and decide again.

What a claim's write is conditional on is exactly what could make its decision wrong:
the object (``metadata.uid``), its spec (``metadata.generation``: bumped by spec writes
only) and the *ledger token* (``status.ledgerToken``), a random value that every write
which may take room from a claim — adding holds, raising a hold's GPUs, rewriting the
ledger — sets afresh. Writes that only drop, bind or mark holds keep the token: a
decision made before them stays within the budget after them, so a claim does not lose
its race to them, and they (JSON Patches testing the very entries they touch) do not
lose theirs to a claim's append. A ledger without a token (old objects, a wiped status)
is claimed against its resourceVersion, as a PUT would be, and gets its first token.
Because every write that could take room is conditional on what its decision read,
the sum of the holds never exceeds the budget, however many writers race.

Terms:
- *hold*: one entry of ``status.holds`` (``shared.model.Hold``): a claim key, GPUs, when
  it was made, and the pod once known (*bound* once the pod's uid is recorded).
- *used*: the sum of every hold's GPUs.

The first half of this module is pure arithmetic on ``GPUReservation`` values (no side
effects); the reconciler uses it to keep the ledger true (bind, drop, expire,
rebuild). The second half is the I/O shell: ``claim`` and ``amend``, the only two
functions that write a ledger.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol, TypeVar

from shared import model
from shared.errors import Conflict, Invalid, KubeError, NotFound
from shared.logs import log
from shared.model import GPUReservation, Hold
from shared.pointer import resolve
from shared.resources import GPU_RESERVATIONS, Resource

_log = logging.getLogger(__name__)
T = TypeVar("T")

#: Safety bound on read-decide-write rounds inside one call (the deadline is the real one).
MAX_ATTEMPTS = 64

# --- pure arithmetic ------------------------------------------------------------------


def used(res: GPUReservation) -> int:
    """GPUs claimed by every hold."""
    return res.used_gpus


def free(res: GPUReservation) -> int:
    """GPUs left in the budget (negative when pods admitted elsewhere overran it)."""
    return res.facts.gpu_count - used(res)


def fits(res: GPUReservation, gpus: int) -> bool:
    """Whether a new hold of ``gpus`` keeps the holds within ``gpuCount``."""
    return gpus >= 0 and used(res) + gpus <= res.facts.gpu_count


def verdict(res: GPUReservation, gpus: int, now: datetime) -> str:
    """Why a claim of ``gpus`` at ``now`` would be refused, or ``"admitted"``.

    Order: ``not_open`` (cancelled, or outside ``[start, end)``; a best-effort stub has a
    zero-length window and only needs to be active), ``too_small`` (the request alone
    exceeds the budget: waiting never helps), ``full`` (the holds leave too little).
    """
    return _verdict(res.facts, used(res), gpus, now)


def _verdict(facts: model.ReservationFacts, used_gpus: int, gpus: int, now: datetime) -> str:
    """``verdict`` for a ledger whose holds sum to ``used_gpus``."""
    if facts.state is model.State.CANCELLED:
        return "not_open"
    if facts.kind is not model.Kind.BEST_EFFORT and not facts.is_open(now):
        return "not_open"
    if gpus > facts.gpu_count:
        return "too_small"
    return "admitted" if gpus >= 0 and used_gpus + gpus <= facts.gpu_count else "full"


class LedgerFull(ValueError):
    """A hold was added that does not fit the budget."""


def add_hold(res: GPUReservation, hold: Hold) -> GPUReservation:
    """``res`` with ``hold`` appended; ``LedgerFull`` when it does not fit."""
    if not fits(res, hold.gpus):
        raise LedgerFull(f"{res.name}: {hold.gpus} GPU(s) do not fit, {free(res)} free")
    return replace(res, holds=(*res.holds, hold))


def drop(res: GPUReservation, claims: Collection[str]) -> GPUReservation:
    """``res`` without the holds of ``claims`` (claim ids or their keys)."""
    keys = {model.as_claim_key(c) for c in claims}
    return replace(res, holds=tuple(h for h in res.holds if h.claim not in keys))


def bind(res: GPUReservation, claim_id: str, pod: str, pod_uid: str) -> GPUReservation:
    """``res`` with the hold of ``claim_id`` (a claim id or its key) tied to the pod
    (name and uid)."""
    key = model.as_claim_key(claim_id)
    holds = tuple(replace(h, pod=pod, pod_uid=pod_uid) if h.claim == key else h for h in res.holds)
    return replace(res, holds=holds)


def announce_all(res: GPUReservation, pods: Mapping[str, tuple[str, str]]) -> GPUReservation:
    """``res`` with each hold whose claim id is in ``pods`` (claim → pod name, uid) tied
    to that pod and marked announced (the ``RuntimeGuaranteed`` Event was sent), for
    many claims in one walk over the holds. Claims are claim ids or their keys."""
    by_key = {model.as_claim_key(c): pod for c, pod in pods.items()}
    holds = tuple(
        replace(h, pod=by_key[h.claim][0], pod_uid=by_key[h.claim][1], announced=True)
        if h.claim in by_key
        else h
        for h in res.holds
    )
    return replace(res, holds=holds)


def stale_claims(res: GPUReservation, now: datetime, ttl_s: float) -> list[str]:
    """Claim keys of unbound holds made more than ``ttl_s`` seconds before ``now``."""
    cutoff = now - timedelta(seconds=ttl_s)
    return [h.claim for h in res.holds if not h.bound and h.at < cutoff]


def expire(res: GPUReservation, now: datetime, ttl_s: float) -> GPUReservation:
    """``res`` without unbound holds older than the TTL (a create that never happened)."""
    return drop(res, set(stale_claims(res, now, ttl_s)))


@dataclass(frozen=True)
class PodUse:
    """A live pod admitted under the reservation, as the reconciler sees it."""

    name: str
    uid: str
    gpus: int
    #: The pod's ``galends/admission-claim`` (None: admitted without one, e.g. legacy).
    claim: str | None = None
    #: The pod's ``galends/admitted-at`` (None: unknown or unreadable).
    admitted_at: datetime | None = None
    #: The pod's namespace: only the booking owner's pods take a hold (None: not checked).
    namespace: str | None = None
    #: ``metadata.creationTimestamp`` (None: absent or unreadable) and
    #: ``metadata.resourceVersion``: the order pods were persisted in (``persisted``).
    created_at: datetime | None = None
    resource_version: str = ""

    def __post_init__(self) -> None:
        # ``claim`` is the ledger's key of the pod's claim id, as holds keep it.
        if self.claim is not None:
            object.__setattr__(self, "claim", model.as_claim_key(self.claim))


def persisted(pod: PodUse) -> tuple[bool, datetime, bool, int, str]:
    """The sort key of "persisted first": creation time (one-second resolution), then
    the resourceVersion as an integer where it parses (the API server hands them out in
    write order; a watch delivers creations in that order), then the uid (a fixed,
    arbitrary tie-break). A pod with no readable time or version sorts last."""
    rv = pod.resource_version
    number = int(rv) if rv.isascii() and rv.isdigit() else -1
    created = pod.created_at
    return (created is None, created or _NEVER, number < 0, number, pod.uid)


_NEVER = datetime.min.replace(tzinfo=UTC)


def open_for_claims(facts: model.ReservationFacts, now: datetime) -> bool:
    """Whether a new hold may be made under ``facts`` at ``now`` (``verdict``'s
    ``not_open`` test: active, and inside the window unless a best-effort stub)."""
    if facts.state is model.State.CANCELLED:
        return False
    return facts.kind is model.Kind.BEST_EFFORT or facts.is_open(now)


def presumed_announced(pod: PodUse, now: datetime, ttl_s: float) -> bool:
    """Whether a pod found without a hold was surely announced already.

    Admissions are announced within seconds, so a pod admitted more than the claim
    TTL ago whose hold is missing (a wiped status) was announced then, and a pod
    without a readable ``admitted-at`` (legacy) is not announced afresh. Only a pod
    admitted within the TTL is announced (again, at worst).
    """
    if pod.admitted_at is None:
        return True
    return pod.admitted_at <= now - timedelta(seconds=ttl_s)


def rebuild(
    res: GPUReservation,
    pods: Iterable[PodUse],
    now: datetime,
    ttl_s: float,
    unseen_s: float | None = None,
) -> GPUReservation:
    """The ledger the live ``pods`` imply (self-healing; no side effects).

    The pods are taken in the order they were persisted (``persisted``). Each pod
    keeps the hold bound to its uid; else it takes the hold of its claim id when that
    hold is unbound or bound to a pod that is gone (one claim binds one pod: the first
    persisted with it — a later pod carrying it is a copy and gets nothing), and only a
    pod of the booking owner's namespace binds by claim. Held pods keep their holds
    whatever the window (an overstaying pod is preemption's business), sized by their
    request. Unbound holds nobody took are kept while younger than ``unseen_s`` (their
    pod may still be being created; ``ttl_s`` when not given).

    A pod with no hold is *adopted* (a hold with its claim id, else ``pod-<uid>``,
    marked announced unless admitted within the TTL: ``presumed_announced``) when it
    is the owner's, asks for GPUs, its claim id is not held already, the booking is
    open for claims now (``open_for_claims``) and the budget has room for it after
    every hold kept — in persisted order, never beyond ``gpuCount``. So a wiped status
    heals from the pods, and a pod admitted outside the ledger (a webhook outage, a
    forged reference) counts only if it could have been admitted now; the
    reconciler's backstop evicts the others from reserved nodes.
    """
    ordered = sorted(pods, key=persisted)
    owner = res.facts.owner
    live = {p.uid for p in ordered}
    by_uid: dict[str, Hold] = {}
    for h in res.holds:
        if h.pod_uid:
            by_uid.setdefault(h.pod_uid, h)  # two holds bound to one pod: the first counts
    by_claim = {h.claim: h for h in res.holds}
    kept: list[Hold] = []
    taken: set[str] = set()
    orphans: list[PodUse] = []
    for pod in ordered:
        match = by_uid.get(pod.uid)
        if match is None and pod.claim and (pod.namespace is None or pod.namespace == owner):
            hold = by_claim.get(pod.claim)
            if hold is not None and (hold.pod_uid is None or hold.pod_uid not in live):
                match = hold
        if match is None or match.claim in taken:
            orphans.append(pod)
            continue
        taken.add(match.claim)
        kept.append(Hold(match.claim, pod.gpus, match.at, pod.name, pod.uid, match.announced))
    cutoff = now - timedelta(seconds=ttl_s if unseen_s is None else unseen_s)
    by_name = {p.name: p for p in ordered}
    pending = [
        h
        for h in res.holds
        if not h.bound and h.claim not in taken and h.at >= cutoff and not superseded(h, by_name)
    ]
    taken.update(h.claim for h in pending)
    room = res.facts.gpu_count - sum(h.gpus for h in (*pending, *kept))
    if open_for_claims(res.facts, now):
        for pod in orphans:
            claim_id = pod.claim or model.claim_key(f"pod-{pod.uid}")
            if pod.namespace not in (None, owner) or pod.gpus <= 0 or claim_id in taken:
                continue
            if pod.gpus > room:
                continue
            room -= pod.gpus
            taken.add(claim_id)
            announced = presumed_announced(pod, now, ttl_s)
            kept.append(Hold(claim_id, pod.gpus, now, pod.name, pod.uid, announced))
    return replace(res, holds=tuple(pending + kept))


def unseen(before: GPUReservation, after: GPUReservation, now: datetime, unseen_s: float) -> int:
    """How many unbound holds of ``before`` that ``after`` no longer has were older
    than ``unseen_s``: holds whose pod never appeared, released (the rest of the
    dropped unbound holds were superseded by a later admission of their pod)."""
    cutoff = now - timedelta(seconds=unseen_s)
    left = {h.claim for h in after.holds}
    return sum(1 for h in before.holds if not h.bound and h.claim not in left and h.at < cutoff)


def superseded(hold: Hold, pods: Mapping[str, PodUse]) -> bool:
    """Whether an unbound ``hold`` is dead although young: it names a live pod that
    carries another claim, admitted at or after the hold was made. The admission that
    made the hold stopped between its claim and stamping the pod (a crash, a refused
    patch), and the pod was admitted again since — it can never carry this claim, so
    the hold would only keep the budget from the next pod until the TTL. A pod
    admitted before the hold (an old pod whose name a new create reuses) keeps it."""
    pod = pods.get(hold.pod) if hold.pod else None
    if pod is None or pod.claim is None or pod.claim == hold.claim:
        return False
    return pod.admitted_at is not None and pod.admitted_at >= hold.at


# --- the I/O shell --------------------------------------------------------------------


class LedgerGateway(Protocol):
    """What the ledger needs of ``shared.gateway.Gateway`` (which satisfies it)."""

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        """GET one object."""
        ...

    async def replace(
        self,
        res: Resource,
        name: str,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PUT an object or one of its subresources."""
        ...

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: dict[str, Any] | list[dict[str, Any]],
        namespace: str | None = None,
        patch_type: Literal["json", "merge", "strategic"] = "json",
        subresource: str | None = None,
        read_answer: bool = True,
    ) -> dict[str, Any]:
        """PATCH an object or one of its subresources (a JSON Patch by default); with
        ``read_answer=False`` the answer need not be decoded (the caller ignores it)."""
        ...


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The outcome of one ``claim`` call (or of one ask of a ``claim_group``)."""

    admitted: bool
    #: The new hold's claim id when admitted (also for a dry run).
    claim: str | None
    #: The object as written (or, when refused, the ledger the ask was judged on: as
    #: last read, plus the admitted asks before it in a written group; None if never
    #: read).
    reservation: GPUReservation | None
    #: "admitted" | "full" | "too_small" | "not_found" | "not_open" | "deadline" | "error"
    reason: str
    #: Races lost on the way (a 409, or a 422 from a failed ``test``).
    conflicts: int
    #: The raw object ``reservation`` stands for (as written when admitted, as read when
    #: refused without a write; None for a dry run, when never read, or for an ask
    #: refused within a written group): a cache takes it as it is — unless ``landed``
    #: is set: ``raw`` is then the object the write was expected to leave
    #: (``expected_after``, no resourceVersion), the answer not read.
    raw: dict[str, Any] | None = None
    #: The admitting write when its answer was not read (``claim_group(echo=False)``).
    landed: QuietWrite | None = None


@dataclass(frozen=True, slots=True)
class QuietWrite:
    """A claim's write whose answer is not read: what a cache needs to tell the object
    it leaves, once it lands, from the server's other states (``webhook.cache``)."""

    #: The reservation written.
    name: str
    #: The ledger token the write tested (the object's before it) and the one it set.
    tested: str
    token: str
    #: The write's JSON Patch (``appended_ops``) and the holds it appended.
    ops: Sequence[dict[str, Any]]
    holds: tuple[Hold, ...]
    #: The resourceVersion of the object it was decided on; "" when that was the
    #: expected result of a write still in flight (a pipelined group).
    base_version: str
    #: The object and the ledger the write leaves when it lands on the state it was
    #: decided on (``expected_after``, the ledger decided): a cache holding that very
    #: state takes them as they are instead of applying ``ops`` again.
    after: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    result: GPUReservation | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Ask:
    """One pod's request within a group claim: ``gpus`` at ``now`` for ``pod``."""

    gpus: int
    pod: str | None
    now: datetime
    #: The hold is written already announced (see ``claim``).
    announced: bool = False


def decide_group(
    res: GPUReservation,
    asks: Sequence[Ask],
    claim_ids: Sequence[str],
    token: str | None = None,
) -> tuple[GPUReservation, list[str], list[Hold]]:
    """Admit ``asks`` in order while they fit (no side effects).

    Each ask is judged by ``verdict`` against the ledger holding the asks admitted
    before it, so the group never holds more than the budget — exactly as the same asks
    made one after another would. Returns the ledger with the new holds, each ask's
    reason, and the new holds (ask ``i``'s hold keeps ``model.claim_key(claim_ids[i])``:
    the claim id itself goes only onto the pod), each made at
    its ask's instant as stored (``model.stored_instant``: the ledger a write leaves is
    the one its answer would show). ``token``: the ledger token the write sets, given
    to the ledger returned when it holds new holds (one copy of the ledger, not two).
    """
    reasons: list[str] = []
    new: list[Hold] = []
    taken = used(res)  # summed once, then kept: not once per ask over every hold
    for ask, claim_id in zip(asks, claim_ids, strict=True):
        reason = _verdict(res.facts, taken, ask.gpus, ask.now)
        reasons.append(reason)
        if reason == "admitted":
            at = model.stored_instant(ask.now)
            key = model.claim_key(claim_id)
            new.append(Hold(key, ask.gpus, at, pod=ask.pod, announced=ask.announced))
            taken += ask.gpus
    if new:
        changed: dict[str, Any] = {"holds": (*res.holds, *new)}
        if token is not None:
            changed["token"] = token
        res = replace(res, **changed)
    return res, reasons, new


def new_claim_ids(count: int) -> list[str]:
    """``count`` fresh claim ids: random (version 4) UUIDs in their text form, as
    ``str(uuid.uuid4())`` gives them, from one read of the system's randomness."""
    raw = bytearray(os.urandom(16 * count))
    for at in range(6, 16 * count, 16):
        raw[at] = raw[at] & 0x0F | 0x40  # version 4
        raw[at + 2] = raw[at + 2] & 0x3F | 0x80  # the RFC 4122 variant
    text = raw.hex()
    return [
        f"{text[i : i + 8]}-{text[i + 8 : i + 12]}-{text[i + 12 : i + 16]}-"
        f"{text[i + 16 : i + 20]}-{text[i + 20 : i + 32]}"
        for i in range(0, 32 * count, 32)
    ]


class _Stop(Exception):
    """Ends a read-decide-write loop with a reason (not_found, deadline, error)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def claim(
    gateway: LedgerGateway,
    namespace: str,
    name: str,
    gpus: int,
    *,
    pod: str | None,
    now: datetime,
    deadline: float,
    dry_run: bool = False,
    cached: dict[str, Any] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    announced: bool = False,
) -> ClaimResult:
    """Claim ``gpus`` of reservation ``name`` for ``pod``; the one admission path.

    One call is one hold for one pod (``claim_group`` writes several at once).
    ``deadline`` is a ``monotonic()`` instant: no call starts after it and every call is
    cut off at it (reason ``deadline``; a write cut off mid-flight may still land, and
    then expires as an unbound hold after the TTL). ``cached`` (a watch cache's copy of
    the object) is used for the first decision instead of a GET; every retry after a
    409 GETs the object fresh. The hold is written to the ``/status`` subresource with
    the resourceVersion that was read. ``dry_run`` decides the same way and writes
    nothing. Never raises for API errors: they come back as reason ``error``.
    ``announced`` marks the hold as already announced (a re-link sends its own
    RuntimeGuaranteed, so the admission announcer must not send another).
    """
    ask = Ask(gpus, pod, now, announced)
    if not dry_run:
        found = await claim_group(
            gateway, namespace, name, [ask], deadline=deadline, cached=cached, monotonic=monotonic
        )
        return found[0]
    try:
        raw = (
            cached
            if cached is not None
            else await _read(gateway, namespace, name, deadline, monotonic)
        )
        last = _parse(raw, name)
    except _Stop as stop:
        _log_stop("ledger.claim_failed", name, stop.reason, 0)
        return ClaimResult(False, None, None, stop.reason, 0)
    claim_ids = new_claim_ids(1)
    updated, reasons, new = decide_group(last, [ask], claim_ids)
    if new:
        return ClaimResult(True, claim_ids[0], updated, "admitted", 0)
    return ClaimResult(False, None, last, reasons[0], 0)


async def claim_group(
    gateway: LedgerGateway,
    namespace: str,
    name: str,
    asks: Sequence[Ask],
    *,
    deadline: float,
    cached: dict[str, Any] | None = None,
    cached_parsed: GPUReservation | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    on_sent: Callable[[dict[str, Any], GPUReservation], None] | None = None,
    pipelined: bool = False,
    echo: bool = True,
    sending: Callable[[QuietWrite], None] | None = None,
) -> list[ClaimResult]:
    """Claim every ask that fits, in order, with one ``/status`` write; one result each.

    The read-decide-write loop of ``claim`` (same ``deadline`` and ``cached`` rules),
    deciding the whole group at once (``decide_group``): a lost race re-reads and
    re-decides every ask, so each is told the outcome of the write that landed. The
    write is a JSON Patch of ``/status`` that appends the new holds to the stored ones,
    conditional on what the decision read (``appended_ops``), so neither the request
    nor its encoding grows with the holds already stored. A stop (not found, deadline,
    error) is every ask's reason. ``cached_parsed`` is ``cached`` parsed already (a
    watch cache keeps both), so it is not parsed again.

    ``on_sent(raw, res)`` hears, as each write is sent, the object and the ledger that
    write will leave when it lands (``expected_after``; only for a write a follower can
    test: one setting a token on an object with uid and generation), so a second group
    can be decided on it before the answer (``webhook.groupcommit``). ``pipelined``:
    ``cached`` is such an expectation, not a read — the first write may reach the
    server before the one it follows, so a 422 whose tests hold on the re-read is
    decided again on that re-read instead of stopping with ``error``.

    ``echo=False``: the answer to a write that lands is not decoded or parsed — the
    claim needs only that it landed. The admitted results then carry the ledger
    decided (``updated``: the read's resourceVersion) and, as ``raw``, the object the
    write leaves when it lands on what was read (``expected_after``), with ``landed``
    set: a cache takes them as provisional (``webhook.cache``); ``sending`` hears of
    each such write (every attempt) as it is sent, so the watch's event of it can be
    recognised even before its answer. A write without a token to test (the first on
    a tokenless ledger) reads its answer as with ``echo``.
    """
    conflicts = 0
    raw = cached
    parsed = cached_parsed if cached is not None else None
    last: GPUReservation | None = None
    claim_ids = new_claim_ids(len(asks))
    try:
        for _ in range(MAX_ATTEMPTS):
            raw = (
                raw
                if raw is not None
                else await _read(gateway, namespace, name, deadline, monotonic)
            )
            last = parsed if parsed is not None else _parse(raw, name)
            parsed = None
            updated, reasons, new = decide_group(last, asks, claim_ids, model.new_token())
            if not new:
                return [ClaimResult(False, None, last, r, conflicts, raw) for r in reasons]
            entries = [model.hold_to_status(h) for h in new]
            ops = _ops(raw, updated, entries, max(a.now for a in asks))
            tested = model.token_of(raw.get("status"))
            expected = expected_after(raw, ops) if on_sent or not echo else None
            if on_sent is not None and expected is not None:
                on_sent(expected, updated)
            quiet: QuietWrite | None = None
            if expected is not None and tested and not echo:
                version = str((raw.get("metadata") or {}).get("resourceVersion") or "")
                quiet = QuietWrite(
                    name, tested, updated.token, ops, tuple(new), version, expected, updated
                )
                if sending is not None:
                    sending(quiet)
            written = await _patch(
                gateway, namespace, name, ops, deadline, monotonic, quiet is not None
            )
            if not isinstance(written, int):
                # A refused ask is told the ledger it was judged on (the read plus the
                # group's admitted holds): holds dropped meanwhile may show in the echo.
                if quiet is not None:
                    res, landed, echoed = updated, quiet, expected
                else:
                    landed = None
                    res, echoed = _echo(written, updated)
                return [
                    ClaimResult(True, cid, res, r, conflicts, echoed, landed)
                    if r == "admitted"
                    else ClaimResult(False, None, updated, r, conflicts)
                    for r, cid in zip(reasons, claim_ids, strict=True)
                ]
            conflicts += 1
            code = 409 if pipelined and conflicts == 1 else written  # overtaken: no stop
            raw = await _reread(gateway, namespace, name, code, ops, deadline, monotonic)
        raise _Stop("deadline")
    except _Stop as stop:
        _log_stop("ledger.claim_failed", name, stop.reason, conflicts)
        return [ClaimResult(False, None, last, stop.reason, conflicts) for _ in asks]


async def amend(
    gateway: LedgerGateway,
    namespace: str,
    name: str,
    change: Callable[[GPUReservation], GPUReservation],
    *,
    now: datetime,
    deadline: float,
    monotonic: Callable[[], float] = time.monotonic,
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
    """
    raw: dict[str, Any] | None = None
    try:
        for _ in range(MAX_ATTEMPTS):
            raw = (
                raw
                if raw is not None
                else await _read(gateway, namespace, name, deadline, monotonic)
            )
            current = _parse(raw, name)
            updated = change(current)
            if (updated.holds, updated.status_extra) == (current.holds, current.status_extra):
                return current
            ops = shrink_ops(raw, current, updated, now)
            if ops is not None:
                patched = await _patch(gateway, namespace, name, ops, deadline, monotonic)
                if not isinstance(patched, int):
                    return _echo(patched, updated)[0]
                raw = await _reread(gateway, namespace, name, patched, ops, deadline, monotonic)
                continue
            # Anything else may take room from a claim decided before it: a new token.
            updated = replace(updated, token=model.new_token())
            written = await _write(gateway, namespace, raw, updated, now, deadline, monotonic)
            if written is not None:
                return written
            raw = None
        raise _Stop("deadline")
    except _Stop as stop:
        _log_stop("ledger.amend_failed", name, stop.reason, None)
        return None


def status_body(raw: dict[str, Any], res: GPUReservation, now: datetime) -> dict[str, Any]:
    """The ``/status`` PUT body: the object as read with ``res``'s ledger as status."""
    body = dict(raw)
    body["status"] = model.status_of(res, now)
    return body


async def _read(
    gateway: LedgerGateway,
    namespace: str,
    name: str,
    deadline: float,
    monotonic: Callable[[], float],
) -> dict[str, Any]:
    try:
        return await _within(gateway.get(GPU_RESERVATIONS, name, namespace), deadline, monotonic)
    except NotFound as exc:
        raise _Stop("not_found") from exc
    except KubeError as exc:
        log(_log, logging.WARNING, "ledger.read_failed", reservation=name, error=str(exc))
        raise _Stop("error") from exc


def appended_ops(
    raw: dict[str, Any], res: GPUReservation, entries: Sequence[dict[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    """The JSON Patch of ``/status`` that adds the hold ``entries`` to ``raw``'s ledger
    (``res`` is the result), conditional on what could make the decision wrong.

    When ``raw`` has a uid, a generation and a ledger token, the patch first tests
    all three (``guard_ops``: a failed test is a 422) and replaces the token with
    ``res.token``: it lands on any ledger that only lost, bound or marked holds since
    ``raw``, never on one whose spec changed or to which room-taking writes happened.
    Otherwise it replaces ``metadata.resourceVersion`` with the one read (a
    precondition: 409 when the object changed at all, kubernetes-facts §2) and sets
    the first token. The stored holds are neither sent nor re-encoded. A ``raw``
    without a resourceVersion to fall back on: ``ValueError``. Applied to ``raw``, the
    patch gives the status ``status_body`` would write for ``res``.
    """
    ops = guard_ops(raw)
    if ops is None:
        version = (raw.get("metadata") or {}).get("resourceVersion")
        if not isinstance(version, str) or not version:
            raise ValueError("the object read has no resourceVersion to write against")
        ops = [{"op": "replace", "path": "/metadata/resourceVersion", "value": version}]
    totals: dict[str, Any] = {"usedGpus": res.used_gpus, "phase": res.facts.phase(now).value}
    if res.token:
        totals[model.LEDGER_TOKEN] = res.token
    status = raw.get("status")
    stored = status.get("holds") if isinstance(status, dict) else None
    if isinstance(stored, list) and stored:
        ops += [{"op": "add", "path": "/status/holds/-", "value": e} for e in entries]
        return ops + [{"op": "add", "path": f"/status/{k}", "value": v} for k, v in totals.items()]
    # No hold yet: ``raw`` may be a re-encoding of a parsed view (the reconciler's) whose
    # empty status the stored object lacks, and an ``add`` under a missing parent is
    # refused — so the whole status is written, as a PUT would (nothing to save here).
    whole = dict(status) if isinstance(status, dict) else {}
    whole.update(holds=[*entries], **totals)
    return [*ops, {"op": "add", "path": "/status", "value": whole}]


def expected_after(raw: dict[str, Any], ops: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The object a claim's patch (``appended_ops``) leaves when it lands on ``raw``
    unchanged, as far as a following claim needs it (uid, generation, status); None
    when a follower could not be conditional on it (no uid or generation: its new
    resourceVersion is unknown). Shallow: shares ``raw``'s unchanged parts."""
    meta = raw.get("metadata")
    if not isinstance(meta, dict) or "uid" not in meta or "generation" not in meta:
        return None
    status = raw.get("status")
    status = dict(status) if isinstance(status, dict) else {}
    appended = []
    for op in ops:
        path, value = op["path"], op.get("value")
        if op["op"] != "add" or not path.startswith("/status"):
            continue
        if path == "/status":
            status = dict(value) if isinstance(value, dict) else {}
        elif path == "/status/holds/-":
            appended.append(value)
        else:
            status[path.removeprefix("/status/")] = value
    if appended:
        status["holds"] = [*status.get("holds", []), *appended]
    expected = dict(raw, status=status)
    expected["metadata"] = {k: v for k, v in meta.items() if k != "resourceVersion"}
    return expected if guard_ops(expected) is not None else None


def guard_ops(raw: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The ``test`` operations a claim decided on ``raw`` is conditional on: the uid, the
    generation (spec changes) and the ledger token as read; None when ``raw`` lacks one
    of them (a re-encoded view, an old or wiped status): the resourceVersion is then the
    precondition."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    uid, generation = meta.get("uid"), meta.get("generation")
    token = model.token_of(raw.get("status"))
    if not isinstance(uid, str) or not uid or not token:
        return None
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
        return None
    return [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": "/metadata/generation", "value": generation},
        {"op": "test", "path": f"/status/{model.LEDGER_TOKEN}", "value": token},
    ]


def shrink_ops(
    raw: dict[str, Any], current: GPUReservation, updated: GPUReservation, now: datetime
) -> list[dict[str, Any]] | None:
    """The JSON Patch of ``/status`` that turns ``current`` (parsed from ``raw``) into
    ``updated`` when that only drops holds, rewrites some in place with no more GPUs
    (binds, marks) and leaves the token and the other status fields alone; None for
    any other change (it needs a PUT and a new token).

    Each touched hold is tested whole at the index read (a concurrent drop shifts
    it, a concurrent bind or mark changes it: 422, re-read), then rewritten in place,
    then the dropped ones are removed from the highest index down. Claims only append,
    so they never move an index this tests; no resourceVersion is sent, and the token
    stays: a claim decided before this write is still within the budget after it.
    ``usedGpus`` and ``phase`` are set from this read (display values; see
    docs/developer/architecture.md on how they settle).
    """
    if (updated.status_extra, updated.token) != (current.status_extra, current.token):
        return None
    status = raw.get("status")
    stored = status.get("holds") if isinstance(status, dict) else None
    if not isinstance(stored, list) or len(stored) != len(current.holds):
        return None
    kept = iter(updated.holds)
    nxt = next(kept, None)
    touched: list[int] = []
    rewritten: list[dict[str, Any]] = []
    removed: list[int] = []
    for i, hold in enumerate(current.holds):
        if nxt is not None and nxt.claim == hold.claim:
            if nxt.gpus > hold.gpus:
                return None
            if nxt != hold:
                touched.append(i)
                value = model.hold_to_status(nxt)
                rewritten.append({"op": "replace", "path": f"/status/holds/{i}", "value": value})
            nxt = next(kept, None)
        else:
            touched.append(i)
            removed.append(i)
    if nxt is not None:
        return None  # a hold added, or the holds reordered
    ops = [{"op": "test", "path": f"/status/holds/{i}", "value": stored[i]} for i in touched]
    ops += rewritten
    ops += [{"op": "remove", "path": f"/status/holds/{i}"} for i in reversed(removed)]
    totals = {"usedGpus": updated.used_gpus, "phase": updated.facts.phase(now).value}
    return ops + [{"op": "add", "path": f"/status/{k}", "value": v} for k, v in totals.items()]


def tests_hold(ops: Sequence[dict[str, Any]], obj: dict[str, Any]) -> bool:
    """Whether every ``test`` operation of ``ops`` holds on ``obj`` (RFC 6901 pointers,
    JSON equality): a write whose tests all hold on a re-read failed for some other
    reason than a race."""
    for op in ops:
        if op.get("op") != "test":
            continue
        found, value = resolve(obj, str(op.get("path", "")))
        if not found or not _same_json(value, op.get("value")):
            return False
    return True


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality as a JSON Patch ``test`` judges it (RFC 6902 §4.6): numbers by
    value (``1`` is ``1.0``), but unlike Python's ``==``, ``true`` is not ``1``. The
    webhook's diff (``webhook.patch._same``) is stricter on purpose (docs/developer/webhook.md
    "The patch")."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


async def _reread(
    gateway: LedgerGateway,
    namespace: str,
    name: str,
    code: int,
    ops: Sequence[dict[str, Any]],
    deadline: float,
    monotonic: Callable[[], float],
) -> dict[str, Any]:
    """The object read again after a write lost its race (``code`` 409 or 422). When a
    422 answered a write whose ``test`` operations all hold on the re-read, it was not a
    race (an invalid entry, say): a stop with reason ``error`` instead of a loop."""
    raw = await _read(gateway, namespace, name, deadline, monotonic)
    if code == 422 and tests_hold(ops, raw):
        log(_log, logging.WARNING, "ledger.write_failed", reservation=name, error="422 not stale")
        raise _Stop("error")
    return raw


async def _write(
    gateway: LedgerGateway,
    namespace: str,
    raw: dict[str, Any],
    updated: GPUReservation,
    now: datetime,
    deadline: float,
    monotonic: Callable[[], float],
) -> GPUReservation | None:
    """The object as written; ``None`` on a 409 (someone wrote first)."""
    body = status_body(raw, updated, now)
    written = await _put(gateway, namespace, updated.name, body, deadline, monotonic)
    return None if written is None else _echo(written, updated)[0]


async def _put(
    gateway: LedgerGateway,
    namespace: str,
    name: str,
    body: dict[str, Any],
    deadline: float,
    monotonic: Callable[[], float],
) -> dict[str, Any] | None:
    """PUT ``/status``: the object as written; ``None`` on a 409 (someone wrote first)."""
    call = gateway.replace(GPU_RESERVATIONS, name, body, namespace, subresource="status")
    written = await _written(call, name, deadline, monotonic)
    return None if isinstance(written, int) else written


async def _patch(
    gateway: LedgerGateway,
    namespace: str,
    name: str,
    ops: list[dict[str, Any]],
    deadline: float,
    monotonic: Callable[[], float],
    quiet: bool = False,
) -> dict[str, Any] | int:
    """JSON Patch ``/status``: the object as written (``quiet``: not read, ``{}``); the
    code of a lost race: 409 (stale), or 422 when ``ops`` hold ``test`` operations (a
    failed test is a 422 Invalid, kubernetes-facts §3.1; the caller re-reads to tell a
    race from anything else)."""
    call = gateway.patch(
        GPU_RESERVATIONS, name, ops, namespace, "json", subresource="status", read_answer=not quiet
    )
    tested = any(op.get("op") == "test" for op in ops)
    return await _written(call, name, deadline, monotonic, stale_if_invalid=tested)


async def _written(
    call: Awaitable[dict[str, Any]],
    name: str,
    deadline: float,
    monotonic: Callable[[], float],
    stale_if_invalid: bool = False,
) -> dict[str, Any] | int:
    """The answer to a ledger write; 409 for a 409 (or 422 for a 422 when
    ``stale_if_invalid``): a lost race; a stop for anything else."""
    try:
        return await _within(call, deadline, monotonic)
    except Conflict:
        log(_log, logging.DEBUG, "ledger.claim_conflict", reservation=name)
        return 409
    except Invalid as exc:
        if not stale_if_invalid:
            log(_log, logging.WARNING, "ledger.write_failed", reservation=name, error=str(exc))
            raise _Stop("error") from exc
        log(_log, logging.DEBUG, "ledger.claim_conflict", reservation=name)
        return 422
    except NotFound as exc:
        raise _Stop("not_found") from exc
    except KubeError as exc:
        log(_log, logging.WARNING, "ledger.write_failed", reservation=name, error=str(exc))
        raise _Stop("error") from exc


def _echo(
    written: dict[str, Any], updated: GPUReservation
) -> tuple[GPUReservation, dict[str, Any] | None]:
    """The object the server answered a write with, parsed, and the raw echo."""
    try:
        return model.from_object(written), written
    except ValueError:
        return updated, None  # the write succeeded; an odd echo does not undo it


async def _within(call: Awaitable[T], deadline: float, monotonic: Callable[[], float]) -> T:
    remaining = deadline - monotonic()
    if remaining <= 0:
        if asyncio.iscoroutine(call):
            call.close()
        raise _Stop("deadline")
    try:
        async with asyncio.timeout(remaining):  # not wait_for: it can swallow a cancel (3.11)
            return await call
    except TimeoutError as exc:
        raise _Stop("deadline") from exc


def _ops(
    raw: dict[str, Any], res: GPUReservation, entries: list[dict[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    try:
        return appended_ops(raw, res, entries, now)
    except ValueError as exc:
        log(_log, logging.WARNING, "ledger.malformed", reservation=res.name, error=str(exc))
        raise _Stop("error") from exc


def _parse(raw: dict[str, Any], name: str) -> GPUReservation:
    try:
        return model.from_object(raw)
    except ValueError as exc:
        log(_log, logging.WARNING, "ledger.malformed", reservation=name, error=str(exc))
        raise _Stop("error") from exc


def _log_stop(event: str, name: str, reason: str, conflicts: int | None) -> None:
    level = logging.INFO if reason in {"not_found", "deadline"} else logging.WARNING
    log(_log, level, event, reservation=name, reason=reason, conflicts=conflicts)
