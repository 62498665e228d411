"""Structured logs: one JSON object per record, fields under fixed keys, tracebacks kept."""

from __future__ import annotations

import json
import logging

import pytest

from shared.logs import ConsoleFormatter, JsonFormatter, fields_of, log


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
