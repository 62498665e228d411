"""A reader's terminal for the executable docs: a scratch copy of the repository's
layout with a sandbox of its own, in which a page's shell blocks run in order.

Terms: the *workspace* is a temporary folder holding a symlink to every top-level entry
of the repository (so ``sandbox/examples/…``, ``.venv/bin/…`` and ``charts/`` resolve
as in a checkout) and its own ``.sandbox`` state folder; the *sandbox* is
``.venv/bin/python -m sandbox up --state-dir .sandbox`` run in the background there,
as a reader runs ``make sandbox``. Exported variables carry from one block to the next,
as in one terminal. Only the processes started here are ever signalled, by their pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READY = "sandbox ready"
START_TIMEOUT_S = 120.0
BLOCK_TIMEOUT_S = 120.0
STATE_DIR = ("--state-dir", ".sandbox")  # relative, as a reader types it
SKIPPED_ENTRIES = {".git", ".sandbox", ".bench", ".pytest_cache", ".mypy_cache"}


class SandboxFailed(RuntimeError):
    """The sandbox exited or never printed ``sandbox ready``."""


class Terminal:
    """One page's terminal; the sandbox starts at the first block that runs."""

    def __init__(self, *, with_sandbox: bool = True) -> None:
        self.with_sandbox = with_sandbox
        self.workspace = Path(tempfile.mkdtemp(prefix="docs-"))
        for entry in ROOT.iterdir():
            if entry.name not in SKIPPED_ENTRIES:
                (self.workspace / entry.name).symlink_to(entry)
        self.exports = self.workspace / ".docs-exports.sh"
        self.exports.write_text("", encoding="utf-8")
        self.sandbox: subprocess.Popen[bytes] | None = None
        self.sandbox_log = self.workspace / ".docs-sandbox.log"

    def env(self) -> dict[str, str]:
        """A reader's environment: the system's PATH (kubectl, jq, curl), UTC, a home of
        its own; PYTHONPATH pins this checkout (the venv may be shared with another)."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workspace),
            "TZ": "UTC",
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(ROOT),
            "KUBECACHEDIR": str(self.workspace / ".kube-cache"),
        }

    def start_sandbox(self) -> None:
        """``make sandbox`` in the background; returns once it printed ``sandbox ready``."""
        if self.sandbox is not None or not self.with_sandbox:
            return
        log = self.sandbox_log.open("wb")
        self.sandbox = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "python"), "-m", "sandbox", "up", *STATE_DIR],
            cwd=self.workspace,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while READY not in self.sandbox_log.read_text("utf-8", errors="replace"):
            if self.sandbox.poll() is not None or time.monotonic() > deadline:
                raise SandboxFailed(self.sandbox_log.read_text("utf-8", errors="replace")[-4000:])
            time.sleep(0.2)

    def run(self, script: str) -> tuple[int, str]:
        """Run one block as bash (``-e``, ``-o pipefail``) after the earlier blocks'
        exports; returns the exit status and stdout and stderr interleaved."""
        self.start_sandbox()
        wrapped = f"source {self.exports}\nset -eo pipefail\n{script}\nexport -p > {self.exports}\n"
        done = subprocess.run(
            ["bash", "-c", wrapped],
            cwd=self.workspace,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=BLOCK_TIMEOUT_S,
            check=False,
        )
        return done.returncode, done.stdout.decode("utf-8", errors="replace")

    def close(self) -> None:
        """Stop the sandbox (SIGINT, as Ctrl-C; SIGKILL after 30 s), remove the workspace."""
        if self.sandbox is not None and self.sandbox.poll() is None:
            os.kill(self.sandbox.pid, signal.SIGINT)
            try:
                self.sandbox.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.sandbox.pid, signal.SIGKILL)
                self.sandbox.wait(10)
        shutil.rmtree(self.workspace, ignore_errors=True)
