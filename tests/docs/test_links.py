"""Every relative link in README.md and docs/ resolves, anchors included, and the
README's documentation table lists each page once, under one reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs import pages as docs


def test_every_relative_link_resolves() -> None:
    checked = [link for page in docs.pages() for link in docs.links(page)]
    assert len(checked) > 50, "the link reader found almost no links"
    failures = [
        f"{link.page.relative_to(docs.ROOT)}:{link.line}: {link.target}: {why}"
        for link in checked
        if (why := docs.broken(link)) is not None
    ]
    assert failures == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("The proof-of-admission backstop (DESIGN §3)", "the-proof-of-admission-backstop-design-3"),
        (
            "Users (`<release>-reservation-reader`, `userAccess.enabled`)",
            "users-release-reservation-reader-useraccessenabled",
        ),
        (
            "Health and metrics (plain HTTP, `WEBHOOK_HEALTH_PORT`)",
            "health-and-metrics-plain-http-webhook_health_port",
        ),
        ("6.1 Admission and guarantee", "61-admission-and-guarantee"),
    ],
    ids=["section-sign", "backticks-and-dots", "underscores-kept", "numbered"],
)
def test_anchor_is_github_slug(heading: str, anchor: str) -> None:
    assert docs.slug(heading) == anchor


def test_a_broken_link_and_a_broken_anchor_are_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Present heading\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[a](other.md#present-heading) [b](missing.md) [c](other.md#absent)\n"
        "```\n[not a link](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    found = docs.links(page)
    assert [link.target for link in found] == [
        "other.md#present-heading",
        "missing.md",
        "other.md#absent",
    ]
    assert [docs.broken(link) is None for link in found] == [True, False, False]


def test_readme_table_lists_each_page_once_under_one_reader() -> None:
    readme = (docs.ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Documentation") :]
    rows = [line.split("|")[1:3] for line in table.splitlines() if line.startswith("| ")]
    listed = [
        (reader.strip(), target) for reader, cell in rows[1:] for target in docs.links_in(cell)
    ]
    targets = [target for _, target in listed]
    pages = sorted(str(p.relative_to(docs.ROOT)) for p in (docs.ROOT / "docs").rglob("*.md"))
    assert sorted(targets) == pages
    for reader, target in listed:
        folder = Path(target).parts[1]
        assert folder in docs.READERS, target
        assert reader.startswith({"user": "GPU user"}.get(folder, folder)), (reader, target)
