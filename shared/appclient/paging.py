"""Pulling an offset-paged list completely, or not at all (§1.7, §1.8).

Offset paging is not snapshot-consistent: a row inserted, removed or moved before the
current offset between two page requests shifts every later row, so a naive loop
sees one row twice and silently misses another. De-duplicating by id removes the
duplicate but not the loss. We therefore request pages that **overlap by one row**:
page *n+1* starts at the last row of page *n*. If that row is not where we left it,
the list shifted under us and the pass is discarded and restarted from offset 0
(at most ``max_passes`` times, then the pull fails as ``UNSTABLE``). A pass that
completes without a shift is a consistent listing; within it rows are still
de-duplicated by id, last one wins.

A page that fails after its own retries fails the whole pull: callers never see a
partial list.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

from shared.appclient.outcomes import Failure, Transient, TransientReason

T = TypeVar("T")

#: ``fetch(offset, limit)`` → the rows of that page, or why it failed.
PageFetcher = Callable[[int, int], Awaitable[list[T] | Failure]]


class _Shifted(Exception):
    """The overlap row moved: this pass is inconsistent."""


async def pull_all(
    fetch: PageFetcher[T],
    key: Callable[[T], Hashable],
    page_size: int = 200,
    max_passes: int = 3,
) -> list[T] | Failure:
    """Every row of the list, in listing order, each id once; or the first failure."""
    if page_size < 2:
        raise ValueError("page_size must be at least 2 (pages overlap by one row)")
    for _ in range(max_passes):
        try:
            return await _one_pass(fetch, key, page_size)
        except _Shifted:
            continue
        except _PageFailed as failed:
            return failed.failure
    return Transient(TransientReason.UNSTABLE, f"list kept shifting over {max_passes} passes")


class _PageFailed(Exception):
    def __init__(self, failure: Failure) -> None:
        self.failure = failure


async def _one_pass(fetch: PageFetcher[T], key: Callable[[T], Hashable], page_size: int) -> list[T]:
    rows: dict[Hashable, T] = {}
    offset = 0
    anchor: Hashable | None = None
    while True:
        page = await fetch(offset, page_size)
        if not isinstance(page, list):
            raise _PageFailed(page)
        if anchor is not None and (not page or key(page[0]) != anchor):
            raise _Shifted
        for row in page:
            rows.pop(key(row), None)
            rows[key(row)] = row
        if len(page) < page_size:
            return list(rows.values())
        anchor = key(page[-1])
        offset += page_size - 1
