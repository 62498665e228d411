"""A cached GPUReservation (``Entry``) and the pure steps that put our writes on it.

An entry is one state of the server as the webhook decides on it: the parsed ledger and
the raw object (the first read of a claim's write). With writes of ours the server's
state does not show yet (``webhook.claims.journal``), the entry is that state with them
applied on top: *provisional* (``raw`` without a resourceVersion,
``reservation.resource_version`` the server state's). No side effects here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from shared import ledger, model
from shared.ledger import Write
from shared.logs import log
from shared.model import GPUReservation

_log = logging.getLogger("webhook.cache")


@dataclass(frozen=True, slots=True)
class Entry:
    """One cached object: parsed and raw."""

    reservation: GPUReservation
    raw: dict[str, Any]


def entry_of(raw: dict[str, Any]) -> Entry | None:
    """The object as an ``Entry``; ``None`` (skipped, logged) when malformed."""
    try:
        return Entry(model.from_object(raw), raw)
    except ValueError as exc:
        name = (raw.get("metadata") or {}).get("name")
        log(_log, logging.WARNING, "cache.object_skipped", reservation=name, error=str(exc))
        return None


def applied(entry: Entry, writes: Sequence[Write]) -> Entry | None:
    """``entry`` with ``writes`` (each landed on the state before it) applied on top;
    None when the object cannot carry them (no uid or generation) or there are none."""
    raw: dict[str, Any] | None = entry.raw
    holds = entry.reservation.holds
    for write in writes:
        raw = ledger.expected_after(raw, write.ops) if raw is not None else None
        holds += write.holds
    if raw is None or not writes:
        return None
    return Entry(replace(entry.reservation, holds=holds, token=writes[-1].token), raw)


def decided(entry: Entry, write: Write) -> Entry | None:
    """What ``write`` leaves as the ledger computed it (its ``after`` and ``result``)
    when ``entry`` is the very state of the server it was decided on (its
    resourceVersion and token, and nothing of ours pending on it: the caller checks):
    ``ops`` need not be applied again. None otherwise (``applied`` then)."""
    res = entry.reservation
    if not write.base_version or res.resource_version != write.base_version:
        return None
    if res.token != write.tested:
        return None
    return Entry(write.result, write.after)


def on_version(entry: Entry, version: str, confirmed: bool) -> Entry:
    """``entry``'s content under the server's ``version`` (the watch showed a write of
    ours at it); ``confirmed`` when none of ours is left pending: ``raw`` then carries
    ``version`` too."""
    res = replace(entry.reservation, resource_version=version)
    if not confirmed:
        return Entry(res, entry.raw)
    meta = entry.raw.get("metadata")
    meta = dict(meta, resourceVersion=version) if isinstance(meta, dict) else {}
    return Entry(res, dict(entry.raw, metadata=meta))
