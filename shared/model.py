"""The cluster-side model of a reservation: the ``GPUReservation`` object.

``ReservationFacts`` is the object's spec — a mirror of the reservation app's row,
written only by the reconciler's sync and push paths. ``Hold`` is one entry of the
budget ledger in the object's status (DESIGN §3.2): a claim of GPUs made by an
admission, bound to the pod that carries the claim id. ``GPUReservation`` is both,
plus the resourceVersion that optimistic concurrency needs.

Conversion to and from the Kubernetes object is strict: ``from_object`` raises
``ValueError`` naming the bad field, so a malformed object is skipped with a clear
log, never half-read.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from functools import cached_property
from typing import Any

from shared import fields, vocab
from shared.clock import format_utc


class Kind(StrEnum):
    """The reservation app's reservation kinds (contract §3.6)."""

    BOOKING = "booking"
    ON_DEMAND = "on_demand"
    BEST_EFFORT = "best_effort"


class State(StrEnum):
    """The app's reservation status."""

    ACTIVE = "active"
    CANCELLED = "cancelled"


class Phase(StrEnum):
    """Where a reservation stands in time, shown in ``kubectl get gpures``."""

    UPCOMING = "Upcoming"
    OPEN = "Open"
    ENDED = "Ended"
    CANCELLED = "Cancelled"


@dataclass(frozen=True)
class ReservationFacts:
    """What the reservation app says about one reservation (the object's spec)."""

    id: int
    #: Username of the holder; pods in the namespace of that name may use it.
    owner: str
    gpu_class: str
    gpu_class_name: str
    gpu_count: int
    kind: Kind
    start: datetime
    end: datetime
    state: State
    updated_at: datetime
    owner_id: int | None = None
    group: str | None = None
    cancel_reason: str | None = None

    @cached_property
    def name(self) -> str:
        """The object name and booking reference, ``res-<id>`` (made once per value:
        the leader's passes read it for every reservation on every wake)."""
        return reference(self.id)

    def phase(self, now: datetime) -> Phase:
        """Cancelled, else Upcoming / Open / Ended by the half-open window [start, end)."""
        if self.state is State.CANCELLED:
            return Phase.CANCELLED
        if now < self.start:
            return Phase.UPCOMING
        if now < self.end:
            return Phase.OPEN
        return Phase.ENDED

    def is_open(self, now: datetime) -> bool:
        """Active and ``start <= now < end``."""
        return self.phase(now) is Phase.OPEN


@dataclass(frozen=True, slots=True)
class Hold:
    """One claim on a reservation's GPU budget."""

    claim: str
    gpus: int
    at: datetime
    #: Name of the pod carrying the claim, once known (a generateName pod has none at
    #: admission time; the reconciler binds it later).
    pod: str | None = None
    pod_uid: str | None = None
    #: True once the RuntimeGuaranteed Event for this admission was sent.
    announced: bool = False

    def __post_init__(self) -> None:
        # ``claim`` is always a key (``claim_key``): a claim id given here — one a
        # ledger written before holds kept keys holds — is turned into its key, so its
        # pod still matches it.
        object.__setattr__(self, "claim", as_claim_key(self.claim))

    @property
    def bound(self) -> bool:
        """Whether the hold is tied to a concrete pod (by uid)."""
        return self.pod_uid is not None


@dataclass(frozen=True)
class GPUReservation:
    """A ``GPUReservation`` object: facts, ledger and concurrency token."""

    facts: ReservationFacts
    holds: tuple[Hold, ...] = ()
    resource_version: str = ""
    #: Extra status fields we do not model here (kept verbatim on status writes).
    status_extra: dict[str, Any] = field(default_factory=dict)
    #: ``status.ledgerToken``: a random value every write that may take room from a
    #: claim (adds holds, rewrites the ledger) sets afresh; a claim tests it instead of
    #: the resourceVersion (``shared.ledger``). "" when the status has none (or a
    #: malformed one): claims then fall back to the resourceVersion.
    token: str = ""

    @property
    def name(self) -> str:
        return self.facts.name

    @cached_property
    def used_gpus(self) -> int:
        """GPUs claimed by every hold (summed once per value: the holds never change)."""
        return sum(h.gpus for h in self.holds)


def reference(reservation_id: int) -> str:
    """``res-<id>``: the booking reference and the object name."""
    return f"{vocab.RESERVATION_REF_PREFIX}{reservation_id}"


def parse_reference(text: str) -> int | None:
    """The id in ``res-<id>``; ``None`` when the text is not such a reference."""
    prefix = vocab.RESERVATION_REF_PREFIX
    if not text.startswith(prefix):
        return None
    digits = text[len(prefix) :]
    if not digits.isdigit() or len(digits) > 18:
        return None
    return int(digits)


# --- conversion to and from the Kubernetes object ------------------------------------


def facts_to_spec(facts: ReservationFacts) -> dict[str, Any]:
    """The object's ``spec`` for ``facts``."""
    spec: dict[str, Any] = {
        "reservationId": facts.id,
        "owner": facts.owner,
        "gpuClass": facts.gpu_class,
        "gpuClassName": facts.gpu_class_name,
        "gpuCount": facts.gpu_count,
        "kind": facts.kind.value,
        "start": format_utc(facts.start),
        "end": format_utc(facts.end),
        "state": facts.state.value,
        "updatedAt": format_utc(facts.updated_at),
    }
    if facts.owner_id is not None:
        spec["ownerId"] = facts.owner_id
    if facts.group is not None:
        spec["group"] = facts.group
    if facts.cancel_reason is not None:
        spec["cancelReason"] = facts.cancel_reason
    return spec


#: The instant ``hold_to_status`` last wrote and its text: the holds a write appends
#: (a group's asks) and the writes of one second share it.
_LAST_AT: tuple[datetime, str] | None = None


def _at_text(at: datetime) -> str:
    """``format_utc(at)``, the last one remembered (an aware instant: equal instants in
    any zone are one UTC text)."""
    global _LAST_AT
    last = _LAST_AT
    if last is not None and at.tzinfo is not None and last[0] == at:
        return last[1]
    text = format_utc(at)
    if at.tzinfo is not None:
        _LAST_AT = (at, text)
    return text


def hold_to_status(hold: Hold) -> dict[str, Any]:
    """One entry of ``status.holds``."""
    entry: dict[str, Any] = {"claim": hold.claim, "gpus": hold.gpus, "at": _at_text(hold.at)}
    if hold.pod is not None:
        entry["pod"] = hold.pod
    if hold.pod_uid is not None:
        entry["podUid"] = hold.pod_uid
    if hold.announced:
        entry["announced"] = True
    return entry


#: Starts a ledger hold's claim: the digest of the claim id its pod carries.
CLAIM_KEY_PREFIX = "sha256:"


def claim_key(claim: str) -> str:
    """The ledger's key of a claim id: a digest of the ``galends/admission-claim`` a pod
    carries. Holds keep only keys, so anyone who may read GPUReservations learns no
    claim id to copy onto a pod of their own; a pod's annotation is always hashed,
    so copying a key from the ledger matches nothing."""
    digest = hashlib.sha256(claim.encode("utf-8", "surrogatepass")).hexdigest()
    return CLAIM_KEY_PREFIX + digest[:32]


def as_claim_key(claim: str) -> str:
    """``claim`` as the ledger keeps it: a key unchanged, a claim id (one a ledger
    written before holds kept keys holds, or one just made) turned into its key.
    Only for values the product itself wrote; a pod's annotation is always hashed
    (``claim_key``), never passed here."""
    return claim if claim.startswith(CLAIM_KEY_PREFIX) else claim_key(claim)


def stored_instant(at: datetime) -> datetime:
    """``at`` as a stored hold keeps it (``hold_to_status``, read back): in UTC, to the
    second."""
    if at.microsecond == 0 and at.tzinfo is UTC:
        return at
    return at.astimezone(UTC).replace(microsecond=0)


def status_of(res: GPUReservation, now: datetime) -> dict[str, Any]:
    """The full ``status`` to write for ``res`` at ``now``."""
    status = {
        **res.status_extra,
        "holds": [hold_to_status(h) for h in res.holds],
        "usedGpus": res.used_gpus,
        "phase": res.facts.phase(now).value,
    }
    if res.token:
        status[LEDGER_TOKEN] = res.token
    return status


#: The status field holding the ledger token (``GPUReservation.token``).
LEDGER_TOKEN = "ledgerToken"
#: Longest ledger token read as one (a longer value is malformed: read as none).
MAX_TOKEN_LENGTH = 64
#: Status fields the model derives or owns; every other one is ``status_extra``.
_MODELLED = frozenset({"holds", "usedGpus", "phase", LEDGER_TOKEN})


def new_token() -> str:
    """A fresh ledger token: random and unguessable, never a counter — a status wiped
    and rebuilt must not repeat a value a claim read before the wipe."""
    return secrets.token_urlsafe(16)


def token_of(status: Any) -> str:
    """The ledger token in a raw ``status``; "" when absent or malformed (not a
    non-empty string of at most ``MAX_TOKEN_LENGTH`` characters)."""
    value = status.get(LEDGER_TOKEN) if isinstance(status, dict) else None
    if isinstance(value, str) and 0 < len(value) <= MAX_TOKEN_LENGTH:
        return value
    return ""


def to_object(res: GPUReservation, namespace: str, now: datetime) -> dict[str, Any]:
    """The whole object (spec and status), e.g. for a create."""
    meta: dict[str, Any] = {"name": res.name, "namespace": namespace}
    if res.resource_version:
        meta["resourceVersion"] = res.resource_version
    return {
        "apiVersion": f"{vocab.CRD_GROUP}/{vocab.CRD_VERSION}",
        "kind": vocab.CRD_KIND,
        "metadata": meta,
        "spec": facts_to_spec(res.facts),
        "status": status_of(res, now),
    }


def from_object(obj: dict[str, Any]) -> GPUReservation:
    """Read a GPUReservation object; ``ValueError`` names the first bad field."""
    meta = fields.mapping(obj.get("metadata"), "metadata")
    spec = fields.mapping(obj.get("spec"), "spec")
    status = obj.get("status") or {}
    if not isinstance(status, dict):
        raise ValueError("status: not an object")
    facts = _facts(spec)
    listed = fields.entries(status.get("holds"), "status.holds")
    holds = tuple(_known_hold(h, i) for i, h in enumerate(listed))
    extra = {k: v for k, v in status.items() if k not in _MODELLED}
    version = str(meta.get("resourceVersion", ""))
    return GPUReservation(facts, holds, version, extra, token_of(status))


def _facts(spec: dict[str, Any]) -> ReservationFacts:
    def field(key: str) -> tuple[Any, str]:
        return spec.get(key), f"spec.{key}"

    return ReservationFacts(
        id=fields.whole(*field("reservationId"), minimum=0),
        owner=fields.text(*field("owner")),
        gpu_class=fields.text(*field("gpuClass")),
        gpu_class_name=fields.text(*field("gpuClassName")),
        gpu_count=fields.whole(*field("gpuCount"), minimum=0),
        kind=fields.member(Kind, *field("kind")),
        start=fields.instant(*field("start")),
        end=fields.instant(*field("end")),
        state=fields.member(State, *field("state")),
        updated_at=fields.instant(*field("updatedAt")),
        owner_id=fields.whole(*field("ownerId")) if spec.get("ownerId") is not None else None,
        group=fields.text(*field("group")) if spec.get("group") is not None else None,
        cancel_reason=fields.text(*field("cancelReason")) if spec.get("cancelReason") else None,
    )


#: Bound on ``_HOLDS`` (entries); a full memo is emptied, never grown.
HOLD_MEMO_SIZE = 4096
#: Stored hold entries already read, by their field values: a claim, the watch and the
#: reconciler's passes meet the same holds again and again, and parsing each one's
#: instant costs more than the rest of the read.
_HOLDS: dict[tuple[Any, ...], Hold] = {}


def _known_hold(raw: Any, index: int) -> Hold:
    """``_hold`` through the memo (same result, same errors)."""
    if not isinstance(raw, dict):
        return _hold(raw, index)
    gpus = raw.get("gpus")  # typed in the key: True == 1.0 == 1, yet only 1 is valid
    key: tuple[Any, ...] = (raw.get("claim"), gpus, type(gpus), raw.get("at"))
    key += (raw.get("pod"), raw.get("podUid"), raw.get("announced") is True)
    try:
        found = _HOLDS.get(key)
    except TypeError:  # an unhashable value: malformed, and _hold says where
        return _hold(raw, index)
    if found is None:
        found = _hold(raw, index)
        if len(_HOLDS) >= HOLD_MEMO_SIZE:
            _HOLDS.clear()
        _HOLDS[key] = found
    return found


def _hold(raw: Any, index: int) -> Hold:
    where = f"status.holds[{index}]"
    entry = fields.mapping(raw, where)
    pod, uid = entry.get("pod"), entry.get("podUid")
    return Hold(
        claim=fields.text(entry.get("claim"), f"{where}.claim"),
        gpus=fields.whole(entry.get("gpus"), f"{where}.gpus", minimum=0),
        at=fields.instant(entry.get("at"), f"{where}.at"),
        pod=fields.text(pod, f"{where}.pod") if pod is not None else None,
        pod_uid=fields.text(uid, f"{where}.podUid") if uid is not None else None,
        announced=entry.get("announced") is True,
    )
