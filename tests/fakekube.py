"""The one in-memory Kubernetes API for unit tests: the gateway's verbs over plain dicts.

It refuses what the apiserver refuses (``kubernetes-facts.md`` §3) with the emulator's
own rules and wording: per-kind behaviour comes from the emulator's strategy table
(``sandbox.kube.cluster.STRATEGIES``), errors are the emulator's ``Status`` bodies
turned into our classes by ``shared.errors.from_status``, as the gateway does, and
patches and selectors use the emulator's code.

- every write bumps one cluster-wide resourceVersion (an integer, as a string); kinds
  that track ``metadata.generation`` (custom resources, pods) get 1 at create and +1
  on each write that changes more than metadata (and status, where the kind has a
  ``/status`` subresource); a client-sent generation is ignored;
- ``create`` of an existing name is 409 AlreadyExists; it assigns a uid, ignores a sent
  resourceVersion and drops a custom resource's status;
- ``replace`` (PUT) of a missing object is 404 (a Lease or an Event is created); a stale
  resourceVersion is 409 Conflict; none at all is 422 for custom resources, Leases and
  webhook configurations (pods, secrets, events take it as unconditional); where a kind
  has a ``/status`` subresource the main resource keeps the stored status and
  ``/status`` changes nothing but the status;
- ``patch`` applies to the current object: a failed JSON Patch ``test`` (or a path that
  is missing) is 422 Invalid, a patched ``metadata.resourceVersion`` that is stale is
  409; a changed uid is 409;
- ``delete`` of a missing object is 404; a ``uid`` precondition that does not hold is
  409. Deletion is immediate (no grace period, no finalizers);
- ``list_all`` filters by namespace, label selector and the field selectors the kind
  supports (any other field is 400).

Test knobs: ``add`` stores an object as is (setup, no rules); ``down`` fails every call
like an unreachable apiserver; ``fail_next`` raises the queued errors one per call;
``faults[verb]`` raises on every call of that verb until removed; ``before[verb]`` runs
once before the next call of that verb (a concurrent writer); either may be keyed
``"<verb> <plural>"`` instead (``"patch pods"``) to touch only that resource's calls;
``yields`` is how often a call yields to the loop first (to interleave concurrent
callers); ``on_write`` sees every stored write. ``calls``, ``gets`` and ``writes`` count
what happened.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sandbox.kube import errors as api
from sandbox.kube import patch as patches
from sandbox.kube import selectors
from sandbox.kube.cluster import STRATEGIES
from sandbox.kube.registry import BUILTIN, META_FIELDS
from sandbox.kube.strategy import ConditionalStrategy, StatusStrategy, Strategy, keep_status
from shared.errors import KubeError, ServerError, from_status
from shared.gateway import ListResult, PatchType, Response
from shared.resources import Resource

Key = tuple[str, str | None, str]
Obj = dict[str, Any]

_BUILTIN = {(t.group, t.plural): t for t in BUILTIN}


class _CustomStrategy(ConditionalStrategy, StatusStrategy):
    """Our custom resource: conditional PUT, status only through ``/status``."""


_CUSTOM = _CustomStrategy()
_GENERIC = Strategy()


def _strategy(res: Resource) -> Strategy:
    if _is_custom(res):
        return _CUSTOM
    return STRATEGIES.get((res.group, res.plural), _GENERIC)


def _is_custom(res: Resource) -> bool:
    return (res.group, res.plural) not in _BUILTIN


class FakeKube:
    """Objects by ``(plural, namespace, name)``; ``namespace`` is None when cluster-scoped."""

    def __init__(self, yields: Callable[[], int] = lambda: 0) -> None:
        self.objects: dict[Key, Obj] = {}
        self.rv = 0
        self.down = False
        self.yields = yields
        self.fail_next: list[Exception] = []
        self.faults: dict[str, Exception] = {}
        self.before: dict[str, Callable[[], object]] = {}
        self.on_write: Callable[[Obj], None] = lambda obj: None
        self.calls: list[tuple[str, str]] = []
        #: The grace period of each delete, by (namespace, name).
        self.graces: dict[tuple[str | None, str], int | None] = {}
        self.gets = 0
        self.writes = 0

    # --- test setup -------------------------------------------------------------------

    def add(self, res: Resource, obj: Obj, namespace: str | None = None) -> Obj:
        """Store ``obj`` as is (no rules, no write counted) with a fresh resourceVersion."""
        stored = copy.deepcopy(obj)
        ns = (namespace or stored["metadata"].get("namespace")) if res.namespaced else None
        self.objects[(res.plural, ns, stored["metadata"]["name"])] = self._bump(stored)
        return copy.deepcopy(stored)

    def read(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        """A copy of the stored object (KeyError when absent)."""
        return copy.deepcopy(self.objects[(res.plural, namespace, name)])

    def items(self, res: Resource, namespace: str | None = None) -> list[Obj]:
        """Copies of the stored objects of ``res`` (in one namespace, or all), by key."""
        return [
            copy.deepcopy(o)
            for (plural, ns, _), o in sorted(self.objects.items(), key=lambda kv: str(kv[0]))
            if plural == res.plural and (namespace is None or ns == namespace)
        ]

    # --- the verbs --------------------------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        await self._enter("get", res)
        self.gets += 1
        return copy.deepcopy(self._current(res, name, namespace))

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ListResult:
        await self._enter("list", res)
        rtype = _BUILTIN.get((res.group, res.plural))
        with _as_kube_error():
            wanted = selectors.parse_labels(label_selector)
            fields = selectors.parse_fields(
                field_selector, rtype.field_labels if rtype else META_FIELDS
            )
        items = [
            o
            for o in self.items(res, namespace)
            if selectors.labels_match(wanted, o) and selectors.fields_match(fields, o)
        ]
        return ListResult(items, str(self.rv))

    async def create(
        self, res: Resource, body: Obj, namespace: str | None = None, dry_run: bool = False
    ) -> Response:
        await self._enter("create", res)
        return Response(self._insert(res, body, namespace, dry_run))

    async def replace(
        self,
        res: Resource,
        name: str,
        body: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        await self._enter("replace", res)
        strategy = _strategy(res)
        sent_name = (body.get("metadata") or {}).get("name")
        if sent_name != name:
            raise _error(
                api.bad_request(
                    f"the name of the object ({sent_name}) does not match the name on the URL "
                    f"({name})"
                )
            )
        if (
            (res.plural, namespace, name) not in self.objects
            and strategy.create_on_update
            and not subresource
        ):
            return self._insert(res, body, namespace)
        current = self._current(res, name, namespace)
        sent = body["metadata"].get("resourceVersion")
        if not sent and not strategy.unconditional_update:
            field = api.invalid_value(
                "metadata.resourceVersion", 0, "must be specified for an update"
            )
            raise _error(api.invalid(res.kind, res.group, name, [field]))
        if sent and sent != current["metadata"]["resourceVersion"]:
            raise _error(api.stale(res.plural, res.group, name))
        new = self._combine(res, copy.deepcopy(body), current, subresource)
        return self._store((res.plural, namespace, name), new)

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: dict[str, Any] | list[dict[str, Any]],
        namespace: str | None = None,
        patch_type: PatchType = "json",
        subresource: str | None = None,
        read_answer: bool = True,
    ) -> Obj:
        """A JSON, merge or strategic merge patch; the object as patched (also with
        ``read_answer=False``: the caller ignores it)."""
        await self._enter("patch", res)
        current = self._current(res, name, namespace)
        with _as_kube_error():
            if patch_type == "json":
                new = patches.json_patch(current, patch)
            elif patch_type == "merge":
                new = patches.merge_patch(current, patch)
            elif _is_custom(res):
                raise api.unsupported_media(["application/json-patch+json"])
            else:
                new = patches.strategic_merge(copy.deepcopy(current), patch)
        sent = (new.get("metadata") or {}).get("resourceVersion")
        if sent and sent != current["metadata"]["resourceVersion"]:
            raise _error(api.stale(res.plural, res.group, name))
        new = self._combine(res, new, current, subresource)
        return self._store((res.plural, namespace, name), new)

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        grace_period_s: int | None = None,
        uid: str | None = None,
    ) -> Obj:
        await self._enter("delete", res)
        current = self._current(res, name, namespace)
        held = current["metadata"].get("uid")
        if uid and uid != held:
            why = (
                f"the UID in the precondition ({uid}) does not match the UID in record "
                f"({held}). The object might have been deleted and then recreated"
            )
            raise _error(api.conflict(res.plural, res.group, name, why))
        del self.objects[(res.plural, namespace, name)]
        self.graces[(namespace, name)] = grace_period_s
        if _is_custom(res):
            details = {"name": name, "group": res.group, "kind": res.plural, "uid": held}
            return api.success_status(200, details)
        return copy.deepcopy(current)

    # --- plumbing ---------------------------------------------------------------------

    async def _enter(self, verb: str, res: Resource) -> None:
        self.calls.append((verb, res.plural))
        if self.down:
            raise ServerError(0, "connection refused")
        narrow = f"{verb} {res.plural}"
        hook = self.before.pop(verb, None) or self.before.pop(narrow, None)
        if hook is not None:
            hook()
        for _ in range(self.yields()):
            await asyncio.sleep(0)
        if self.fail_next:
            raise self.fail_next.pop(0)
        fault = self.faults.get(verb) or self.faults.get(narrow)
        if fault is not None:
            raise fault

    def _insert(
        self, res: Resource, body: Obj, namespace: str | None, dry_run: bool = False
    ) -> Obj:
        """A new object: the name must be free; the server sets uid and namespace."""
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        key = (res.plural, namespace if res.namespaced else None, meta.get("name", ""))
        if key in self.objects:
            raise _error(api.already_exists(res.plural, res.group, key[2]))
        meta.pop("resourceVersion", None)
        meta["uid"] = str(uuid.uuid4())
        if _strategy(res).tracks_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if res.namespaced and namespace:
            meta["namespace"] = namespace
        if _is_custom(res):
            obj.pop("status", None)
        return obj if dry_run else self._store(key, obj)

    def _current(self, res: Resource, name: str, namespace: str | None) -> Obj:
        obj = self.objects.get((res.plural, namespace, name))
        if obj is None:
            raise _error(api.not_found(res.plural, res.group, name))
        return obj

    def _combine(self, res: Resource, new: Obj, current: Obj, subresource: str | None) -> Obj:
        """The object a write stores: system metadata kept, status split as the kind does."""
        meta, held = new.setdefault("metadata", {}), current["metadata"]
        if meta.get("uid") and meta["uid"] != held.get("uid"):
            message = (
                f"Precondition failed: UID in precondition: {meta['uid']}, "
                f"UID in object meta: {held.get('uid')}"
            )
            raise _error(api.error(409, "Conflict", message))
        for key in ("uid", "creationTimestamp", "generation", "namespace", "name"):
            meta.pop(key, None)
            if key in held:
                meta[key] = held[key]
        strategy = _strategy(res)
        if not strategy.status_subresource:
            combined = new
        elif subresource != "status":
            combined = keep_status(new, current)
        else:
            combined = copy.deepcopy(current)
            combined.pop("status", None)
            if "status" in new:
                combined["status"] = new["status"]
        if strategy.tracks_generation and _spec_changed(strategy, combined, current):
            combined["metadata"]["generation"] = int(held.get("generation") or 0) + 1
        return combined

    def _store(self, key: Key, obj: Obj) -> Obj:
        self.objects[key] = self._bump(obj)
        self.writes += 1
        self.on_write(copy.deepcopy(obj))
        return copy.deepcopy(obj)

    def _bump(self, obj: Obj) -> Obj:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return obj


def _spec_changed(strategy: Strategy, new: Obj, old: Obj) -> bool:
    """Whether a write changes anything ``metadata.generation`` counts: all but metadata,
    and but status where the kind has a ``/status`` subresource (facts §3.1)."""
    skip = {"metadata", "status"} if strategy.status_subresource else {"metadata"}
    return {k: v for k, v in new.items() if k not in skip} != {
        k: v for k, v in old.items() if k not in skip
    }


def _error(exc: api.ApiError) -> KubeError:
    """The emulator's refusal as the gateway reports it."""
    return from_status(exc.code, exc.status)


@contextmanager
def _as_kube_error() -> Iterator[None]:
    """Re-raise an emulator ``ApiError`` as our error class."""
    try:
        yield
    except api.ApiError as exc:
        raise _error(exc) from None
