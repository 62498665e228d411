"""A process's CPU time and resident memory as Linux reports them (``/proc``): the
benchmarks read their subprocesses (reconciler, webhook) with these."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_s(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """Resident set size of process ``pid`` in MiB (NaN when unreadable)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) each thread of ``pid`` has used, summed by thread
    name (``/proc/<pid>/task/*/stat``): ``main`` for the process's first thread (an
    asyncio program's event loop), ``other <name>`` for the rest by their OS name, a
    numbered pool's workers (``w_0``, ``w_1``…) together. CPython does not give its
    threads OS names, so a Python program's other threads are all ``other python``.
    A thread that ended meanwhile is missing from the later reading."""
    ticks = os.sysconf("SC_CLK_TCK")
    found: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            head, _, tail = (task / "stat").read_text().rpartition(")")
        except OSError:
            continue  # the thread ended while we read
        name = head.split("(", 1)[1].rstrip("_0123456789") or "?"
        name = "main" if task.name == str(pid) else f"other {name}"
        fields = tail.split()
        found[name] = found.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return found


def host_times() -> tuple[int, int]:
    """(ticks the hypervisor took from this machine's vCPUs — ``steal`` — and all ticks
    of every vCPU) since boot (``/proc/stat``'s ``cpu`` line). Two readings give the
    share of a span the host ran something else while a vCPU wanted to run: on a
    shared host, the measure of how much a benchmark's figures owe to its neighbours."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(f) for f in fields[:8]]  # guest time is counted in user already
    return ticks[7], sum(ticks)


def steal_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of the vCPUs' time the host took between two ``host_times`` readings
    (NaN when no tick passed)."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total else float("nan")


def started_at(pid: int) -> float:
    """When process ``pid`` started, in seconds since the epoch (``/proc/<pid>/stat``'s
    start time after boot, plus the boot time of ``/proc/stat``), to a clock tick."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    boot = next(
        int(line.split()[1])
        for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime ")
    )
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
