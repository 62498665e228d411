"""Builders for reservation-app rows and pods, for reconciler tests."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from reconciler.base.kube import KubeWatcher
from shared import vocab
from shared.appclient import Fetched, GpuClass, Reservation, Transient, TransientReason
from shared.clock import format_utc, utc

NS = vocab.PRODUCT_NAME
START = utc(2026, 1, 5, 9)
END = utc(2026, 1, 5, 12)


def row(rid: int = 1, **overrides: Any) -> dict[str, Any]:
    """A ReservationResponse as JSON (contract §3.1)."""
    data: dict[str, Any] = {
        "id": rid,
        "user_id": 31,
        "user": {"id": 31, "username": "alice"},
        "group_id": 6,
        "group": {"id": 6, "name": "lab"},
        "gpu_class_id": 3,
        "gpu_class": {"id": 3, "name": "A100-80", "label_value": "a100"},
        "date": "2026-01-05",
        "start_utc": format_utc(START),
        "end_utc": format_utc(END),
        "gpu_count": 8,
        "kind": "booking",
        "status": "active",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    data.update(overrides)
    return data


def reservation(rid: int = 1, **overrides: Any) -> Reservation:
    return Reservation.model_validate(row(rid, **overrides))


def at(instant: datetime) -> str:
    return format_utc(instant)


A100 = GpuClass(id=3, name="A100-80", label_value="a100", total_gpus=8)
UNLABELLED = GpuClass(id=5, name="L40S", label_value=None)


class FakeSource:
    """The app reads the sync makes; ``rows`` and ``fail`` are set by tests."""

    def __init__(self, rows: list[Reservation] | None = None) -> None:
        self.rows = rows or []
        self.classes = [A100, UNLABELLED]
        self.fail = False
        self.windows: list[tuple[Any, Any]] = []

    async def list_reservations(self, date_start, date_end):
        self.windows.append((date_start, date_end))
        if self.fail:
            return Transient(TransientReason.SERVER_ERROR, "503 from app", 503)
        return Fetched(tuple(self.rows))

    async def list_gpu_classes(self):
        if self.fail:
            return Transient(TransientReason.SERVER_ERROR, "503 from app", 503)
        return Fetched(tuple(self.classes))


def pod(name: str, ref: str | None, phase: str = "Running", ns: str = "alice") -> dict[str, Any]:
    annotations = {vocab.BOOKING_REFERENCE: ref} if ref else {}
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {vocab.GPU_CLASS_LABEL: "a100"},
            "annotations": annotations,
        },
        "status": {"phase": phase},
    }


def relisting(gateway: object) -> KubeWatcher:
    """A double that serves LIST (and the writes) but no watch stream, as the caches'
    gateway: a test fills the caches by relisting them (``Watched.relist``), never by
    running their watches."""
    return cast(KubeWatcher, gateway)
