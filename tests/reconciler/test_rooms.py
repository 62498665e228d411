"""The reconciler's house rules, read from its source: where time comes from, and how
big a room may grow (docs/developer/architecture.md, "The reconciler's rooms")."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECONCILER = ROOT / "reconciler"
#: Reading a clock by hand: the wall clock, or a monotonic one.
CLOCK_READS = {
    ("time", "time"),
    ("time", "monotonic"),
    ("time", "monotonic_ns"),
    ("time", "perf_counter"),
    ("datetime", "now"),
    ("datetime", "utcnow"),
}


def sources() -> list[Path]:
    return sorted(p for p in RECONCILER.rglob("*.py") if "__pycache__" not in p.parts)


def clock_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """Every ``time.monotonic()`` and the like in ``tree``, and every import of such a
    function by name (``from time import monotonic``)."""
    found = []
    for node in ast.walk(tree):
        name = (
            node.value.id
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            else None
        )
        if isinstance(node, ast.Attribute) and (name, node.attr) in CLOCK_READS:
            found.append((node.lineno, f"{name}.{node.attr}"))
        if isinstance(node, ast.ImportFrom) and node.module in {"time", "datetime"}:
            for alias in node.names:
                if (node.module, alias.name) in CLOCK_READS:
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
    return found


def test_the_reconciler_reads_time_only_through_the_injected_clocks() -> None:
    """``shared.clock`` is the one place a clock is read; the reconciler takes a
    ``Clock`` and a ``MonotonicClock``, so tests and the scaled sandbox decide time."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sources()
        for line, what in clock_reads(ast.parse(path.read_text()))
    ]
    assert found == []


def test_the_clock_check_sees_each_way_of_reading_a_clock() -> None:
    text = (
        "import time\nfrom time import monotonic\nfrom datetime import datetime\n"
        "a = time.monotonic()\nb = time.time()\nc = datetime.now()\n"
    )
    assert [what for _, what in clock_reads(ast.parse(text))] == [
        "from time import monotonic",
        "time.monotonic",
        "time.time",
        "datetime.now",
    ]


#: The most lines a module of the reconciler may have, and a class.
MODULE_LINES = 400
CLASS_LINES = 300


def oversized(text: str) -> list[str]:
    """The module ``text`` if it is too long, and each of its classes that is."""
    found = []
    if len(text.splitlines()) > MODULE_LINES:
        found.append(f"{len(text.splitlines())} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
            lines = node.end_lineno - node.lineno + 1
            if lines > CLASS_LINES:
                found.append(f"class {node.name}, {lines} lines")
    return found


def test_no_room_outgrows_a_reader() -> None:
    """A module of the reconciler stays under 400 lines and a class under 300: one
    that grows past them holds more than one concern, and splits."""
    found = [
        f"{path.relative_to(ROOT)}: {what}"
        for path in sources()
        for what in oversized(path.read_text())
    ]
    assert found == []


def test_the_size_check_sees_a_long_module_and_a_long_class() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(CLASS_LINES))
    long = f"class Big:\n{body}\n" + "\n" * (MODULE_LINES - CLASS_LINES)
    assert oversized(long) == ["401 lines", "class Big, 301 lines"]
    assert oversized("class Small:\n    x = 1\n") == []


def untyped_gateways(tree: ast.AST) -> list[int]:
    """Lines where a ``gateway`` (a parameter or a field) is typed ``Any``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg == "gateway":
            annotation = node.annotation
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            annotation = node.annotation if node.target.id == "gateway" else None
        else:
            continue
        if isinstance(annotation, ast.Name) and annotation.id == "Any":
            found.append(node.lineno)
    return found


def test_every_gateway_names_what_it_needs() -> None:
    """A component takes the Kubernetes gateway as a Protocol of the calls it makes
    (``reconciler.base.kube``), never as ``Any``: the type checker then sees each call."""
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sources()
        for line in untyped_gateways(ast.parse(path.read_text()))
    ]
    assert found == []


def test_the_gateway_check_sees_a_parameter_and_a_field() -> None:
    text = (
        "class A:\n    gateway: Any\n"
        "def f(gateway: Any, other: Any) -> None: ...\n"
        "def g(gateway: KubeWriter) -> None: ...\n"
    )
    assert untyped_gateways(ast.parse(text)) == [2, 3]
