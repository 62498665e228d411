"""The process kubelet's children die with the sandbox, however hard it is killed.

A pytest worker or ``python -m sandbox up`` killed with SIGKILL runs no cleanup: the
webhook and reconciler (each in a session of its own) would run on and hold their
ports. ``sandbox.cluster.pdeath`` has the kernel kill them with their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandbox.cluster import pdeath

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's"
)
ROOT = Path(__file__).resolve().parents[2]
#: Wall seconds a child may take to go after its parent was killed.
GONE_WITHIN_S = 10.0


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no longer runs: nobody may have reaped it yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pids: list[int]) -> list[int]:
    """The pids still running after ``GONE_WITHIN_S`` (none, when all went)."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return []
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def children(pid: int) -> list[int]:
    """Every process whose parent is ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def command_of(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def until_running(pid: int, command: list[str]) -> bool:
    """Whether ``pid`` runs ``command`` within ``GONE_WITHIN_S``."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while command_of(pid) != command:
        if time.monotonic() > deadline or not alive(pid):
            return False
        time.sleep(0.02)
    return True


@linux_only
def test_a_tied_child_dies_with_its_parent_and_an_untied_one_does_not() -> None:
    """A parent starts two sleepers in sessions of their own, one tied; SIGKILL of the
    parent ends the tied one only (the untied one shows what the tie prevents)."""
    program = textwrap.dedent(
        """
        import subprocess, sys
        from sandbox.cluster import pdeath
        tied = subprocess.Popen(pdeath.tied(["sleep", "60"]), start_new_session=True)
        free = subprocess.Popen(["sleep", "60"], start_new_session=True)
        print(tied.pid, free.pid, flush=True)
        subprocess.run(["sleep", "60"])
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", program], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    free = 0
    try:
        assert parent.stdout is not None
        tied, free = (int(p) for p in parent.stdout.readline().split())
        # setpriv makes the tie and then execs: once the child runs sleep, it is tied
        # (a parent killed before that would leave it untied, as the module says).
        assert until_running(tied, ["sleep", "60"])
        assert alive(free)
        parent.kill()
        parent.wait()
        assert wait_gone([tied]) == []
        assert alive(free)
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
        if free:
            os.kill(free, signal.SIGKILL)


def test_off_linux_there_is_no_tie(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert pdeath.tied(["sleep", "1"]) == ["sleep", "1"]


@linux_only
def test_the_tie_keeps_the_commands_own_pid_and_argv() -> None:
    """``setpriv`` execs the command: the pid the kubelet watches is the command's."""
    child = subprocess.Popen(pdeath.tied(["sleep", "60"]))
    try:
        assert until_running(child.pid, ["sleep", "60"])
    finally:
        child.kill()
        child.wait()


@linux_only
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_the_webhook_and_reconciler_die_with_a_sigkilled_sandbox(tmp_path: Path) -> None:
    """``python -m sandbox up`` (the chart's release run by the process kubelet) killed
    with SIGKILL: its webhook and reconciler processes are gone within seconds."""
    state = tmp_path / "state"
    log = (tmp_path / "sandbox.log").open("w+")
    sandbox = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "up", "--state-dir", str(state)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    ours: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while "sandbox ready" not in (tmp_path / "sandbox.log").read_text():
            assert sandbox.poll() is None, (tmp_path / "sandbox.log").read_text()
            assert time.monotonic() < deadline, "the sandbox did not come up"
            time.sleep(0.2)
        modules = {}
        for pid in children(sandbox.pid):
            argv = command_of(pid)
            if "-m" in argv:
                modules[pid] = argv[argv.index("-m") + 1]
        assert sorted(modules.values()) == ["reconciler", "webhook"], modules
        ours = list(modules)
        sandbox.kill()
        sandbox.wait()
        assert wait_gone(ours) == []
    finally:
        sandbox.kill()
        sandbox.wait()
        for pid in ours:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        log.close()


@linux_only
@pytest.mark.parametrize("program", ["/no/such/program", "no-such-program-on-path"])
def test_a_program_that_cannot_run_fails_before_the_tie(program: str) -> None:
    """As a direct spawn would: the kubelet records StartError, not an exit of setpriv."""
    with pytest.raises(FileNotFoundError, match=program):
        pdeath.tied([program], "/usr/bin:/bin")


@linux_only
def test_a_file_that_is_not_executable_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("echo hi\n")
    with pytest.raises(PermissionError):
        pdeath.tied([str(plain)])
