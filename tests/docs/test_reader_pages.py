"""User and operator pages state the product as it is: no history of the work, no
references to notes a reader cannot open (issues, requirement ids, the handbook)."""

from __future__ import annotations

import re

import pytest

from tests.docs import pages as docs

# What a page for a GPU user or an operator must not say, and why.
FORBIDDEN = {
    r"\bissues? \d+": "an issue number: the history belongs in git",
    r"\blater issues?\b|\bnot built\b|\bnot yet built\b|\bused to\b": "what is not built, or was",
    r"(?-i:\bR\d{1,2}\b)": "a requirement id from the working notes",
    r"kubernetes-facts|DESIGN §|reservation-api\.md": "a handbook reference",
    r"\b(?:session|helper)s?\b": "words of the working process, not of the product",
}


def reader_pages() -> list[str]:
    return [
        str(page.relative_to(docs.ROOT))
        for page in docs.pages()
        if page.parent.name in ("user", "operator")
    ]


def offences(text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for pattern, why in FORBIDDEN.items():
            match = re.search(pattern, line, flags=re.IGNORECASE)
            if match is not None:
                found.append(f"{number}: {match[0]!r}: {why}")
    return found


@pytest.mark.parametrize("page", reader_pages())
def test_reader_page_tells_no_history(page: str) -> None:
    assert offences((docs.ROOT / page).read_text(encoding="utf-8")) == []


def test_history_is_caught() -> None:
    text = "Fine.\nThe audit comes with issue 11 (R14).\nSee kubernetes-facts §1.8.\n"
    assert [o.split(":")[0] for o in offences(text)] == ["2", "2", "3"]


#: The benchmark page holds today's figures, each with its command; history is git's.
PERFORMANCE_LINES = 400


def test_the_performance_page_holds_current_figures_only() -> None:
    page = docs.ROOT / "docs" / "developer" / "performance.md"
    lines = page.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= PERFORMANCE_LINES, f"{len(lines)} lines: keep current figures only"
