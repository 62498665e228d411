"""The Event writer: shape, type by reason, length, never raising; the wording rules."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from reconciler.base import events
from reconciler.base.events import emit, event_body
from shared import model, vocab
from shared.clock import utc
from shared.errors import ServerError
from shared.gateway import Response
from shared.logs import fields_of
from shared.policy import wording
from shared.policy.matching import Miss
from shared.resources import EVENTS, Resource
from tests.fakekube import FakeKube

NOW = utc(2026, 1, 5, 9, 30)
POD = {"metadata": {"name": "train", "namespace": "alice", "uid": "u-1"}}


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.sent: list[tuple[Resource, dict[str, Any], str | None]] = []

    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None, dry_run=False
    ) -> Response:
        if self.fail:
            raise ServerError(503, "down")
        self.sent.append((res, body, namespace))
        return Response(body)


def reservation(gpus: int = 2) -> model.GPUReservation:
    facts = model.ReservationFacts(
        7,
        "alice",
        "h100",
        "H100",
        gpus,
        model.Kind.BOOKING,
        utc(2026, 1, 5, 13),
        utc(2026, 1, 5, 15),
        model.State.ACTIVE,
        NOW,
    )
    return model.GPUReservation(facts)


def test_event_names_the_pod_by_uid_and_is_typed_by_reason() -> None:
    body = event_body(POD, vocab.REASON_RESERVATION_FULL, "x" * 2000, NOW)
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "alice",
        "name": "train",
        "uid": "u-1",
    }
    assert body["metadata"]["namespace"] == "alice"
    assert body["metadata"]["name"].startswith("train.")
    assert body["type"] == "Warning"
    assert body["reportingComponent"] == body["source"]["component"] == vocab.PRODUCT_NAME
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-01-05T09:30:00Z"
    assert body["count"] == 1
    assert len(body["message"]) == 1024
    assert "eventTime" not in body
    normal = event_body(POD, vocab.REASON_WAITING_FOR_RESERVATION, "m", NOW)
    assert normal["type"] == "Normal"
    assert normal["metadata"]["name"] != body["metadata"]["name"]


def test_emit_writes_logs_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    gw, seen = Recorder(), list[str]()
    with caplog.at_level(logging.INFO):
        ok = asyncio.run(
            emit(gw, POD, vocab.REASON_RUNTIME_GUARANTEED, "hi", now=NOW, on_sent=seen.append)
        )
    assert ok
    assert seen == [vocab.REASON_RUNTIME_GUARANTEED]
    assert gw.sent[0][0] == EVENTS
    assert gw.sent[0][2] == "alice"
    record = next(r for r in caplog.records if r.getMessage() == "k8s.event_emitted")
    assert fields_of(record)["uid"] == "u-1"


def test_emit_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        assert not asyncio.run(emit(Recorder(fail=True), POD, "X", "m", now=NOW))
        assert not asyncio.run(emit(Recorder(), {"metadata": {}}, "X", "m", now=NOW))
    assert [r.getMessage() for r in caplog.records].count("k8s.event_failed") == 2


def test_wording_renders_local_zone_named_and_support_ending() -> None:
    zone = ZoneInfo("Europe/Berlin")
    text = wording.waiting_for_reservation(reservation(), zone)
    assert "res-7" in text
    assert "2026-01-05 14:00 CET" in text
    assert "16:00 CET" in text
    full = wording.reservation_full(reservation(), ["d", "c", "b", "a"])
    assert "a, b, c and others" in full
    nr = wording.no_reservation([Miss.OTHER_CLASS, Miss.ENDED], [], "help@example.org")
    assert nr.endswith("contact support: help@example.org")
    assert "another GPU class" in nr
    assert "has ended" in nr
    assert not wording.no_reservation([Miss.OTHER_OWNER], [], None).endswith("support")
    ignored = wording.annotation_ignored("k", "v" * 200 + "\n", "default used", None)
    assert "…" in ignored
    assert "\n" not in ignored
    assert "h100" in wording.unknown_gpu_class("h100", ["a100"], None)


def _events(kube: FakeKube) -> list[dict[str, Any]]:
    return sorted(kube.items(EVENTS, "alice"), key=lambda e: e["metadata"]["name"])


def test_an_identical_event_updates_the_first_with_a_count() -> None:
    """client-go's correlation: same object, reason and message → one Event, count and
    lastTimestamp updated, name and firstTimestamp kept; another message is its own."""

    async def scenario() -> None:
        kube, recorder = FakeKube(), events.Recorder()
        reason = vocab.REASON_RESERVATION_FULL
        assert await recorder.emit(kube, POD, reason, "full", now=NOW)
        assert await recorder.emit(kube, POD, reason, "full", now=NOW + timedelta(minutes=5))
        [event] = _events(kube)
        assert event["count"] == 2
        assert event["firstTimestamp"] == "2026-01-05T09:30:00Z"
        assert event["lastTimestamp"] == "2026-01-05T09:35:00Z"
        assert await recorder.emit(kube, POD, reason, "full again", now=NOW)
        other = {**POD, "metadata": {**POD["metadata"], "uid": "u-2"}}
        assert await recorder.emit(kube, other, reason, "full", now=NOW)
        assert sorted(e["count"] for e in _events(kube)) == [1, 1, 2]

    asyncio.run(scenario())


def test_a_repeat_of_an_expired_event_writes_a_new_one() -> None:
    async def scenario() -> None:
        kube, recorder = FakeKube(), events.Recorder()
        reason = vocab.REASON_RESERVATION_FULL
        await recorder.emit(kube, POD, reason, "full", now=NOW)
        [first] = _events(kube)
        await kube.delete(EVENTS, first["metadata"]["name"], "alice")  # --event-ttl
        assert await recorder.emit(kube, POD, reason, "full", now=NOW + timedelta(hours=2))
        [second] = _events(kube)
        assert second["count"] == 1
        assert second["metadata"]["name"] != first["metadata"]["name"]

    asyncio.run(scenario())


def test_the_recorder_forgets_the_oldest_beyond_its_room() -> None:
    async def scenario() -> None:
        kube, recorder = FakeKube(), events.Recorder(remembered=2)
        reason = vocab.REASON_RESERVATION_FULL
        for text in ("a", "b", "c", "a"):
            await recorder.emit(kube, POD, reason, text, now=NOW)
        assert sorted(e["message"] for e in _events(kube)) == ["a", "a", "b", "c"]

    asyncio.run(scenario())


def test_a_failed_repeat_is_reported_and_never_raises() -> None:
    async def scenario() -> None:
        kube, recorder = FakeKube(), events.Recorder()
        reason = vocab.REASON_RESERVATION_FULL
        await recorder.emit(kube, POD, reason, "full", now=NOW)
        kube.fail_next.append(ServerError(503, "down"))
        assert not await recorder.emit(kube, POD, reason, "full", now=NOW)
        assert await recorder.emit(kube, POD, reason, "full", now=NOW)
        [event] = _events(kube)
        assert event["count"] == 2

    asyncio.run(scenario())
