"""The documentation's pages and the links between them, read as GitHub renders them.

Terms: a *page* is README.md or a Markdown file under docs/; a *link* is a Markdown
inline link ``[text](target)`` outside fenced code; an *anchor* is the fragment GitHub
derives from a heading (lower-cased, punctuation but ``-`` and ``_`` dropped, spaces to
``-``, a repeated heading suffixed ``-1``, ``-2`` …). No side effects but reading files.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READERS = ("user", "operator", "developer")

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Link:
    page: Path
    line: int
    target: str


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/, sorted."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) for every line outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def links(page: Path) -> list[Link]:
    """Every inline link of the page, outside code blocks and inline code spans."""
    found = []
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        for match in _LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            found.append(Link(page, number, match[1]))
    return found


def links_in(text: str) -> list[str]:
    """The targets of the inline links in one piece of prose."""
    return [match[1] for match in _LINK.finditer(re.sub(r"`[^`]*`", "", text))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (without the duplicate suffix)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor the page's headings give, duplicates suffixed as GitHub does."""
    seen: dict[str, int] = {}
    result = set()
    for _, line in prose_lines(page.read_text(encoding="utf-8")):
        heading = _HEADING.match(line)
        if heading is None:
            continue
        base = slug(heading[2])
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken(link: Link) -> str | None:
    """Why a relative link does not resolve, or None when it does (or is absolute)."""
    target = link.target
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return None  # https:, mailto: — not ours to check offline
    path_part, _, anchor = target.partition("#")
    path = (link.page.parent / path_part).resolve() if path_part else link.page
    if not path.exists():
        return f"no file {path_part}"
    if anchor and path.suffix == ".md" and anchor not in anchors(path):
        return f"no heading for #{anchor} in {path.name}"
    return None
