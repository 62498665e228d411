"""docs/user/examples/galends_checkpoint.py against a fake projected downward-API volume.

The kubelet writes a downwardAPI volume as a timestamped directory, points ``..data``
at it and makes each file a symlink through ``..data``; an update writes a new
directory and swaps the ``..data`` link atomically. ``Projected`` does the same, so
the watcher is tested on the layout it meets in a pod. Time is a manual clock.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from shared import vocab

ROOT = Path(__file__).resolve().parents[2]
FILES = [
    k.removeprefix(vocab.ANNOTATION_PREFIX) for k in sorted(vocab.CONTROLLER_OWNED_ANNOTATIONS)
]
T0 = 1_796_299_200.0  # 2026-12-03T12:00:00Z


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "galends_checkpoint", ROOT / "docs" / "user" / "examples" / "galends_checkpoint.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gc = load()


class Projected:
    """A downwardAPI volume as the kubelet lays it out, updated by an atomic swap."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.version = 0
        self.write({})

    def write(self, values: dict[str, str]) -> None:
        self.version += 1
        data = self.root / f"..2026_12_03_{self.version:04d}"
        data.mkdir()
        for name in FILES:
            (data / name).write_text(values.get(name, ""), encoding="utf-8")
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(data.name)
        os.replace(tmp, self.root / "..data")
        for name in FILES:
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(Path("..data") / name)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def volume(tmp_path: Path) -> Projected:
    return Projected(tmp_path)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def watcher(volume: Projected, clock: Clock, **kw: float) -> Any:
    return gc.Watcher(str(volume.root), clock=clock, **{"margin_s": 600, "poll_s": 10, **kw})


def test_the_layout_is_the_kubelets(volume: Projected) -> None:
    """Guard: the fake is the real layout, every controller-written key a file."""
    assert FILES
    assert "termination-warning-at" in FILES
    assert (volume.root / "..data").is_symlink()
    assert (volume.root / "termination-warning-at").read_text() == ""


def test_no_warning_no_checkpoint(volume: Projected, clock: Clock) -> None:
    w = watcher(volume, clock)
    assert w.should_checkpoint() is False
    assert w.read() is None


def test_a_checkpoint_is_due_margin_seconds_before_the_warning_and_only_once(
    volume: Projected, clock: Clock
) -> None:
    w = watcher(volume, clock)
    volume.write(
        {
            "termination-warning-at": "2026-12-03T12:30:00Z",
            "termination-warning-risk": "0.50",
            "termination-warning-message": "Booking res-9 needs the GPUs.",
        }
    )
    warning = w.read()
    assert (warning.risk, warning.message) == (0.5, "Booking res-9 needs the GPUs.")
    clock.now = T0 + 30 * 60 - 601
    assert w.should_checkpoint() is False
    clock.now = T0 + 30 * 60 - 600
    assert w.should_checkpoint() is True
    clock.now += 60
    assert w.should_checkpoint() is False


def test_a_warning_already_past_is_due_at_once(volume: Projected, clock: Clock) -> None:
    volume.write({"termination-warning-at": "2026-12-03T11:00:00+00:00"})
    assert watcher(volume, clock).should_checkpoint() is True


def test_a_moved_warning_is_a_new_one_and_a_cleared_one_is_forgotten(
    volume: Projected, clock: Clock
) -> None:
    w = watcher(volume, clock)
    volume.write({"termination-warning-at": "2026-12-03T12:05:00Z"})
    assert w.should_checkpoint() is True
    volume.write({})  # the user re-booked: warning cleared
    clock.now += 10
    assert w.should_checkpoint() is False
    volume.write({"termination-warning-at": "2026-12-03T12:08:00Z"})
    clock.now += 10
    assert w.should_checkpoint() is True


def test_reads_are_rate_limited_to_poll_seconds(volume: Projected, clock: Clock) -> None:
    w = watcher(volume, clock)
    assert w.should_checkpoint() is False
    volume.write({"termination-warning-at": "2026-12-03T12:05:00Z"})
    clock.now += 9
    assert w.should_checkpoint() is False
    clock.now += 1
    assert w.should_checkpoint() is True


@pytest.mark.parametrize(
    "text",
    ["soon", "2026-12-03T12:05:00", "2026-13-03T12:05:00Z", "\x00", "  "],
    ids=["words", "no-zone", "bad-month", "binary", "blank"],
)
def test_malformed_values_read_as_no_warning(
    volume: Projected, clock: Clock, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    volume.write({"termination-warning-at": text, "termination-warning-risk": "high"})
    w = watcher(volume, clock)
    with caplog.at_level(logging.WARNING, logger="galends_checkpoint"):
        assert w.should_checkpoint() is False
        w.read()
    complaints = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(complaints) == (1 if text.strip() else 0)


def test_a_bad_risk_is_unknown_not_fatal(volume: Projected, clock: Clock) -> None:
    volume.write(
        {"termination-warning-at": "2026-12-03T12:05:00Z", "termination-warning-risk": "x"}
    )
    assert watcher(volume, clock).read().risk is None


def test_no_volume_means_no_warnings(tmp_path: Path, clock: Clock) -> None:
    w = gc.Watcher(str(tmp_path / "absent"), clock=clock)
    assert w.should_checkpoint() is False


def test_the_background_thread_calls_back_once(volume: Projected) -> None:
    volume.write({"termination-warning-at": "2026-12-03T12:05:00Z"})
    clock = Clock()
    called = threading.Event()
    seen: list[object] = []
    w = gc.Watcher(str(volume.root), margin_s=600, poll_s=0.01, clock=clock)

    def callback(warning: object) -> None:
        seen.append(warning)
        called.set()

    w.start(callback)
    try:
        assert called.wait(30)
        with pytest.raises(RuntimeError, match="already started"):
            w.start(callback)
    finally:
        w.stop()
    assert len(seen) == 1


def test_a_failing_callback_does_not_kill_the_thread(
    volume: Projected, caplog: pytest.LogCaptureFixture
) -> None:
    volume.write({"termination-warning-at": "2026-12-03T12:05:00Z"})
    done = threading.Event()

    def broken(_warning: object) -> None:
        done.set()
        raise OSError("disk full")

    w = gc.Watcher(str(volume.root), margin_s=600, poll_s=0.01, clock=Clock())
    with caplog.at_level(logging.ERROR, logger="galends_checkpoint"):
        w.start(broken)
        try:
            assert done.wait(30)
        finally:
            w.stop()
    assert any("callback failed" in r.getMessage() for r in caplog.records)


SMOKE = """
import sys
sys.path.insert(0, sys.argv[1])
import galends_checkpoint as gc
w = gc.Watcher(sys.argv[2], margin_s=600, poll_s=0, clock=lambda: 1_796_299_200.0 + 1200)
assert w.should_checkpoint() is True, w.read()
assert w.read().risk == 0.5
print("ok")
"""


def interpreters() -> dict[str, tuple[int, int]]:
    """Every Python on this machine the helper could be run with: the venv's and
    Debian's (``/usr/bin/python3*``), by the version each reports."""
    found = {sys.executable: sys.version_info[:2]}
    for path in sorted(Path("/usr/bin").glob("python3*")):
        if re.fullmatch(r"python3(\.\d+)?", path.name) and os.access(path, os.X_OK):
            out = subprocess.run(
                [str(path), "-c", "import sys; print(*sys.version_info[:2])"],
                capture_output=True, text=True, timeout=30, check=True,
            )  # fmt: skip
            major, minor = out.stdout.split()
            found[str(path)] = (int(major), int(minor))
    return found


def test_the_helper_runs_on_every_python_it_claims_and_claims_only_what_is_tried(
    tmp_path: Path,
) -> None:
    """The docstring's "Python X.Y+" is the oldest Python tried here, and the helper
    runs on every Python found at or above it (it once claimed 3.9 and imported
    ``datetime.UTC``, which came in 3.11)."""
    doc = (ROOT / "docs" / "user" / "examples" / "galends_checkpoint.py").read_text(
        encoding="utf-8"
    )
    claim = re.search(r"Python (\d+)\.(\d+)\+", doc)
    assert claim is not None
    claimed = (int(claim[1]), int(claim[2]))
    found = interpreters()
    assert claimed == min(found.values()), found
    (tmp_path / "volume").mkdir()
    volume = Projected(tmp_path / "volume")
    volume.write(
        {"termination-warning-at": "2026-12-03T12:30:00Z", "termination-warning-risk": "0.5"}
    )
    for path, version in found.items():
        if version < claimed:
            continue
        out = subprocess.run(
            [path, "-I", "-c", SMOKE, str(ROOT / "docs" / "user" / "examples"), str(volume.root)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert (out.returncode, out.stdout.strip()) == (0, "ok"), (path, out.stderr)
