"""``python -m sandbox up``: run the emulators and our chart locally;
``python -m sandbox upgrade``: apply more values to a running sandbox's release."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path

from sandbox.apply import ReleaseError
from sandbox.release import RELEASE_NAME, render
from sandbox.release_component import layers_of, upgrade
from sandbox.runner import (
    Sandbox,
    SandboxContext,
    SandboxError,
    run_until_interrupted,
)
from sandbox.scenario import clock_of, load_scenario
from sandbox.values import user_layers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the sandbox and run until interrupted")
    up.add_argument(
        "--components",
        default=",".join(UP_COMPONENTS),
        help=f"comma-separated subset of {','.join(UP_COMPONENTS)} (default: all); the "
        "webhook and reconciler run from the release, which needs the cluster (kubectl "
        "scale deploy/gpu-reservation-webhook --replicas=0 takes the webhook out)",
    )
    up.add_argument("--state-dir", default=".sandbox", type=Path)
    up.add_argument("--scenario", type=Path, help="scenario YAML (default: built-in)")
    up.add_argument(
        "--webhook-replicas",
        type=_positive,
        default=None,
        help="webhook replicas behind the one Service (= --set webhook.replicas=N; a "
        "--set of the same key wins)",
    )
    _values_flags(up)
    upgrade = sub.add_parser(
        "upgrade", help="render the running sandbox's release again with more values"
    )
    upgrade.add_argument("--state-dir", default=".sandbox", type=Path)
    _values_flags(upgrade)
    args = parser.parse_args(argv)
    if args.command == "upgrade":
        return _upgrade(args.state_dir, args.values, args.set)

    names = [n.strip() for n in args.components.split(",") if n.strip()]
    try:
        unknown = sorted(set(names) - set(UP_COMPONENTS))
        if unknown:
            raise ValueError(f"unknown component(s) {unknown}; known: {list(UP_COMPONENTS)}")
        scenario = load_scenario(args.scenario)
        # Absolute: the reconciler and webhook run as child processes in the repository
        # root, so a relative --state-dir would name another folder for them.
        state_dir = args.state_dir.resolve()
        ctx = SandboxContext(state_dir=state_dir, scenario=scenario, clock=clock_of(scenario))
        shorthand = (
            [] if args.webhook_replicas is None else [f"webhook.replicas={args.webhook_replicas}"]
        )
        ctx.handles["release.user"] = user_layers(args.values, [*shorthand, *args.set])
        if "release" in names:
            render(layers_of(ctx), ctx.namespace)  # bad values: refused before anything runs
        sandbox = Sandbox(ctx, names)
    except ValueError as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 2
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run_until_interrupted(sandbox))
    except SandboxError as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 2
    return 0


#: What ``up`` runs: our processes come from the release (the process kubelet of
#: ``cluster`` runs the chart's pods).
UP_COMPONENTS = ("kube", "cluster", "app", "release")


def _values_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--values",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="a values file for the chart, as helm takes it (repeatable; later wins)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a value as helm's --set takes it (repeatable; beats every --values file)",
    )


def _upgrade(state_dir: Path, files: list[Path], sets: list[str]) -> int:
    """``upgrade``: exit 1 with Helm's message when the values do not render."""
    try:
        record = asyncio.run(upgrade(state_dir, files, sets))
    except (ValueError, ReleaseError, OSError) as exc:
        print(f"Error: UPGRADE FAILED: {exc}", file=sys.stderr)
        return 1
    print(f'Release "{RELEASE_NAME}" has been upgraded. REVISION: {record.version}')
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


if __name__ == "__main__":
    raise SystemExit(main())
