"""The benchmarks' readings of /proc: the host's steal between two readings."""

from __future__ import annotations

import math

from bench import procstat


def test_steal_share_is_the_stolen_ticks_over_all_ticks_between_readings() -> None:
    assert procstat.steal_share((10, 1_000), (30, 1_200)) == 0.1


def test_no_tick_between_readings_gives_no_share() -> None:
    assert math.isnan(procstat.steal_share((5, 500), (5, 500)))


def test_this_machines_readings_count_forward() -> None:
    first = procstat.host_times()
    second = procstat.host_times()
    assert 0 <= first[0] <= first[1]
    assert second[0] >= first[0]
    assert second[1] >= first[1]
