"""``python -m sandbox up``: run the emulators (and, later, our components) locally."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path

from sandbox.runner import Sandbox, SandboxContext, available, run_until_interrupted
from sandbox.scenario import load_scenario


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
        "--webhook-replicas", type=int, default=1, help="webhook replicas behind the one Service"
    )
    args = parser.parse_args(argv)

    names = [n.strip() for n in args.components.split(",") if n.strip()]
    try:
        scenario = load_scenario(args.scenario)
        ctx = SandboxContext(state_dir=args.state_dir, scenario=scenario)
        ctx.handles["webhook.replicas"] = max(1, args.webhook_replicas)
        sandbox = Sandbox(ctx, names)
    except ValueError as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_until_interrupted(sandbox))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
