"""The pod-creation benchmark's CPU figures: each part's CPU over its cells per pod."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench import bench_create, createload
from sandbox.kube.admission.dispatcher import DispatchTimes


def test_cpu_per_pod_pools_the_cells_of_each_part() -> None:
    outcome = createload.CreateOutcome([0.001], Counter({201: 1}), admitted=1)
    cpu = [
        bench_create.Cpu(100, {"loop": 0.3, "webhook": 0.2, "reconciler": 0.5}),
        bench_create.Cpu(300, {"loop": 0.5, "webhook": 0.2, "reconciler": 0.3}),
    ]
    found = bench_create.figures([outcome], [DispatchTimes()], cpu)
    assert found["cpu_ms_per_pod"] == {
        "loop": pytest.approx(2.0),
        "reconciler": pytest.approx(2.0),
        "webhook": pytest.approx(1.0),
    }


def printed(rounds: int, system: dict[str, Any], alone: dict[str, Any]) -> list[str]:
    """What the benchmark prints for one quick ``c`` = 1 cell of these figures."""
    return bench_create.lines(
        {
            "mode": "quick",
            "rounds": rounds,
            "measure_s": 2.0,
            "loadavg_before": (0.1, 0, 0),
            "loadavg_after": (0.2, 0, 0),
            "cells": {"1": {"system": system, "alone": alone, "stress": False}},
        }
    )


def test_no_pod_created_gives_no_cpu_figure() -> None:
    found = bench_create.figures([createload.CreateOutcome()], [], [bench_create.Cpu(0, {})])
    assert found["cpu_ms_per_pod"] == {}
    found["steal_shares"] = []
    lines = printed(1, found, found)
    assert lines[-1].startswith("   CPU per pod created (ms): system ; alone")


def test_each_rounds_host_steal_is_printed_per_arm() -> None:
    outcome = createload.CreateOutcome([0.001], Counter({201: 1}), admitted=1)
    found = bench_create.figures([outcome], [DispatchTimes()], [bench_create.Cpu(1, {})])
    system, alone = found | {"steal_shares": [0.125, 0.0]}, found | {"steal_shares": [0.0, 0.5]}
    lines = printed(2, system, alone)
    steal = "system 12.5%/0.0%, alone 0.0%/50.0%"
    assert f"   host steal per round (the vCPUs' time the host took): {steal}" in lines
