"""Checkpoint a training job in time when the reservation system warns of preemption.

A dependency-free module (Python 3.11+, standard library only) to copy next to a
training script. The pod projects its ``galends/*`` annotations into a directory with a
downward-API volume (docs/user/examples/widget-pod.yaml: one file per key, named without the
``galends/`` prefix). When the pod is at risk of preemption the reservation system
writes ``termination-warning-at``, the UTC instant from which it may be deleted; the
file is empty while there is no warning. docs/user/checkpointing.md shows the PyTorch loops.

Two ways to use it:

* **Polled from the training loop** (recommended for PyTorch: a checkpoint is taken
  between steps, never from another thread in the middle of one)::

      watcher = Watcher(margin_s=600)
      for step, batch in enumerate(loader):
          train_step(batch)
          if watcher.should_checkpoint():
              save_checkpoint(step)

* **A background thread calling a callback**, for code that cannot poll::

      watcher = Watcher(margin_s=600)
      watcher.start(lambda warning: request_checkpoint.set())

``should_checkpoint`` is true once per warning: when ``now >= at - margin_s`` for a
warning instant it has not answered yet (a warning moved to another instant counts as
new). Reading the directory is cheap and rate-limited to one read per ``poll_s``
seconds, so calling it every step costs nothing. A missing directory, a missing or empty
file and a malformed value all read as "no warning" (reported once through
``logging``), never as an exception in the training loop.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

#: Where widget-pod.yaml projects the annotations.
DEFAULT_DIRECTORY = os.environ.get("GALENDS_ANNOTATIONS_DIR", "/etc/galends")
WARNING_FILE = "termination-warning-at"
RISK_FILE = "termination-warning-risk"
MESSAGE_FILE = "termination-warning-message"

_log = logging.getLogger("galends_checkpoint")


@dataclass(frozen=True)
class TerminationWarning:
    """One termination warning: from when the pod may be deleted, and how likely."""

    at: datetime
    risk: float | None
    message: str

    def seconds_left(self, now: float) -> float:
        """Seconds from ``now`` (Unix time) to the warning instant (negative: past)."""
        return self.at.timestamp() - now


def parse_instant(text: str) -> datetime | None:
    """``2026-12-03T14:00:00Z`` (or any ISO-8601 instant with a zone) → aware UTC."""
    value = text.strip()
    if not value:
        return None
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.astimezone(UTC)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


class Watcher:
    """Watches the projected ``termination-warning-at`` file (see the module docstring)."""

    def __init__(
        self,
        directory: str = DEFAULT_DIRECTORY,
        margin_s: float = 600.0,
        poll_s: float = 15.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self.margin_s = margin_s
        self.poll_s = poll_s
        self._clock = clock
        self._last_read: float | None = None
        self._current: TerminationWarning | None = None
        self._answered: datetime | None = None
        self._complained: set[str] = set()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # --- reading ------------------------------------------------------------------------

    def _complain_once(self, key: str, text: str) -> None:
        if key not in self._complained:
            self._complained.add(key)
            _log.warning(text)

    def read(self) -> TerminationWarning | None:
        """The warning in the directory now (None: no warning, or unreadable)."""
        raw = _read(os.path.join(self.directory, WARNING_FILE))
        if raw is None:
            if not os.path.isdir(self.directory):
                self._complain_once("dir", f"{self.directory} is not a directory: no warnings")
            return None
        at = parse_instant(raw)
        if at is None:
            if raw.strip():
                self._complain_once(raw, f"ignoring a malformed {WARNING_FILE}: {raw.strip()!r}")
            return None
        risk_text = (_read(os.path.join(self.directory, RISK_FILE)) or "").strip()
        try:
            risk: float | None = float(risk_text) if risk_text else None
        except ValueError:
            risk = None
        message = (_read(os.path.join(self.directory, MESSAGE_FILE)) or "").strip()
        return TerminationWarning(at, risk, message)

    def current(self) -> TerminationWarning | None:
        """The warning, re-read at most once per ``poll_s`` seconds."""
        now = self._clock()
        if self._last_read is None or now - self._last_read >= self.poll_s:
            self._last_read = now
            self._current = self.read()
        return self._current

    # --- deciding -----------------------------------------------------------------------

    def should_checkpoint(self) -> bool:
        """True once per warning, from ``margin_s`` seconds before its instant."""
        warning = self.current()
        if warning is None or warning.at == self._answered:
            return False
        if warning.seconds_left(self._clock()) > self.margin_s:
            return False
        self._answered = warning.at
        return True

    # --- the background variant ---------------------------------------------------------

    def start(self, callback: Callable[[TerminationWarning], None]) -> None:
        """Call ``callback(warning)`` from a daemon thread when a checkpoint is due."""
        if self._thread is not None:
            raise RuntimeError("already started")

        def loop() -> None:
            while not self._stop.is_set():
                if self.should_checkpoint():
                    warning = self._current
                    assert warning is not None
                    try:
                        callback(warning)
                    except Exception:  # the job decides what a failed checkpoint means
                        _log.exception("the checkpoint callback failed")
                self._stop.wait(min(self.poll_s, 5.0))

        self._thread = threading.Thread(target=loop, name="galends-checkpoint", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the background thread (if started)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
