"""An in-memory Kubernetes API for reconciler unit tests (the gateway's verbs).

Enforces what the reconciler relies on: resourceVersion on every write, 409 on a stale
one, 409 AlreadyExists, status only through ``/status`` for custom resources, status
dropped on create. ``down`` makes every call fail like an unreachable apiserver.
"""

from __future__ import annotations

import copy
from typing import Any

from shared.errors import Conflict, Invalid, NotFound, ServerError
from shared.gateway import ListResult, Response
from shared.resources import GPU_RESERVATIONS, Resource


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.rv = 0
        self.down = False
        self.calls: list[tuple[str, str]] = []

    def _check(self, verb: str, res: Resource) -> None:
        self.calls.append((verb, res.plural))
        if self.down:
            raise ServerError(0, "connection refused")

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return obj

    def add(self, res: Resource, obj: dict[str, Any], namespace: str | None = None) -> None:
        ns = namespace or obj["metadata"].get("namespace")
        self.objects[(res.plural, ns, obj["metadata"]["name"])] = self._bump(copy.deepcopy(obj))

    def items(self, res: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(o)
            for (plural, ns, _), o in sorted(self.objects.items(), key=lambda kv: str(kv[0]))
            if plural == res.plural and (namespace is None or ns == namespace)
        ]

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        self._check("get", res)
        obj = self.objects.get((res.plural, namespace, name))
        if obj is None:
            raise NotFound(404, f'{res.plural} "{name}" not found', "NotFound")
        return copy.deepcopy(obj)

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ListResult:
        self._check("list", res)
        items = self.items(res, namespace)
        if label_selector:
            items = [i for i in items if label_selector in (i["metadata"].get("labels") or {})]
        return ListResult(items, str(self.rv))

    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None, dry_run=False
    ) -> Response:
        self._check("create", res)
        key = (res.plural, namespace, body["metadata"]["name"])
        if key in self.objects:
            raise Conflict(409, "already exists", "AlreadyExists")
        obj = copy.deepcopy(body)
        obj["metadata"].pop("resourceVersion", None)
        if res == GPU_RESERVATIONS:
            obj.pop("status", None)
        self.objects[key] = self._bump(obj)
        return Response(copy.deepcopy(obj))

    async def replace(
        self,
        res: Resource,
        name: str,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        self._check("replace", res)
        key = (res.plural, namespace, name)
        current = self.objects.get(key)
        if current is None:
            raise NotFound(404, "not found", "NotFound")
        sent = (body.get("metadata") or {}).get("resourceVersion")
        if not sent:
            raise Invalid(422, "metadata.resourceVersion: must be specified", "Invalid")
        if sent != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "the object has been modified", "Conflict")
        new = copy.deepcopy(current)
        if res == GPU_RESERVATIONS and subresource == "status":
            new["status"] = copy.deepcopy(body.get("status"))
        elif res == GPU_RESERVATIONS:
            new["spec"] = copy.deepcopy(body.get("spec"))
        else:
            new = copy.deepcopy(body)
        self.objects[key] = self._bump(new)
        return copy.deepcopy(new)

    async def delete(
        self, res: Resource, name: str, namespace: str | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        self._check("delete", res)
        if self.objects.pop((res.plural, namespace, name), None) is None:
            raise NotFound(404, "not found", "NotFound")
        return {"kind": "Status", "status": "Success"}
