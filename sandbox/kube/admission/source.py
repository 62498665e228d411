"""Where the dispatcher reads cluster state: the API server's own storage.

The apiserver reads webhook configurations, namespaces, services and endpoints from its
storage, not through its HTTP API; ``ObjectSource`` is that read access. The server
module provides the in-process implementation; tests may pass a dict-backed one. What
a source returns is read by the dispatch, never changed.
"""

from __future__ import annotations

from typing import Any, Protocol


class ObjectSource(Protocol):
    """Read-only access to stored objects (``group`` is ``""`` for the core group)."""

    async def get(
        self, group: str, resource: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """One object, or None when it does not exist."""
        ...

    async def list(self, group: str, resource: str) -> list[dict[str, Any]]:
        """Every object of a (cluster-scoped) resource."""
        ...


class MemorySource:
    """An ``ObjectSource`` over plain dicts, keyed ``(group, resource, namespace, name)``."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}

    def put(self, group: str, resource: str, obj: dict[str, Any]) -> None:
        """Store ``obj`` under its metadata namespace and name."""
        meta = obj.get("metadata") or {}
        key = (group, resource, str(meta.get("namespace") or ""), str(meta.get("name", "")))
        self.objects[key] = obj

    async def get(
        self, group: str, resource: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        return self.objects.get((group, resource, namespace or "", name))

    async def list(self, group: str, resource: str) -> list[dict[str, Any]]:
        return [o for (g, r, _, _), o in self.objects.items() if (g, r) == (group, resource)]


class SyncStore(Protocol):
    """The server's in-process store (synchronous reads; ``peek`` without a copy)."""

    def get(self, group: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def peek(self, group: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def peek_list(
        self, group: str, plural: str, namespace: str | None = None
    ) -> list[dict[str, Any]]: ...

    def list(
        self, group: str, plural: str, namespace: str | None = None
    ) -> list[dict[str, Any]]: ...

    def written(self, group: str, plural: str) -> int: ...


class StoreSource:
    """An ``ObjectSource`` reading the API server's own store. ``get`` hands out the
    stored object itself: the dispatch only reads what it gets (a namespace's labels,
    a Service and its Endpoints, on every call), and copying them cost more than
    reading them."""

    def __init__(self, store: SyncStore) -> None:
        self._store = store

    async def get(
        self, group: str, resource: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        return self._store.peek(group, resource, namespace or "", name)

    async def list(self, group: str, resource: str) -> list[dict[str, Any]]:
        return self._store.list(group, resource)

    async def stamp(self, group: str, resource: str) -> int:
        """What identifies the current objects of a resource: any write, delete or
        re-creation changes it (the resourceVersion of the resource's latest write, which
        every write raises; read without looking at the objects)."""
        return self._store.written(group, resource)
