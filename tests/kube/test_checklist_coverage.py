"""The "Checklist coverage" table of docs/developer/sandbox.md cannot rot.

Every item 1–40 of the facts' "Checklist for a faithful emulator" has a row; a row names
tests (``tests/<pkg>/test_x.py::test_name``) or says ``not applicable: <why>``; every
named test exists (module imported, function looked up) and states its rule in a
docstring.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "developer" / "sandbox.md"
HEADING = "### Checklist coverage"
ITEMS = range(1, 41)
_ROW = re.compile(r"^\|\s*(\d+)\s*\|(.*)\|(.*)\|\s*$")
_TEST = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def _rows() -> dict[int, str]:
    """Item number → the row's last (tests) cell, from the coverage section only."""
    text = DOC.read_text(encoding="utf-8")
    assert text.count(HEADING) == 1, f"{DOC} needs exactly one {HEADING!r} section"
    section = text.split(HEADING, 1)[1]
    section = re.split(r"^#{1,3} ", section, maxsplit=1, flags=re.MULTILINE)[0]
    rows: dict[int, str] = {}
    for line in section.splitlines():
        match = _ROW.match(line)
        if match:
            number = int(match.group(1))
            assert number not in rows, f"item {number} is listed twice"
            rows[number] = match.group(3).strip()
    return rows


def _function(path: str, name: str) -> object:
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    return getattr(module, name, None)


def test_every_checklist_item_is_listed_once() -> None:
    """Rule: the table lists each checklist item 1–40, and nothing else."""
    assert sorted(_rows()) == list(ITEMS)


def test_every_item_names_tests_or_says_why_not() -> None:
    """Rule: a row names at least one test or says ``not applicable: <why>``."""
    bare = [
        number
        for number, cell in _rows().items()
        if not _TEST.search(cell) and not cell.lower().startswith("not applicable:")
    ]
    assert bare == [], f"items without tests or a reason: {bare}"


def test_every_named_test_exists_and_states_its_rule() -> None:
    """Rule: each named test function exists in its module and has a docstring."""
    missing: list[str] = []
    undocumented: list[str] = []
    for number, cell in _rows().items():
        for path, name in _TEST.findall(cell):
            function = _function(path, name)
            if not callable(function):
                missing.append(f"{number}: {path}::{name}")
            elif not (getattr(function, "__doc__", None) or "").strip():
                undocumented.append(f"{number}: {path}::{name}")
    assert missing == [], f"named tests that do not exist: {missing}"
    assert undocumented == [], f"named tests without a rule docstring: {undocumented}"
