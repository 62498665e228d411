"""PATCH requests: pick the patch flavour by Content-Type, apply to the stored object.

A patch applies to the current object, so it never conflicts, unless the patched
result carries a different ``metadata.resourceVersion`` (a precondition → 409). Custom
resources refuse strategic merge with 415; ``; charset=...`` suffixes are ignored.
``application/apply-patch+yaml`` is a simplified server-side apply: a merge of the
applied configuration, creating the object when it is missing.
"""

from __future__ import annotations

from typing import Any

import yaml

from sandbox.kube import encoding
from sandbox.kube import patch as p
from sandbox.kube.cluster import Call, Cluster, present
from sandbox.kube.errors import bad_request, invalid, not_found, required, stale, unsupported_media
from sandbox.kube.registry import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH
from sandbox.kube.writes import UPDATE_ATTEMPTS, Moved, apply_update, create, decode

Obj = dict[str, Any]


def media_type(header: str | None) -> str:
    """The Content-Type without parameters."""
    return (header or "").split(";", 1)[0].strip().lower()


def _parse(raw: bytes, kind: str) -> Any:
    try:
        if kind == APPLY_PATCH:
            loaded = encoding.refuse_non_finite(yaml.safe_load(raw.decode()))
            return encoding.replace_lone_surrogates(loaded)
        return encoding.decode(raw)
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"error decoding patch: {exc}") from exc


async def patch(
    cluster: Cluster, call: Call, raw: bytes, content_type: str | None
) -> tuple[int, Obj]:
    """Apply a PATCH; returns (status code, object)."""
    kind = media_type(content_type)
    if kind not in call.rtype.patch_types():
        raise unsupported_media(call.rtype.patch_types())
    body = _parse(raw, kind)
    for _ in range(UPDATE_ATTEMPTS - 1):
        try:
            return await _patch(cluster, call, kind, body)
        except Moved:  # stored anew while admitted: apply the patch to what is stored
            continue
    return await _patch(cluster, call, kind, body)


async def _patch(cluster: Cluster, call: Call, kind: str, body: Any) -> tuple[int, Obj]:
    old = cluster.store.peek(*call.key)  # read only: the patch applies to a copy
    if kind == APPLY_PATCH:
        if not call.query.get("fieldManager"):
            rtype = call.rtype
            raise invalid(
                rtype.kind,
                rtype.kind_group,
                call.name,
                [required("fieldManager", "is required for apply requests")],
            )
        if old is None and not call.subresource:
            if isinstance(body, dict):
                body.setdefault("metadata", {}).setdefault("name", call.name)
            return 201, await create(cluster, call, body)
    if old is None:
        raise not_found(call.rtype.plural, call.rtype.group, call.name)
    current = present(call, old)
    patched = _apply(kind, current, body, share=call.rtype.is_custom)
    if patched.get("metadata") is current.get("metadata"):  # shared: changed below
        patched["metadata"] = dict(current["metadata"])
    _precondition(call, patched, old)
    new = decode(call, patched, owned=True)
    return 200, await apply_update(cluster, call, new, old, {})


def patched_view(call: Call, current: Obj, raw: bytes, content_type: str | None) -> Obj:
    """``current`` (a view such as a Scale) with a PATCH body applied, as a new object
    (server-side apply excepted: 415 for a view)."""
    kind = media_type(content_type)
    accepted = [t for t in call.rtype.patch_types() if t != APPLY_PATCH]
    if kind not in accepted:
        raise unsupported_media(accepted)
    return _apply(kind, current, _parse(raw, kind))


def _apply(kind: str, current: Obj, body: Any, share: bool = False) -> Obj:
    """The patched object: a new one, sharing nothing with ``current`` (each flavour
    copies what it keeps) — except, with ``share``, what a JSON Patch leaves unchanged.
    Custom resources share: their update path takes only ``status`` (a ``/status``
    write, which pruning copies) or copies the whole object (the main resource), and
    changes nothing else of it in place but the top level and ``metadata``."""
    if kind == JSON_PATCH:
        return p.json_patch(current, body, share)
    if not isinstance(body, dict):
        raise bad_request("the patch must be a JSON object")
    if kind == STRATEGIC_PATCH:
        return p.strategic_merge(current, body)
    assert kind in (MERGE_PATCH, APPLY_PATCH)
    result = p.merge_patch(current, body)
    return result if isinstance(result, dict) else {}


def _precondition(call: Call, patched: Obj, old: Obj) -> None:
    meta = patched.get("metadata")
    if not isinstance(meta, dict):
        raise bad_request("metadata must be an object")
    rv = meta.get("resourceVersion")
    if rv and rv != old["metadata"]["resourceVersion"]:
        raise stale(call.rtype.plural, call.rtype.group, call.name)
    meta["resourceVersion"] = old["metadata"]["resourceVersion"]
    if meta.get("name", call.name) != call.name:
        raise bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL "
            f"({call.name})"
        )
