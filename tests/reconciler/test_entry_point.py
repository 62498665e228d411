"""``python -m reconciler``'s entry point: the replica runs on uvloop, as the webhook
does, and SIGTERM or SIGINT stops it gracefully (exit 0).

The process is real (settings from its environment, the gateway from a kubeconfig, its
signal handlers); only the replica is a stand-in that says on which loop it was
started and that it was stopped, so no cluster is needed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]

#: The entry point with ``Reconciler`` replaced; its notes go to stderr (logs are stdout).
SCRIPT = """
import asyncio, sys
import reconciler.__main__ as entry

class Replica:
    def __init__(self, *args, **kwargs):
        pass

    async def start(self):
        loop = type(asyncio.get_running_loop())
        print(f"started on {loop.__module__}.{loop.__qualname__}", file=sys.stderr, flush=True)

    async def stop(self):
        print("stopped", file=sys.stderr, flush=True)

entry.Reconciler = Replica
sys.exit(entry.main())
"""

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: t0ken}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["term", "int"])
def test_the_replica_runs_on_uvloop_and_a_stop_signal_ends_it_cleanly(
    tmp_path: Path, stop_signal: signal.Signals
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "RESERVATION_API_URL": "http://127.0.0.1:9/",
        "RESERVATION_API_KEY": "gpures_x",
        "KUBECONFIG": str(kubeconfig),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        started = proc.stderr.readline().strip()
        proc.send_signal(stop_signal)
        _, rest = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert started == "started on uvloop.Loop"
    assert rest.splitlines() == ["stopped"]
    assert proc.returncode == 0
