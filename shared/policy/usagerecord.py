"""A booking's usage record as stored under ``status.usage`` (pure): written with its
figures for readers, read back strictly (a malformed record raises ``ValueError`` and
the caller starts afresh). The accounting itself is ``shared.policy.usage``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared import fields
from shared.clock import format_utc
from shared.policy.usage import (
    MAX_ENTRIES,
    STATUS_KEY,
    Open,
    Record,
    Window,
    figures,
)


def record_to_status(record: Record, window: Window) -> dict[str, Any]:
    """The record as written under ``status.usage``, with its figures at ``as_of``
    for readers (``kubectl get -o yaml``, the plugin)."""
    at = record.as_of
    out: dict[str, Any] = {
        "closedGpuSeconds": record.closed,
        "folded": list(record.folded),
        "open": [{"uid": r.uid, "gpus": r.gpus, "since": format_utc(r.since)} for r in record.open],
        "peakGpus": record.peak,
        "closedByHour": list(record.hours),
    }
    if at is not None:
        out["asOf"] = format_utc(at)
        fig = figures(record, window, at)
        out.update(
            bookedGpuSeconds=fig.booked,
            usedGpuSeconds=fig.used,
            idleGpuSeconds=fig.idle,
            currentGpus=fig.current,
        )
    if record.first_start is not None:
        out["firstPodStart"] = format_utc(record.first_start)
    return out


def record_from_status(status: Mapping[str, Any]) -> Record:
    """The record in a reservation's status (``status_extra``); an empty record when
    absent. ``ValueError`` naming the field when malformed (the caller starts afresh
    from the pods and logs it)."""
    raw = status.get(STATUS_KEY)
    if raw is None:
        return Record()
    if not isinstance(raw, Mapping):
        raise ValueError("status.usage: not an object")
    opened = _entries(raw, "open")
    hours = _entries(raw, "closedByHour")
    folded = _entries(raw, "folded")
    runs = []
    for i, entry in enumerate(opened):
        where = f"status.usage.open[{i}]"
        entry = fields.mapping(entry, where)
        runs.append(
            Open(
                _name(entry.get("uid"), f"{where}.uid"),
                _count(entry.get("gpus"), f"{where}.gpus"),
                fields.instant(entry.get("since"), f"{where}.since"),
            )
        )
    return Record(
        as_of=fields.instant(raw["asOf"], "status.usage.asOf")
        if raw.get("asOf") is not None
        else None,
        closed=_count(raw.get("closedGpuSeconds", 0), "status.usage.closedGpuSeconds"),
        folded=tuple(_name(u, f"status.usage.folded[{i}]") for i, u in enumerate(folded)),
        open=tuple(runs),
        peak=_count(raw.get("peakGpus", 0), "status.usage.peakGpus"),
        hours=tuple(_count(h, f"status.usage.closedByHour[{i}]") for i, h in enumerate(hours)),
        first_start=(
            fields.instant(raw["firstPodStart"], "status.usage.firstPodStart")
            if raw.get("firstPodStart") is not None
            else None
        ),
    )


def _entries(raw: Mapping[str, Any], name: str) -> list[Any]:
    return fields.entries(raw.get(name), f"status.usage.{name}", limit=MAX_ENTRIES)


def _name(value: Any, where: str) -> str:
    return fields.text(value, where, longest=128)


def _count(value: Any, where: str) -> int:
    return fields.whole(value, where, minimum=0)
