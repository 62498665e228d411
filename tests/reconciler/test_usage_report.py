"""``kubectl gpures usage``: the table, JSON, --since, --by, RBAC scope and --plot,
on a known history of three owners (full use, half the GPUs for half the window, a
no-show cancelled after 15 minutes)."""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from reconciler import cli
from reconciler.usage import cli as usage_cli
from reconciler.usage import plot, report
from shared import model, vocab
from shared.clock import ManualClock, format_utc, utc
from shared.gateway import Gateway
from shared.model import GPUReservation, Kind, ReservationFacts, State
from shared.policy import usage, usagerecord
from shared.policy.matching import MatchRules
from shared.policy.usage import Record, Run
from shared.resources import GPU_RESERVATIONS
from tests.fakekube import FakeKube

START = utc(2026, 3, 2, 10)
END = START + timedelta(hours=2)
NOW = END + timedelta(hours=1)
CTL = vocab.PRODUCT_NAME


def booking(
    rid: int,
    owner: str,
    group: str,
    runs: list[Run],
    gpu_class: str = "h100",
    extra: dict[str, Any] | None = None,
    **kw: Any,
) -> GPUReservation:
    base: dict[str, Any] = {
        "id": rid,
        "owner": owner,
        "gpu_class": gpu_class,
        "gpu_class_name": gpu_class.upper(),
        "gpu_count": 4,
        "kind": Kind.BOOKING,
        "start": START,
        "end": END,
        "state": State.ACTIVE,
        "updated_at": START - timedelta(days=1),
        "group": group,
    }
    base.update(kw)
    extra = dict(extra or {})
    facts = ReservationFacts(**base)
    res = GPUReservation(facts, status_extra=extra)
    window = usage.window_of(res)
    record = usage.advance(Record(), window, runs, NOW)
    extra[usage.STATUS_KEY] = usagerecord.record_to_status(record, window)
    return GPUReservation(facts, status_extra=extra)


def history() -> list[GPUReservation]:
    noshow = {"declaredAt": format_utc(START + timedelta(minutes=15))}
    noshow["cancelledAt"] = noshow["declaredAt"]
    return [
        booking(1, "alice", "lab", [Run("a", 4, START, END)]),
        booking(
            2,
            "bob",
            "lab",
            [Run("b", 2, START + timedelta(minutes=30), START + timedelta(minutes=90))],
        ),
        booking(
            3,
            "carol",
            "vision",
            [],
            gpu_class="a100",
            state=State.CANCELLED,
            extra={"noShow": noshow},
        ),
    ]


def rows(rep: report.Report) -> dict[str, report.Row]:
    return {r.key: r for r in rep.rows}


def test_the_three_owners_figures() -> None:
    rep = report.summarise(history(), NOW, timedelta(days=7), "owner")
    got = rows(rep)
    assert (got["alice"].booked, got["alice"].used) == (4 * 7200, 4 * 7200)
    assert got["bob"].used / got["bob"].booked == pytest.approx(0.25)
    assert (got["carol"].booked, got["carol"].used, got["carol"].no_shows) == (4 * 900, 0, 1)
    assert rep.total.used == 4 * 7200 + 2 * 3600
    assert got["bob"].first_use == 1800
    assert got["carol"].first_use is None


def test_the_table_and_json() -> None:
    rep = report.summarise(history(), NOW, timedelta(days=7), "owner")
    text = report.render(rep)
    lines = text.splitlines()
    assert lines[1].split()[:3] == ["OWNER", "KIND", "BOOKINGS"]
    alice = next(line.split() for line in lines if line.startswith("alice"))
    assert alice[3:7] == ["8.0", "8.0", "0.0", "100.0"]
    assert lines[-1].split()[0] == "TOTAL"
    data = json.loads(report.to_json(rep))
    bob = next(r for r in data["rows"] if r["key"] == "bob")
    assert bob["utilisationPercent"] == 25.0
    assert bob["medianSecondsToFirstUse"] == 1800
    assert data["totals"]["noShows"] == 1
    assert data["totals"]["bookedGpuHours"] == 8 + 8 + 1


def test_by_group_and_class() -> None:
    by_group = rows(report.summarise(history(), NOW, timedelta(days=7), "group"))
    assert set(by_group) == {"lab", "vision"}
    assert by_group["lab"].bookings == 2
    by_class = rows(report.summarise(history(), NOW, timedelta(days=7), "class"))
    assert set(by_class) == {"h100", "a100"}


def test_since_cuts_the_period_at_its_start() -> None:
    cut = report.summarise(history(), NOW, timedelta(hours=2), "owner")  # from START+1h
    got = rows(cut)
    assert got["alice"].booked == 4 * 3600
    assert got["alice"].used == 4 * 3600
    assert got["bob"].used == 2 * 1800
    assert "carol" not in got  # its accounted window stopped before the period
    assert report.summarise(history(), START, timedelta(days=1), "owner").rows == []


@pytest.mark.parametrize("text", ["", "7", "d", "7y", "-1d", "0d", "400d", "1.5h", "7 d x"])
def test_malformed_since_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="period"):
        report.parse_since(text)


def test_since_units() -> None:
    assert report.parse_since("30m") == timedelta(minutes=30)
    assert report.parse_since("2w") == timedelta(days=14)


def test_a_malformed_record_counts_booked_only() -> None:
    res = booking(9, "dave", "lab", [])
    broken = GPUReservation(res.facts, status_extra={usage.STATUS_KEY: {"open": 5}})
    got = rows(report.summarise([broken], NOW, timedelta(days=7), "owner"))
    assert (got["dave"].booked, got["dave"].used) == (4 * 7200, 0)


def args(**kw: Any) -> argparse.Namespace:
    base = {"since": "7d", "by": "owner", "output": "table", "plot": None}
    base.update(kw)
    return argparse.Namespace(**base)


def kube_with(history: list[GPUReservation]) -> FakeKube:
    kube = FakeKube()
    for res in history:
        kube.add(GPU_RESERVATIONS, model.to_object(res, CTL, NOW), CTL)
    return kube


def ctx_of(kube: FakeKube) -> cli.Context:
    return cli.Context(cast(Gateway, kube), CTL, ManualClock(NOW), None, MatchRules())


def test_a_user_sees_their_namespace_and_all_namespaces_everyone() -> None:
    ctx = ctx_of(kube_with(history()))
    mine = json.loads(asyncio.run(usage_cli.run(ctx, "bob", args(output="json"))))
    assert [r["key"] for r in mine["rows"]] == ["bob"]
    every = json.loads(asyncio.run(usage_cli.run(ctx, None, args(output="json"))))
    assert [r["key"] for r in every["rows"]] == ["alice", "bob", "carol"]


def test_the_plugin_parses_usage() -> None:
    parsed = cli.parser("kubectl gpures").parse_args(
        ["usage", "-A", "--since", "2w", "--by", "group", "-o", "json", "--plot", "x.png"]
    )
    assert (parsed.all_namespaces, parsed.since, parsed.by, parsed.output, parsed.plot) == (
        True,
        "2w",
        "group",
        "json",
        "x.png",
    )
    with pytest.raises(SystemExit):
        cli.parser("kubectl gpures").parse_args(["usage", "--by", "colour"])


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_the_plot_draws_one_series_per_group_per_class(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rep = report.summarise(history(), NOW, timedelta(hours=4), "owner")
    fig = plot.figure(rep)
    axes = fig.get_axes()
    assert [ax.get_title().split(":")[0] for ax in axes] == ["a100", "h100"]
    h100 = axes[1]
    labels = sorted(h100.get_legend_handles_labels()[1])
    assert labels == ["lab booked", "lab used"]
    assert len(h100.collections) == 1  # one used area per group
    assert len(h100.get_lines()) == 1  # one booked line per group
    used = h100.collections[0].get_paths()[0].vertices[:, 1].max()
    assert used == pytest.approx(5.0)  # alice's 4 and bob's 2 GPUs for half of each hour
    booked_line = h100.get_lines()[0].get_ydata()
    assert max(booked_line) == pytest.approx(8.0)  # alice's 4 and bob's 4, stacked
    path = tmp_path / "usage.png"
    plot.write(rep, str(path))
    assert png_size(path) == (plot.PANEL[0] * plot.DPI, 2 * plot.PANEL[1] * plot.DPI)


def test_the_plot_via_the_command(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "out.png"
    asyncio.run(usage_cli.run(ctx_of(kube_with(history())), None, args(plot=str(path))))
    assert path.stat().st_size > 1000
