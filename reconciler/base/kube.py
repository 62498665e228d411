"""What the reconciler's components need of the Kubernetes API, as Protocols.

``shared.gateway.Gateway`` satisfies each of them, and so do the test doubles; a
component names the narrowest that covers its calls, so a type checker sees every call
it makes (and a double that lacks one):

- ``KubeReader``: GET one object, LIST every page (the fresh reads before acting);
- ``KubeWriter``: besides, the writes — POST, PUT, PATCH, DELETE — which covers the
  ledger's (``shared.ledger.LedgerGateway``) and the Event writer's
  (``reconciler.base.events.RecorderGateway``);
- ``KubeWatcher``: a writer that also watches (``shared.watch.WatchGateway``): the
  leader's caches.
"""

from __future__ import annotations

from typing import Any, Protocol

from reconciler.base.events import RecorderGateway
from shared.gateway import ListResult
from shared.ledger import LedgerGateway
from shared.resources import Resource
from shared.watch import WatchGateway


class KubeReader(Protocol):
    """GET and LIST."""

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        """GET one object."""
        ...

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ListResult:
        """LIST every page."""
        ...


class KubeWriter(KubeReader, LedgerGateway, RecorderGateway, Protocol):
    """The reads, and every write a component of the reconciler makes."""

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        grace_period_s: int | None = None,
        uid: str | None = None,
    ) -> dict[str, Any]:
        """DELETE one object (``uid``: only that very object)."""
        ...


class KubeWatcher(KubeWriter, WatchGateway, Protocol):
    """A writer that watches: what the leader's caches and their upkeep need."""
