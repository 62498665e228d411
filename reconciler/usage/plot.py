"""``kubectl gpures usage --plot FILE.png``: per GPU class, booked and used GPUs over
the period, hour by hour, stacked by usage group (matplotlib, the ``plot`` extra).

Each class gets one panel: the used GPUs of every group as a stacked area, the booked
GPUs as a stacked step line per group on top of it (the gap between a group's line
and its area is what it booked and left idle). An hour's value is the GPU-seconds of
that hour divided by 3,600 (bookings' hours are taken from their window start, put in
the clock hour they start in).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from reconciler.usage.report import Report
from shared.policy.usage import HOUR

#: Pixels of the PNG per panel (width, height) at ``DPI``.
DPI = 100
PANEL = (12.0, 3.5)


def _series(report: Report) -> dict[str, dict[str, dict[datetime, tuple[float, float]]]]:
    """class → group → clock hour → (booked GPUs, used GPUs)."""
    out: dict[str, dict[str, dict[datetime, tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for s in report.slices:
        hours = out[s.gpu_class][s.group]
        for start, booked, used in s.hours:
            slot = start.replace(minute=0, second=0, microsecond=0)
            b, u = hours.get(slot, (0.0, 0.0))
            hours[slot] = (b + booked / HOUR, u + used / HOUR)
    return out


def figure(report: Report) -> Any:
    """The matplotlib ``Figure`` of ``report`` (not saved): one axes per class, one
    used area and one booked line per group, labelled ``<group> used`` /
    ``<group> booked``."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # the optional extra is not installed
        raise RuntimeError("--plot needs matplotlib: pip install 'gpu-reservation[plot]'") from exc
    data = _series(report)
    classes = sorted(data) or ["(none)"]
    fig = Figure(figsize=(PANEL[0], PANEL[1] * len(classes)), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(classes), 1, squeeze=False)[:, 0]
    start = report.since.replace(minute=0, second=0, microsecond=0)
    slots = []
    at = start
    while at < report.now:
        slots.append(at)
        at += timedelta(hours=1)
    for ax, cls in zip(axes, classes, strict=True):
        groups = sorted(data.get(cls, {}))
        # Each hour's value holds until the next hour: the last one is drawn to its end.
        edges = [*slots, slots[-1] + timedelta(hours=1)] if slots else []
        used = [_closed([data[cls][g].get(t, (0.0, 0.0))[1] for t in slots]) for g in groups]
        booked = [_closed([data[cls][g].get(t, (0.0, 0.0))[0] for t in slots]) for g in groups]
        if groups and edges:
            ax.stackplot(edges, used, labels=[f"{g} used" for g in groups], step="post", alpha=0.6)
            total = [0.0] * len(edges)
            for group, row in zip(groups, booked, strict=True):
                total = [a + b for a, b in zip(total, row, strict=True)]
                ax.step(edges, total, where="post", linestyle="--", label=f"{group} booked")
            ax.legend(loc="upper left", fontsize="small", ncols=2)
        ax.set_title(f"{cls}: booked vs used GPUs by group")
        ax.set_ylabel("GPUs")
        ax.set_xlabel("time (UTC)")
        ax.set_ylim(bottom=0)
    return fig


def _closed(values: list[float]) -> list[float]:
    """``values`` with the last repeated (the value at the last hour's end)."""
    return [*values, values[-1]] if values else []


def write(report: Report, path: str) -> None:
    """Draw ``report`` into the PNG file ``path``."""
    figure(report).savefig(path, format="png")
