"""``make bench`` / ``make bench-full``: run the benchmarks and print their figures.

``python -m bench [--full] [name ...]``: every ``bench_*`` module of this package (or
the named ones, e.g. ``webhook``), each exposing ``run() -> list[str]`` (lines to
print). ``--full`` sets ``BENCH_MODE=full``: longer measured intervals and the larger
sizes, where a benchmark has them. Benchmarks write their figures as JSON under
``$BENCH_OUT`` (default ``.bench/``) too. They are measurements, never pass/fail checks.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if "--full" in argv:
        os.environ["BENCH_MODE"] = "full"
    wanted = {a.removeprefix("bench_") for a in argv if not a.startswith("-")}
    names = sorted(
        m.name
        for m in pkgutil.iter_modules([str(Path(__file__).parent)])
        if m.name.startswith("bench_") and (not wanted or m.name.removeprefix("bench_") in wanted)
    )
    if not names:
        print("no such benchmark")
        return 2
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        print(f"== {name}", flush=True)
        for line in module.run():
            print(f"   {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
