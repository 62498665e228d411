"""Product and sandbox code time awaits out with ``asyncio.timeout``, not ``wait_for``.

On Python 3.11 ``asyncio.wait_for`` swallows a cancel that arrives in the loop turn in
which the awaited call completes: it returns the result, and the cancelled task goes
on. A loop that swallowed its cancel never ends, which hung a leadership change (a
replica took the lease and never started its loops) and emulator teardowns.
``asyncio.timeout`` raises the cancel. Tests may use ``wait_for``: nothing cancels a
test's own top-level coroutine.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "webhook", "reconciler", "certs", "sandbox", "bench")
#: Known uses, each judged harmless: a per-request await whose swallowed cancel only
#: lets one admission request finish (the webhook is another engineer's area).
ALLOWED = {
    "bench/bench_webhook.py",  # a load generator's pause between checks
}


def lines_calling_wait_for(tree: ast.AST) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "wait_for"
    ]


def wait_for_uses() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            found += [f"{path.relative_to(ROOT)}:{n}" for n in lines_calling_wait_for(tree)]
    return found


def test_no_wait_for_outside_the_judged_uses() -> None:
    assert [u for u in wait_for_uses() if u.split(":")[0] not in ALLOWED] == []


def test_the_scan_would_see_a_use() -> None:
    source = "async def f(x):\n    return await asyncio.wait_for(x, 1)\n"
    assert lines_calling_wait_for(ast.parse(source)) == [2]
