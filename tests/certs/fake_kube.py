"""An in-memory stand-in for the gateway that enforces the rules ``certs.apply`` meets.

Create refuses an existing name (409), replace refuses a stale resourceVersion (409),
a JSON Patch whose ``test`` fails is 422, every write bumps the resourceVersion. Tests
can run a hook just before a write, to play a concurrent writer.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jsonpatch

from shared.errors import Conflict, Invalid, NotFound
from shared.gateway import PatchType, Response
from shared.resources import Resource

Key = tuple[str, str | None, str]


class FakeKube:
    """Objects by (plural, namespace, name); ``writes`` counts successful writes."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.writes = 0
        self._version = 100
        #: Called once (then cleared) before the next write of that verb.
        self.before: dict[str, Callable[[], None]] = {}

    def put(self, res: Resource, body: dict[str, Any], namespace: str | None = None) -> None:
        """Store an object directly (test setup), with a fresh resourceVersion."""
        stored = copy.deepcopy(body)
        stored.setdefault("metadata", {})["resourceVersion"] = self._next()
        self.objects[(res.plural, namespace, stored["metadata"]["name"])] = stored

    def read(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return copy.deepcopy(self.objects[(res.plural, namespace, name)])

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        try:
            return self.read(res, name, namespace)
        except KeyError:
            raise NotFound(404, f"{res.plural} {name!r} not found", "NotFound") from None

    async def create(
        self,
        res: Resource,
        body: dict[str, Any],
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> Response:
        self._hook("create")
        key = (res.plural, namespace, body["metadata"]["name"])
        if key in self.objects:
            raise Conflict(409, "already exists", "AlreadyExists")
        self.put(res, body, namespace)
        self.writes += 1
        return Response(self.read(res, key[2], namespace))

    async def replace(
        self,
        res: Resource,
        name: str,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        self._hook("replace")
        current = await self.get(res, name, namespace)
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "the object has been modified", "Conflict")
        self.put(res, body, namespace)
        self.writes += 1
        return self.read(res, name, namespace)

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: dict[str, Any] | list[dict[str, Any]],
        namespace: str | None = None,
        patch_type: PatchType = "json",
        subresource: str | None = None,
    ) -> dict[str, Any]:
        assert patch_type == "json"
        assert isinstance(patch, list)
        self._hook("patch")
        current = await self.get(res, name, namespace)
        try:
            patched = jsonpatch.apply_patch(current, patch)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise Invalid(422, str(exc), "Invalid") from None
        self.put(res, patched, namespace)
        self.writes += 1
        return self.read(res, name, namespace)

    def _hook(self, verb: str) -> None:
        hook = self.before.pop(verb, None)
        if hook is not None:
            hook()

    def _next(self) -> str:
        self._version += 1
        return str(self._version)
