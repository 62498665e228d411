"""A claim engine over the ledger's fake store, with the cache reduced to what the
engine asks of it: the object to decide on first, and a word when a write ends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shared import model
from shared.ledger import ClaimResult
from tests.ledger.fakes import NAMESPACE, FakeStore
from webhook.claims.engine import ClaimEngine
from webhook.claims.entries import Entry
from webhook.claims.journal import Journal


class StoreLedgers:
    """``webhook.claims.engine.Ledgers`` without a watch: ``cached(name)`` is the raw
    object a write decides on first (None: the ledger GETs it), ``told`` hears each
    write's result."""

    def __init__(
        self,
        cached: Callable[[str], dict[str, Any] | None],
        told: Callable[[ClaimResult], None],
    ) -> None:
        self.journal = Journal()
        self._cached = cached
        self._told = told

    def entry(self, name: str) -> Entry | None:
        raw = self._cached(name)
        return None if raw is None else Entry(model.from_object(raw), raw)

    def landed(self, result: ClaimResult) -> None:
        self._told(result)


def engine_on(
    store: FakeStore,
    cached: Callable[[str], dict[str, Any] | None] = lambda name: None,
    told: Callable[[ClaimResult], None] = lambda result: None,
    **kwargs: Any,
) -> ClaimEngine:
    return ClaimEngine(store, StoreLedgers(cached, told), NAMESPACE, **kwargs)
