"""Structured logs: one JSON object per record, fields under fixed keys, tracebacks kept."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.logs import (
    BufferedHandler,
    ConsoleFormatter,
    JsonFormatter,
    fields_of,
    log,
    log_fields,
)


def record_of(caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    assert len(caplog.records) == 1
    return caplog.records[0]


def test_fields_are_structured_and_none_values_dropped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    log(logging.getLogger("t"), logging.INFO, "ledger.claim", reservation="res-4", pod=None)
    record = record_of(caplog)
    assert fields_of(record) == {"reservation": "res-4"}
    payload = json.loads(JsonFormatter().format(record))
    assert payload["event"] == "ledger.claim"
    assert payload["reservation"] == "res-4"
    assert payload["level"] == "INFO"
    assert "pod" not in payload


def test_exc_info_attaches_the_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log(logging.getLogger("t"), logging.ERROR, "task.crashed", exc_info=True, task="sync")
    record = record_of(caplog)
    assert fields_of(record) == {"task": "sync"}
    payload = json.loads(JsonFormatter().format(record))
    assert "RuntimeError: boom" in payload["exception"]
    assert "RuntimeError: boom" in ConsoleFormatter().format(record)


def test_disabled_levels_cost_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    log(logging.getLogger("t"), logging.DEBUG, "noise", big=object())
    assert caplog.records == []


class CountingStream:
    """A text stream that records writes and flushes."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.flushes = 0
        self.flushed = threading.Event()

    def write(self, text: str) -> None:
        self.written.append(text)

    def flush(self) -> None:
        self.flushes += 1
        self.flushed.set()


def info(message: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("t", level, __file__, 1, message, None, None)


BATCHED = frozenset({"webhook.admission"})


def test_batched_lines_are_written_without_a_flush_each_others_flush_at_once() -> None:
    stream = CountingStream()
    handler = BufferedHandler(stream, BATCHED, interval_s=3600)
    try:
        handler.handle(info("webhook.admission"))
        handler.handle(info("webhook.admission"))
        assert stream.written == ["webhook.admission\n", "webhook.admission\n"]
        assert stream.flushes == 0
        handler.handle(info("cache.synced"))
        assert stream.flushes == 1
        handler.handle(info("webhook.admission", logging.WARNING))
        assert stream.flushes == 2
    finally:
        handler.close()


def test_the_flusher_flushes_buffered_lines_without_further_logging() -> None:
    stream = CountingStream()
    handler = BufferedHandler(stream, BATCHED, interval_s=0.01)
    try:
        handler.handle(info("webhook.admission"))
        assert stream.flushed.wait(30)
    finally:
        handler.close()


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.floats(min_value=1.0, max_value=4e9, allow_nan=False, allow_infinity=False))
def test_the_json_timestamp_is_the_records_instant_to_the_millisecond(created: float) -> None:
    """Rendered once per second and then reused, it still equals what ``datetime``
    gives — rounding of the microseconds included — and so do the instants around it."""
    formatter = JsonFormatter()
    for instant in (created, created + 0.0004, created + 0.9996, created + 1.0):
        record = logging.LogRecord("t", logging.INFO, "", 0, "e", (), None)
        record.created = instant
        wanted = datetime.fromtimestamp(instant, UTC).isoformat(timespec="milliseconds")
        assert json.loads(formatter.format(record))["ts"] == wanted


def test_log_fields_takes_the_dict_as_given(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    log_fields(logging.getLogger("t"), logging.INFO, "webhook.admission", {"uid": "u", "n": 1})
    record = record_of(caplog)
    assert record.getMessage() == "webhook.admission"
    assert fields_of(record) == {"uid": "u", "n": 1}
    assert json.loads(JsonFormatter().format(record))["n"] == 1
    caplog.clear()
    log_fields(logging.getLogger("t"), logging.DEBUG, "noise", {"big": object()})
    assert caplog.records == []
