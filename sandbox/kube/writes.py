"""Create, update (PUT) and patch, in the apiserver's order (facts §1.3, §3.1, §3.5).

Create: decode → wipe system fields → defaults → in-tree admission → mutating
admission → uid, timestamps, generated name → prepare → validate → store. Update and
patch: combine with the stored object (resourceVersion precondition, immutable
metadata, the ``/status`` split) → admission → generation → validate → store (a
no-op writes nothing).
"""

from __future__ import annotations

import uuid
from typing import Any

from sandbox.kube import encoding, names
from sandbox.kube import meta as m
from sandbox.kube.clone import clone
from sandbox.kube.cluster import Call, Cluster, options_body, present
from sandbox.kube.errors import (
    ETCD_MAX_REQUEST,
    already_exists,
    bad_request,
    check,
    error,
    etcd_too_large,
    invalid,
    invalid_value,
    not_found,
    stale,
)

Obj = dict[str, Any]


def decode(call: Call, body: Any, owned: bool = False) -> Obj:
    """Check a request body's kind, apiVersion and namespace; return the stored form.

    ``owned``: ``body`` belongs to this request alone (decoded from its bytes, or a patch
    result built for it) and is changed in place instead of copied first.
    """
    if not isinstance(body, dict):
        raise bad_request("the body of the request is not a JSON object")
    rtype = call.rtype
    if body.get("apiVersion", rtype.api_version) != rtype.api_version:
        raise bad_request(
            f"the API version in the data ({body.get('apiVersion')}) does not match the expected "
            f"API version ({rtype.api_version})"
        )
    if body.get("kind", rtype.kind) != rtype.kind:
        raise bad_request(
            f"the kind in the data ({body.get('kind')}) does not match the expected kind "
            f"({rtype.kind})"
        )
    obj = body if owned else clone(body)
    obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise bad_request("metadata must be an object")
    if rtype.namespaced:
        if meta.get("namespace") and meta["namespace"] != call.namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        meta["namespace"] = call.namespace
    else:
        meta.pop("namespace", None)
    if not rtype.is_custom:
        m.check_times(obj)
    obj = call.strategy.to_storage(obj)
    call.strategy.default(obj)
    return obj


async def create(cluster: Cluster, call: Call, body: Any) -> Obj:
    """POST to a collection; returns the created object as shown to the caller."""
    obj = decode(call, body)
    ctx = cluster.context(call)
    for key in m.SYSTEM_FIELDS:
        obj["metadata"].pop(key, None)
    obj["metadata"].pop("resourceVersion", None)
    obj = call.strategy.prune(obj, ctx)
    names.require_namespace(cluster, call)
    call.strategy.admit_in_tree(obj, "CREATE")
    shown = present(call, obj)
    admitted = await cluster.admit(call, "CREATE", shown, None, options_body("CreateOptions", call))
    obj = _admitted(call, obj, shown, admitted, ctx)
    return store_new(cluster, call, obj)


def _admitted(call: Call, obj: Obj, shown: Obj, admitted: Obj | None, ctx: Any) -> Obj:
    """The object to store after admission: pruned and defaulted again only when a
    webhook changed it (``obj`` was pruned already; pruning is idempotent)."""
    if admitted is shown and shown is obj:
        return obj
    return call.strategy.prune(call.strategy.to_storage(admitted or obj), ctx)


def store_new(cluster: Cluster, call: Call, obj: Obj) -> Obj:
    """Name, uid, timestamps, prepare, validate and store a new object."""
    ctx = cluster.context(call)
    meta = obj["metadata"]
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = m.format_time(ctx.now)
    if call.strategy.tracks_generation:
        meta["generation"] = 1
    else:
        meta.pop("generation", None)
    call.strategy.prepare_create(obj, ctx)
    generated = not meta.get("name") and bool(meta.get("generateName"))
    if generated:
        meta["name"] = m.generate_name(meta["generateName"])
    validate_new(call, obj)
    group, plural = call.rtype.store_key
    for _attempt in range(8):
        key = (group, plural, call.namespace, meta["name"])
        if cluster.store.get(*key) is None:
            return _commit_create(cluster, call, key, obj)
        if not generated:
            raise already_exists(call.rtype.plural, call.rtype.group, meta["name"])
        meta["name"] = m.generate_name(meta["generateName"])
    raise error(
        409,
        "AlreadyExists",
        f'{call.rtype.plural} "{meta["name"]}" already exists, the server was not able to '
        "generate a unique name for the object",
    )


def check_storable(obj: Obj) -> None:
    """Refuse an object etcd would refuse: its encoding over etcd's default request limit
    (1.5 MiB), with the apiserver's 500 ``etcdserver: request is too large``. The
    emulator measures the object's compact JSON; the apiserver stores built-in kinds as
    protobuf (somewhat smaller) and etcd counts the whole request, key included, so the
    boundary is approximate — the order of magnitude and the answer are the real ones.
    A dry run reaches no etcd and is not checked."""
    if len(encoding.encode(obj)) > ETCD_MAX_REQUEST:
        raise etcd_too_large()


def _commit_create(cluster: Cluster, call: Call, key: tuple[str, str, str, str], obj: Obj) -> Obj:
    if call.dry_run:
        obj["metadata"]["resourceVersion"] = cluster.store.next_resource_version()
        return present(call, obj)
    check_storable(obj)
    stored = cluster.store.put_owned(key, obj)
    names.after_write(cluster, call, stored)
    return present(call, stored)


def validate_new(call: Call, obj: Obj) -> None:
    """Metadata and kind validation of an object about to be created."""
    rtype = call.rtype
    meta = obj["metadata"]
    errors = names.name_errors(rtype, meta.get("name") or "")
    errors += m.validate_labels_annotations(meta)
    errors += call.strategy.validate_create(obj)
    check(rtype.kind, rtype.kind_group, meta.get("name") or "", errors)


#: Times an update starts again from the stored object when that changed while it was
#: admitted (kube-apiserver's GuaranteedUpdate retries its compare-and-swap alike).
UPDATE_ATTEMPTS = 5


class Moved(Exception):
    """The object changed while the write was admitted: decide it again on what is
    stored now (a write never lands on a state it was not decided on)."""


def still_stored(cluster: Cluster, call: Call, old: Obj) -> None:
    """The check of the storage's compare-and-swap, after admission awaited webhooks:
    ``NotFound`` when the object was deleted meanwhile (an update never re-creates it),
    ``Moved`` when another write replaced it."""
    current = cluster.store.peek(*call.key)
    if current is None:
        raise not_found(call.rtype.plural, call.rtype.group, call.name)
    if current is not old:
        raise Moved


async def update(cluster: Cluster, call: Call, body: Any) -> tuple[int, Obj]:
    """PUT (see ``_update``), decided again on the stored object when it changed while
    the write was admitted; a PUT naming a resourceVersion then gets its 409."""
    for _ in range(UPDATE_ATTEMPTS - 1):
        try:
            return await _update(cluster, call, body)
        except Moved:
            continue
    return await _update(cluster, call, body)


async def _update(cluster: Cluster, call: Call, body: Any) -> tuple[int, Obj]:
    """PUT: 200 with the object (201 when a Lease/Event PUT created it).

    ``body`` is this request's own decoding (not copied again, unless a missing object
    may be created from it); the stored object is read in place, never changed.
    """
    obj = decode(call, body, owned=not call.strategy.create_on_update)
    name = obj["metadata"].get("name")
    if name != call.name:
        raise bad_request(
            f"the name of the object ({name}) does not match the name on the URL ({call.name})"
        )
    old = cluster.store.peek(*call.key)
    if old is None:
        if call.strategy.create_on_update and not call.subresource:
            return 201, await create(cluster, call, body)
        raise not_found(call.rtype.plural, call.rtype.group, call.name)
    rv = obj["metadata"].get("resourceVersion")
    if not rv and not call.strategy.unconditional_update:
        rtype = call.rtype
        raise invalid(
            rtype.kind,
            rtype.kind_group,
            call.name,
            [invalid_value("metadata.resourceVersion", 0, "must be specified for an update")],
        )
    if rv and rv != old["metadata"]["resourceVersion"]:
        raise stale(call.rtype.plural, call.rtype.group, call.name)
    return 200, await apply_update(cluster, call, obj, old, {})


async def apply_update(cluster: Cluster, call: Call, new: Obj, old: Obj, options: Obj) -> Obj:
    """Combine ``new`` with the stored ``old``, admit, validate and store.

    ``new`` is this write's own; ``old`` may be the store's object itself (read, never
    changed: what is kept of it is copied by the strategy).
    """
    ctx = cluster.context(call)
    _keep_system_metadata(call, new, old)
    new = call.strategy.prepare_update(new, old, ctx)
    new = call.strategy.prune(new, ctx)
    if not call.subresource:
        call.strategy.admit_in_tree(new, "UPDATE")
    shown = present(call, new)
    admitted = await cluster.admit(
        call, "UPDATE", shown, present(call, old), options_body("UpdateOptions", call, options)
    )
    new = _admitted(call, new, shown, admitted, ctx)
    still_stored(cluster, call, old)
    _keep_system_metadata(call, new, old)
    _bump_generation(call, new, old)
    _validate_update(call, new, old, ctx)
    if _same(new, old):
        return present(call, old)
    if call.dry_run:
        return present(call, new)
    if names.finished_deleting(new):
        removed = cluster.store.remove(call.key)
        return present(call, removed or new)
    check_storable(new)
    stored = cluster.store.put_owned(call.key, new)
    names.after_write(cluster, call, stored)
    return present(call, stored)


def _keep_system_metadata(call: Call, new: Obj, old: Obj) -> None:
    meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
    uid = meta.get("uid")
    if uid and uid != old_meta.get("uid"):
        raise error(
            409,
            "Conflict",
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
            f"{old_meta.get('uid')}",
        )
    for key in ("uid", "creationTimestamp", "generation", "namespace", "name"):
        meta.pop(key, None)
        if key in old_meta:
            meta[key] = old_meta[key]
    if old_meta.get("deletionTimestamp"):
        meta["deletionTimestamp"] = old_meta["deletionTimestamp"]
        meta["deletionGracePeriodSeconds"] = old_meta.get("deletionGracePeriodSeconds")
    elif meta.get("deletionTimestamp") or meta.get("deletionGracePeriodSeconds") is not None:
        raise invalid(
            call.rtype.kind,
            call.rtype.kind_group,
            old_meta["name"],
            [
                invalid_value(
                    "metadata.deletionTimestamp",
                    meta.get("deletionTimestamp"),
                    "field is immutable; may only be changed via deletion",
                )
            ],
        )
    meta["resourceVersion"] = old_meta["resourceVersion"]


def _bump_generation(call: Call, new: Obj, old: Obj) -> None:
    if not call.strategy.tracks_generation:
        return
    skip = {"metadata", "status"} if call.strategy.status_subresource else {"metadata"}
    if {k: v for k, v in new.items() if k not in skip} != {
        k: v for k, v in old.items() if k not in skip
    }:
        new["metadata"]["generation"] = int(old["metadata"].get("generation") or 0) + 1


def _validate_update(call: Call, new: Obj, old: Obj, ctx: Any) -> None:
    rtype = call.rtype
    meta = new["metadata"]
    errors = m.validate_labels_annotations(meta)
    if old["metadata"].get("deletionTimestamp"):
        added = set(meta.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
        if added:
            errors.append(
                invalid_value(
                    "metadata.finalizers",
                    sorted(added),
                    "no new finalizers can be added if the object is being deleted",
                )
            )
    errors += call.strategy.validate_update(new, old, ctx)
    check(rtype.kind, rtype.kind_group, call.name, errors)


def _same(new: Obj, old: Obj) -> bool:
    def strip(obj: Obj) -> Obj:
        copy_ = dict(obj)
        copy_["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
        return copy_

    return strip(new) == strip(old)
