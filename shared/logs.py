"""Structured logs: one JSON object per line on stdout (a readable form on a tty).

Every record has ``ts`` (UTC), ``level``, ``logger`` and ``event`` — a dotted name from
the catalogue in ``docs/operator/observability.md`` such as ``ledger.claim_conflict`` — plus the
fields passed to ``log``. Request uids and object references go under fixed keys
(``uid``, ``namespace``, ``pod``, ``reservation``) so they can be searched.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

from shared import jsontext

#: Client libraries whose chatter is kept at LIBRARY_LOG_LEVEL.
LIBRARY_LOGGERS = ("httpx", "httpcore", "urllib3", "kubernetes", "uvicorn", "uvicorn.access")

_FIELDS = "fields"


class JsonFormatter(logging.Formatter):
    """Renders a record as one JSON object."""

    def __init__(self) -> None:
        super().__init__()
        self._second: tuple[int, str] = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info:
            fields = dict(getattr(record, _FIELDS, {}))
            fields["exception"] = self.formatException(record.exc_info)
        else:
            fields = getattr(record, _FIELDS, {})
        return self.line(record.created, record.levelname, record.name, record.getMessage(), fields)

    def line(
        self, created: float, level: str, logger: str, event: str, fields: dict[str, Any]
    ) -> str:
        """The JSON line of one event (what ``format`` renders for a record): compact,
        UTF-8 unescaped, the head fields first and then ``fields`` in their order (a
        field under a head key replaces its value in place).

        Written by orjson (a tenth of the standard encoder's cost: ≈ 4 µs of every
        request's canonical line), instants and objects it does not know rendered with
        ``str`` as the standard encoder's ``default=str`` renders them, a number that is
        not finite as ``null``; what orjson refuses (an integer beyond 64 bits, a string
        that is not valid Unicode) goes to the standard encoder."""
        payload: dict[str, Any] = {
            "ts": self._timestamp(created),
            "level": level,
            "logger": logger,
            "event": event,
        }
        payload.update(fields)
        return jsontext.compact(payload, default=str).decode()

    def _timestamp(self, created: float) -> str:
        """``datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")``
        with the date and time of day rendered once per second (a third of a line's
        cost when every request logs one); microseconds rounded as ``fromtimestamp``
        rounds them."""
        whole = int(created)
        micros = round((created - whole) * 1e6)
        if micros >= 1_000_000:
            whole, micros = whole + 1, micros - 1_000_000
        second, text = self._second  # one read: another thread may swap it
        if second != whole:
            text = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
            self._second = (whole, text)
        return f"{text}.{micros // 1000:03d}+00:00"


class ConsoleFormatter(logging.Formatter):
    """A one-line human form for terminals: ``HH:MM:SS LEVEL event key=value …``."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S")
        fields = " ".join(f"{k}={v}" for k, v in getattr(record, _FIELDS, {}).items())
        line = f"{ts} {record.levelname:<7} {record.getMessage()} {fields}".rstrip()
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


#: Longest a batched line waits in the handler's buffer before a flush (seconds).
FLUSH_INTERVAL_S = 0.2
#: Batched lines held at most; one more writes them all (bounds the buffer's memory).
MAX_PENDING_LINES = 512


class BufferedHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that flushes high-volume lines in batches.

    ``logging.StreamHandler`` flushes per record: one ``write`` system call per line,
    which for a line logged on every request (the webhook's canonical
    ``webhook.admission``) costs more than formatting it. Records whose event is in
    ``batched`` (at INFO or below) are held in the handler's own buffer — not the
    stream's: with ``PYTHONUNBUFFERED`` (the image sets it) stdout writes every line
    through at once — and written in one ``write`` by a daemon thread every
    ``interval_s`` (or when ``MAX_PENDING_LINES`` are held); every other record is
    written and flushed at once, after whatever is held before it, so lifecycle lines
    and warnings appear as they happen and in order. ``logging.shutdown`` (at exit)
    flushes the rest; a process killed outright loses at most ``interval_s`` of
    batched lines.
    """

    def __init__(
        self, stream: Any, batched: frozenset[str], interval_s: float = FLUSH_INTERVAL_S
    ) -> None:
        super().__init__(stream)
        self.batched = batched
        self.interval_s = interval_s
        self._pending: list[str] = []  # batched lines not yet written (under self.lock)
        self._stopped = threading.Event()
        self._flusher = threading.Thread(target=self._flush_often, name="log-flush", daemon=True)
        self._flusher.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            urgent = record.levelno > logging.INFO or record.msg not in self.batched
            self._add(self.format(record) + self.terminator, urgent)
        except Exception:
            self.handleError(record)

    def _add(self, line: str, urgent: bool) -> None:
        with self.lock:  # type: ignore[union-attr]  # created by Handler.__init__
            self._pending.append(line)
            if urgent or len(self._pending) >= MAX_PENDING_LINES:
                self.flush()

    def flush(self) -> None:
        """Write the held lines in one ``write``, then flush the stream."""
        with self.lock:  # type: ignore[union-attr]
            if self._pending:
                text = "".join(self._pending)
                self._pending.clear()
                self.stream.write(text)
            super().flush()

    def write_fields(
        self, formatter: JsonFormatter, level: int, logger: str, event: str, fields: dict[str, Any]
    ) -> None:
        """``emit`` of the record ``log_fields`` would make, without making it: the same
        line (``JsonFormatter.line``), under the handler's lock, batched the same way."""
        try:
            text = formatter.line(time.time(), logging.getLevelName(level), logger, event, fields)
            self._add(text + self.terminator, level > logging.INFO or event not in self.batched)
        except Exception:
            record = logging.LogRecord(logger, level, "", 0, event, (), None)
            setattr(record, _FIELDS, fields)
            self.handleError(record)

    def close(self) -> None:
        """Stop the flusher (waiting for a flush it is making), write what is held,
        then close: nothing reaches the stream after ``close`` returns, so its owner
        may close it."""
        self._stopped.set()
        if self._flusher is not threading.current_thread():
            self._flusher.join(timeout=5)
        self.flush()
        super().close()

    def _flush_often(self) -> None:
        while not self._stopped.wait(self.interval_s):
            self.flush()


def configure(
    level: int = logging.INFO,
    library_level: int = logging.WARNING,
    *,
    batched: frozenset[str] = frozenset(),
) -> None:
    """Send every log record to stdout; libraries at the stricter of the two levels.

    ``batched``: events logged so often that their lines are flushed in batches
    (``BufferedHandler``); every other line is flushed as it is written.
    """
    # No formatter of ours prints a record's thread or process: do not collect them
    # (a third of a record's construction, paid on every request's line).
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = BufferedHandler(sys.stdout, batched)
    handler.setFormatter(ConsoleFormatter() if sys.stdout.isatty() else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(max(level, library_level))


def log(
    logger: logging.Logger, level: int, event: str, *, exc_info: bool = False, **fields: Any
) -> None:
    """Log ``event`` with structured ``fields`` (None values are dropped).

    ``exc_info=True`` attaches the exception being handled (rendered as ``exception``).
    """
    if logger.isEnabledFor(level):
        clean = {k: v for k, v in fields.items() if v is not None}
        logger.log(level, event, exc_info=exc_info, extra={_FIELDS: clean})


def _direct(logger: logging.Logger, level: int) -> tuple[BufferedHandler, JsonFormatter] | None:
    """The one handler a record of ``logger`` at ``level`` would reach, when it is a
    ``BufferedHandler`` rendering JSON and no filter on the way could drop or change the
    record (the process's own configuration, ``configure``); None otherwise (a test's
    capturing handler, a console, a filter: those get a real record)."""
    found: tuple[BufferedHandler, JsonFormatter] | None = None
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for handler in current.handlers:
            formatter = handler.formatter
            if (
                found is not None
                or type(handler) is not BufferedHandler
                or handler.filters
                or level < handler.level
                or type(formatter) is not JsonFormatter
            ):
                return None
            found = (handler, formatter)
        if not current.propagate:
            break
        current = current.parent
    return found


def log_fields(logger: logging.Logger, level: int, event: str, fields: dict[str, Any]) -> None:
    """``log`` for a line logged on every request: ``fields`` is taken as it is (the
    caller leaves out None values and must not change the dict afterwards), and the
    caller's source line is not looked up (no formatter prints it).

    Under ``configure``'s JSON handler the line is written without a ``LogRecord`` or
    the handler chain (``BufferedHandler.write_fields``: the same line, the same
    batching) — a fifth of a no-change admission's CPU went to them."""
    if logger.isEnabledFor(level):
        direct = _direct(logger, level)
        if direct is not None:
            handler, formatter = direct
            handler.write_fields(formatter, level, logger.name, event, fields)
            return
        record = logger.makeRecord(logger.name, level, "", 0, event, (), None)
        setattr(record, _FIELDS, fields)
        logger.handle(record)


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields of a captured record (for tests that assert on logs)."""
    return dict(getattr(record, _FIELDS, {}))
