"""Warning headers: the apiserver recorder's rune budget and truncation (``warnheaders``)."""

from __future__ import annotations

from sandbox.kube import warnheaders
from sandbox.kube.warnheaders import ITEM_RUNES, TOTAL_RUNES


def _texts(values: list[bytes]) -> list[str]:
    return [v.decode("utf-8").removeprefix('299 - "').removesuffix('"') for v in values]


def test_warnings_within_the_budget_are_whole() -> None:
    """Rule: while the texts total at most 4096 runes every warning is written whole."""
    texts = ["é" * 2000, "x" * 2000, "y" * 96]
    assert _texts(warnheaders.headers(texts)) == texts


def test_passing_the_budget_cuts_every_warning_to_256_runes() -> None:
    """Rule: the warning that would pass 4096 runes switches to truncating: every text,
    earlier ones included, is cut to its first 256 runes (counted in runes, not bytes)."""
    texts = ["…" * 3000, "b" * 2000, "c" * 10]
    assert _texts(warnheaders.headers(texts)) == ["…" * ITEM_RUNES, "b" * ITEM_RUNES, "c" * 10]


def test_once_truncating_warnings_stop_at_the_budget() -> None:
    """Rule: once truncating, later warnings are added only while fewer than 4096 runes
    were written."""
    texts = [f"{i:03d}" + "z" * 1000 for i in range(40)]
    out = _texts(warnheaders.headers(texts))
    per = ITEM_RUNES
    assert len(out) == -(-TOTAL_RUNES // per)  # the one that reaches the budget is kept
    assert all(len(t) == per for t in out)
    assert out[0].startswith("000")
