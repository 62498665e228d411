"""``POST /api/reservations/push`` (reservation-api.md §4.0, §4.1).

The app sends a partial delta ``{"reservations": [ReservationResponse, …]}``. Order of
checks: 503 when ``INBOUND_API_TOKEN`` is unset; 401 (with ``WWW-Authenticate:
Bearer``) unless the header is ``Bearer <token>`` (scheme case-insensitive, token
compared in constant time); 422 when the body or any entry is malformed — then nothing
is applied; else every entry is upserted by id (with the same never-backwards rule as
the sync; active entries first, so a replacement exists before its source's
cancellation reaches the leader) and the answer counts ``applied`` (active entries),
``cancelled`` (in-window cancellations of a reservation we held as active),
``adopted`` (in-window owner changes of a reservation we held as active — the previous
owner's pods are evicted by the leader, ``reconciler.queue.evict``) and ``total_active``.
Any replica serves it: it only writes GPUReservation objects, which the leader then
reacts to.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from datetime import datetime

from pydantic import TypeAdapter, ValidationError

from reconciler.base.mirroring import facts_from, installed_first
from reconciler.mirror.sync import Syncer
from shared import jsontext, model
from shared.appclient import Reservation
from shared.logs import log
from shared.settings import SecretStr

_log = logging.getLogger(__name__)
_ENTRIES = TypeAdapter(list[Reservation])

DISABLED = "Inbound API is disabled (INBOUND_API_TOKEN is not set)"
UNAUTHORISED = "Invalid or missing bearer token"


class BadPush(ValueError):
    """The body is not ``{"reservations": [valid ReservationResponse…]}``."""


def authorised(header: str | None, token: SecretStr) -> bool:
    """``Authorization: Bearer <token>``, scheme case-insensitive, constant-time compare."""
    if not header:
        return False
    scheme, _, presented = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode(), token.value.encode())


def parse_body(raw: bytes) -> list[Reservation]:
    """Every entry, or ``BadPush`` naming the first problem (nothing half-read)."""
    try:
        body = jsontext.loads(raw)
    except jsontext.BadJson as exc:
        raise BadPush(f"body is {exc}") from exc
    if not isinstance(body, dict) or "reservations" not in body:
        raise BadPush('body must be an object with a "reservations" list')
    if not isinstance(body["reservations"], list):
        raise BadPush('"reservations" must be a list')
    try:
        return _ENTRIES.validate_python(body["reservations"])
    except ValidationError as exc:
        raise BadPush(_first_error(exc)) from exc


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = "reservations" + "".join(
        f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]
    )
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


@dataclass(frozen=True)
class PushResult:
    """The 200 answer of a push."""

    applied: int
    cancelled: int
    adopted: int
    total_active: int

    def as_json(self) -> dict[str, int]:
        return {
            "applied": self.applied,
            "cancelled": self.cancelled,
            "adopted": self.adopted,
            "total_active": self.total_active,
        }


async def apply(syncer: Syncer, entries: list[Reservation]) -> PushResult:
    """Upsert every entry; counts as in the contract. Raises ``KubeError`` when the
    mirror cannot be read (the caller answers 503: the app retries or the poll heals)."""
    async with syncer.lock:
        if entries:
            await syncer.refresh_classes()
        now = syncer.clock.now()
        before = await syncer.mirror()
        applied = cancelled = adopted = 0
        writes = []
        for entry in entries:
            facts = facts_from(entry, syncer.classes)
            applied += entry.is_active
            if facts is None:
                continue
            if _cancels_in_window(facts, before.get(facts.name), now):
                cancelled += 1
            if _reassigns_in_window(facts, before.get(facts.name), now):
                adopted += 1
            writes.append(facts)
        for facts in sorted(writes, key=installed_first):  # replacements first
            await syncer.writer.upsert(facts, now)
        after = await syncer.mirror()
    total = sum(1 for r in after.values() if r.facts.state is model.State.ACTIVE)
    result = PushResult(applied, cancelled, adopted, total)
    log(_log, logging.INFO, "push.applied", entries=len(entries), result=result.as_json())
    return result


def _cancels_in_window(
    facts: model.ReservationFacts, held: model.GPUReservation | None, now: datetime
) -> bool:
    """A pushed non-active entry, open now, that we held as active."""
    if facts.state is model.State.ACTIVE or held is None:
        return False
    return held.facts.state is model.State.ACTIVE and facts.start <= now < facts.end


def _reassigns_in_window(
    facts: model.ReservationFacts, held: model.GPUReservation | None, now: datetime
) -> bool:
    """A pushed active entry, open now, that we held as active under another owner."""
    if facts.state is not model.State.ACTIVE or held is None:
        return False
    changed = held.facts.owner != facts.owner
    return changed and held.facts.state is model.State.ACTIVE and facts.start <= now < facts.end
