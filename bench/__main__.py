"""``make bench``: run every benchmark and print its figures.

Each benchmark module in this package exposes ``run() -> list[str]`` (lines to print).
Benchmarks are measurements, never pass/fail checks.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main() -> int:
    names = sorted(
        m.name
        for m in pkgutil.iter_modules([str(Path(__file__).parent)])
        if m.name.startswith("bench_")
    )
    if not names:
        print("no benchmarks yet")
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        print(f"== {name}")
        for line in module.run():
            print(f"   {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
