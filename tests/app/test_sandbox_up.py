"""``python -m sandbox up --components app`` on its own, checked with real HTTP (acceptance 3)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def sandbox(tmp_path: Path):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandbox",
            "up",
            "--components",
            "app",
            "--state-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60  # liveness: a loaded machine starts python slowly
        line = ""
        while time.monotonic() < deadline and "sandbox ready" not in line:
            line = process.stdout.readline()
            assert line or process.poll() is None, "sandbox exited before it was ready"
        assert "sandbox ready" in line
        yield json.loads((tmp_path / "endpoints.json").read_text())
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()


def test_the_app_component_serves_the_contract(sandbox: dict[str, Any]) -> None:
    url = sandbox["app"]
    key = sandbox["app_keys"]["read_write"]
    assert sandbox["app_keys"]["read_only"].startswith("gpures_")
    with httpx.Client(base_url=url, timeout=5) as http:
        assert http.get("/api/reservations").status_code == 401
        listed = http.get("/api/reservations", headers={"X-API-Key": key})
        assert listed.status_code == 200
        assert [r["user"]["username"] for r in listed.json()] == ["alice", "bob"]
        lease = {
            "on_demand": True,
            "username": "carol",
            "group_name": "course-101",
            "gpu_class_id": 1,
            "gpu_count": 1,
            "duration_seconds": 600,
            "idempotency_key": "pod-uid-acceptance-3",
        }
        first = http.post("/api/reservations", json=lease, headers={"X-API-Key": key})
        second = http.post("/api/reservations", json=lease, headers={"X-API-Key": key})
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]
