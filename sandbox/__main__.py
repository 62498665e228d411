"""``python -m sandbox up``: run the emulators (and, later, our components) locally."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path

from sandbox.runner import (
    Sandbox,
    SandboxContext,
    SandboxError,
    available,
    run_until_interrupted,
)
from sandbox.scenario import clock_of, load_scenario


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the sandbox and run until interrupted")
    up.add_argument(
        "--components",
        default=",".join(available()),
        help=f"comma-separated subset of {','.join(available())} (default: all)",
    )
    up.add_argument("--state-dir", default=".sandbox", type=Path)
    up.add_argument("--scenario", type=Path, help="scenario YAML (default: built-in)")
    up.add_argument(
        "--webhook-replicas",
        type=_positive,
        default=1,
        help="webhook replicas behind the one Service",
    )
    args = parser.parse_args(argv)

    names = [n.strip() for n in args.components.split(",") if n.strip()]
    try:
        scenario = load_scenario(args.scenario)
        # Absolute: the reconciler and webhook run as child processes in the repository
        # root, so a relative --state-dir would name another folder for them.
        state_dir = args.state_dir.resolve()
        ctx = SandboxContext(state_dir=state_dir, scenario=scenario, clock=clock_of(scenario))
        ctx.handles["webhook.replicas"] = args.webhook_replicas
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
