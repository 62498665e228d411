"""Structured logs: one JSON object per record, fields under fixed keys, tracebacks kept."""

from __future__ import annotations

import json
import logging
import math
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shared.logs import (
    MAX_PENDING_LINES,
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


def test_batched_lines_are_held_and_written_at_once_before_any_other_line() -> None:
    """Held by the handler itself (an unbuffered stdout would write each through), then
    one ``write`` for the batch and the line that ended it, in order."""
    stream = CountingStream()
    handler = BufferedHandler(stream, BATCHED, interval_s=3600)
    try:
        handler.handle(info("webhook.admission"))
        handler.handle(info("webhook.admission"))
        assert stream.written == []
        assert stream.flushes == 0
        handler.handle(info("cache.synced"))
        assert stream.written == ["webhook.admission\nwebhook.admission\ncache.synced\n"]
        assert stream.flushes == 1
        handler.handle(info("webhook.admission", logging.WARNING))
        assert stream.written[-1] == "webhook.admission\n"
        assert stream.flushes == 2
    finally:
        handler.close()


def test_held_lines_are_bounded() -> None:
    stream = CountingStream()
    handler = BufferedHandler(stream, BATCHED, interval_s=3600)
    try:
        for _ in range(MAX_PENDING_LINES * 2 + 1):
            handler.handle(info("webhook.admission"))
        assert [len(text.splitlines()) for text in stream.written] == [MAX_PENDING_LINES] * 2
        handler.flush()
        assert len(stream.written[-1].splitlines()) == 1
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


def test_close_writes_what_is_held_and_nothing_after() -> None:
    """The flusher is stopped and waited for, the held lines written: the stream's
    owner may close it as soon as ``close`` returns (a flush from the thread after that
    wrote to a closed file)."""
    for _ in range(20):
        stream = CountingStream()
        handler = BufferedHandler(stream, BATCHED, interval_s=0.0005)
        handler.handle(info("webhook.admission"))
        handler.handle(info("webhook.admission"))
        handler.close()
        assert "".join(stream.written) == "webhook.admission\n" * 2
        written = len(stream.written)
        handler.handle(info("webhook.admission"))  # a record after close is held, not written
        assert not handler._flusher.is_alive()
        assert len(stream.written) == written


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


SCALAR = (
    st.text()
    | st.booleans()
    | st.none()
    | st.integers()  # beyond 64 bits too: the standard encoder's path
    | st.floats()
    | st.datetimes(timezones=st.just(UTC))
)
FIELD_VALUE = (
    SCALAR
    | st.lists(SCALAR, max_size=2)
    | st.dictionaries(st.text(max_size=3), SCALAR, max_size=2)
    | st.sampled_from([b"x", {1, 2}, object])
)
FIELD_KEY = st.text(max_size=8) | st.sampled_from(["ts", "level", "logger", "event"])


def finite(value: Any) -> Any:
    """``value`` with every number that is not finite as None (JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [finite(v) for v in value]
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    return value


@settings(max_examples=400, deadline=None)
@given(
    fields=st.dictionaries(FIELD_KEY | st.integers(-5, 5), FIELD_VALUE, max_size=6),
    names=st.tuples(st.text(max_size=8), st.text(max_size=8), st.text(max_size=8)),
)
# orjson refuses the integer beyond 64 bits, so the standard encoder writes the line:
# its infinity must be null too (a CI run found it).
@example(fields={"": float("inf"), "0": -(2**63) - 1}, names=("", "", ""))
def test_a_line_is_one_compact_json_object_of_the_head_and_the_fields(
    fields: dict[Any, Any], names: tuple[str, str, str]
) -> None:
    """Whatever the fields: one line of compact JSON that reads back as the head fields
    followed by the record's fields, in order (a field under a head key replaces its
    value in place; integer keys as strings; instants and unknown objects as ``str``
    renders them, as the standard encoder's ``default=str`` does; a number that is not
    finite as null)."""
    level, logger, event = names
    formatter = JsonFormatter()
    payload: dict[Any, Any] = {
        "ts": formatter._timestamp(1.5),
        "level": level,
        "logger": logger,
        "event": event,
    }
    payload.update(fields)
    line = formatter.line(1.5, level, logger, event, fields)
    assert "\n" not in line
    wanted = json.loads(json.dumps(finite(payload), default=str, ensure_ascii=False))
    try:
        assert json.loads(line) == wanted
    except UnicodeEncodeError:  # a lone surrogate: both encoders keep it, as before
        return
    assert list(json.loads(line)) == list(wanted)


def test_a_line_is_compact_and_unescaped() -> None:
    fields = {
        "uid": "ü-1",
        "n": 2,
        "ms": 0.25,
        "dry_run": True,
        "at": datetime(2026, 1, 5, tzinfo=UTC),
    }
    line = JsonFormatter().line(0.0, "INFO", "webhook", "webhook.admission", fields)
    assert line == (
        '{"ts":"1970-01-01T00:00:00.000+00:00","level":"INFO","logger":"webhook",'
        '"event":"webhook.admission","uid":"ü-1","n":2,"ms":0.25,"dry_run":true,'
        '"at":"2026-01-05 00:00:00+00:00"}'
    )


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


def own_logger(handler: logging.Handler) -> logging.Logger:
    """A logger outside the hierarchy (no parent: pytest's capture on the root is not
    in its chain) whose one handler is ``handler``."""
    logger = logging.Logger("t.direct", logging.INFO)
    logger.addHandler(handler)
    return logger


def test_log_fields_writes_the_records_line_without_a_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under the process's JSON handler the line is written directly: the same JSON as
    the record would have rendered, batched the same way, and no ``LogRecord`` made."""
    stream = CountingStream()
    handler = BufferedHandler(stream, BATCHED, interval_s=3600)
    handler.setFormatter(JsonFormatter())
    logger = own_logger(handler)
    made: list[str] = []
    real = logger.makeRecord

    def counted(*args: Any, **kwargs: Any) -> logging.LogRecord:
        made.append("record")
        return real(*args, **kwargs)

    monkeypatch.setattr(logger, "makeRecord", counted)
    try:
        fields = {"uid": "u", "n": 1, "when": datetime(2026, 1, 1, tzinfo=UTC)}
        log_fields(logger, logging.INFO, "webhook.admission", fields)
        assert made == []
        assert stream.written == []  # held, as a record's line would be
        handler.flush()
        line = json.loads(stream.written[0])
        record = logging.LogRecord("t.direct", logging.INFO, "", 0, "webhook.admission", (), None)
        record.fields = fields
        wanted = json.loads(JsonFormatter().format(record))
        assert {k: v for k, v in line.items() if k != "ts"} == {
            k: v for k, v in wanted.items() if k != "ts"
        }
        assert datetime.fromisoformat(line["ts"]).tzinfo is not None
        log_fields(logger, logging.INFO, "cache.synced", {})
        assert stream.flushes == 2  # not a batched event: flushed at once
        log_fields(logger, logging.WARNING, "webhook.admission", {})
        assert stream.flushes == 3  # above INFO: flushed at once
        log_fields(logger, logging.DEBUG, "webhook.admission", {})
        assert len(stream.written) == 3
        assert made == []
    finally:
        handler.close()


def test_log_fields_makes_a_record_when_a_filter_or_another_handler_could_see_it() -> None:
    stream = CountingStream()
    handler = BufferedHandler(stream, BATCHED, interval_s=3600)
    handler.setFormatter(JsonFormatter())
    logger = own_logger(handler)
    seen: list[logging.LogRecord] = []
    try:
        handler.addFilter(lambda r: False)  # a filter on the handler drops the line
        log_fields(logger, logging.INFO, "webhook.admission", {"uid": "u"})
        handler.flush()
        assert stream.written == []
        handler.filters.clear()

        def keep(record: logging.LogRecord) -> bool:
            seen.append(record)
            return True

        logger.addFilter(keep)  # a logger filter sees a record
        log_fields(logger, logging.INFO, "webhook.admission", {"uid": "u"})
        assert [fields_of(r) for r in seen] == [{"uid": "u"}]
        handler.flush()
        assert len(stream.written) == 1
        logger.filters.clear()
        handler.setFormatter(ConsoleFormatter())  # not JSON: the console's own form
        log_fields(logger, logging.INFO, "webhook.admission", {"uid": "u"})
        handler.flush()
        assert stream.written[-1].endswith("webhook.admission uid=u\n")
    finally:
        handler.close()
