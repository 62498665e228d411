"""The pytest side of the executable docs: Sybil collects README.md and docs/**.md,
and the run ends with how many blocks of each page ran and how many are marked not
runnable here (``tests.docs.blocks``). Loaded by the repository's root conftest.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sybil import Sybil

from tests.docs import blocks
from tests.docs.terminal import ROOT

SYBIL = Sybil(
    parsers=[blocks.BlockParser()],
    path=str(ROOT),
    patterns=["README.md", "docs/*.md", "docs/*/*.md"],
    setup=blocks.setup,
    teardown=blocks.teardown,
)
_collect: Callable[[Path, Any], Any] = SYBIL.pytest()
PROPERTY = "docs_block"
BLOCK_TIMEOUT_S = 300
_tally: Counter[tuple[str, str]] = Counter()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Any:
    return _collect(file_path, parent)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tag each doc block's item with its page and whether it runs or is marked; the
    tag travels with the test's reports (also from xdist workers)."""
    for item in items:
        example = getattr(item, "example", None)
        if example is not None and isinstance(example.parsed, blocks.Block):
            page = str(Path(example.path).relative_to(ROOT))
            kind = "marked" if example.parsed.marked is not None else "ran"
            item.user_properties.append((PROPERTY, (page, kind)))
            # A page's first block that runs starts its sandbox (seconds when idle, far
            # more on two busy cores); the suite's 60 s default is for one test.
            item.add_marker(pytest.mark.timeout(BLOCK_TIMEOUT_S))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" or not report.passed:
        return
    for name, value in report.user_properties:
        if name == PROPERTY and isinstance(value, list | tuple):  # a list after xdist
            _tally[(str(value[0]), str(value[1]))] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _tally:
        return
    write = terminalreporter.write_line
    terminalreporter.section("executable docs")
    pages = sorted({page for page, _ in _tally})
    for page in pages:
        write(
            f"{page}: {_tally[(page, 'ran')]} ran, {_tally[(page, 'marked')]} marked not run here"
        )
    ran = sum(n for (_, kind), n in _tally.items() if kind == "ran")
    marked = sum(n for (_, kind), n in _tally.items() if kind == "marked")
    write(f"doc blocks: {ran} ran, {marked} marked not run here, in {len(pages)} pages")
