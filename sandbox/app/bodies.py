"""Request bodies the emulated app accepts, validated as the app's schemas do (422)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.appclient.models import CancelReason, UtcInstant

#: Schema bounds of ``duration_seconds`` (§2.5): one minute to 366 days.
MIN_DURATION = 60
MAX_DURATION = 31_622_400


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class LeaseBody(Body):
    on_demand: Literal[True]
    username: str = Field(min_length=1)
    group_name: str = Field(min_length=1)
    gpu_class_id: int
    gpu_count: int = Field(ge=1)
    duration_seconds: int = Field(ge=MIN_DURATION, le=MAX_DURATION)
    idempotency_key: str = Field(min_length=1, max_length=255)
    notes: str | None = None


class StubBody(Body):
    best_effort: Literal[True]
    username: str = Field(min_length=1)
    group_name: str = Field(min_length=1)
    gpu_class_id: int
    gpu_count: int = Field(ge=1)
    idempotency_key: str = Field(min_length=1, max_length=255)
    notes: str | None = None


class CancelBody(Body):
    reason: CancelReason


class Candidate(Body):
    pod_uid: str
    username: str
    group_name: str | None
    gpu_class_id: int
    gpu_count: int = Field(ge=1)
    duration_seconds: int = Field(ge=0, le=MAX_DURATION)
    pod_created_at: datetime | None = None
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    best_effort: bool = False


class AdmissionBody(Body):
    candidates: list[Candidate]


class VictimCandidate(Body):
    pod_uid: str
    namespace: str
    pod_name: str
    gpu_class: str
    gpu_count: int = Field(ge=1)
    reservation_id: int


class VictimsBody(Body):
    needed_by_class: dict[str, int]
    candidates: list[VictimCandidate]


class OverstayBody(Body):
    pod_uid: str = Field(min_length=1)
    gpu_count: int = Field(ge=1)
    start_utc: UtcInstant
    end_utc: UtcInstant
    end_reason: str | None = Field(default=None, max_length=32)


class ContinueBody(Body):
    duration_seconds: int = Field(ge=MIN_DURATION, le=MAX_DURATION)
    gpu_count: int | None = Field(default=None, ge=1)
    notes: str | None = None
