"""``kubectl gpures usage``: the shell around ``reconciler.usage.report`` (and the
optional ``--plot``). It reads the GPUReservations with the caller's own kubeconfig,
as ``explain`` and ``list`` do: without ``-A`` only the bookings of the namespace
(``-n``, else the context's), with ``-A`` every one the caller may read."""

from __future__ import annotations

import argparse
from typing import Any, Protocol

from reconciler.base.kube import KubeReader
from reconciler.usage import report
from shared import model
from shared.clock import Clock
from shared.errors import KubeError
from shared.resources import GPU_RESERVATIONS


class Context(Protocol):
    """What the plugin's shell hands the command (``reconciler.cli.Context``)."""

    @property
    def gateway(self) -> KubeReader: ...

    @property
    def controller_namespace(self) -> str: ...

    @property
    def clock(self) -> Clock: ...


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``usage`` on the plugin's sub-command parser."""
    one = sub.add_parser(
        "usage", parents=parents, help="booked versus used GPU-hours, per owner, group or class"
    )
    one.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every owner's bookings you may read"
    )
    one.add_argument("--since", default="7d", help="period ending now: 30m, 12h, 7d, 2w (7d)")
    one.add_argument("--by", choices=report.BY, default="owner", help="one row per (owner)")
    one.add_argument("-o", "--output", choices=("table", "json"), default="table")
    one.add_argument(
        "--plot", metavar="FILE.png", help="also draw booked and used GPUs over time (matplotlib)"
    )


async def reservations(ctx: Context, owner: str | None) -> list[model.GPUReservation]:
    """The readable GPUReservations of ``owner`` (every one for None); KubeError when
    they cannot be listed."""
    listed = await ctx.gateway.list_all(GPU_RESERVATIONS, ctx.controller_namespace)
    found = []
    for obj in listed.items:
        try:
            res = model.from_object(obj)
        except (ValueError, TypeError, KeyError):
            continue
        if owner is None or res.facts.owner == owner:
            found.append(res)
    return found


async def run(ctx: Context, owner: str | None, args: argparse.Namespace) -> str:
    """The report as text (table or JSON); ``ValueError`` for a bad ``--since`` and
    ``RuntimeError`` when ``--plot`` cannot be drawn (matplotlib missing)."""
    since = report.parse_since(args.since)
    try:
        found = await reservations(ctx, owner)
    except KubeError:
        raise
    summary = report.summarise(found, ctx.clock.now(), since, args.by)
    if args.plot:
        from reconciler.usage.plot import write  # optional extra: matplotlib

        write(summary, args.plot)
    return report.to_json(summary) if args.output == "json" else report.render(summary)
