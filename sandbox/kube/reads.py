"""GET and LIST: selectors, pagination with consistent snapshots (facts §3.3).

A LIST with ``limit`` returns at most that many items and a ``continue`` token when
more remain; later pages come from a snapshot taken at the first page, so every page
shows the same resourceVersion. A token whose snapshot was compacted is a 410 Expired
with a fresh token in the Status.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from sandbox.kube import selectors as sel
from sandbox.kube.clone import clone
from sandbox.kube.cluster import Call, Cluster, present
from sandbox.kube.errors import bad_request, gone, not_found

Obj = dict[str, Any]

#: events.k8s.io field labels → the stored (core) field.
_NEW_EVENT_FIELDS = {"reportingController": "reportingComponent"}


def get(cluster: Cluster, call: Call) -> Obj:
    """GET one object (404 when missing): the stored object itself when the resource
    shows it as stored, to be encoded, not changed."""
    obj = cluster.store.peek(*call.key)
    if obj is None:
        raise not_found(call.rtype.plural, call.rtype.group, call.name)
    return present(call, obj)


def field_getter(call: Call) -> sel.FieldGetter:
    """How field labels are read for the requested resource."""
    if call.rtype.storage == ("", "events"):

        def new_event_field(obj: Obj, name: str) -> str:
            name = _NEW_EVENT_FIELDS.get(name, name)
            if name.startswith("regarding."):
                name = "involvedObject." + name.split(".", 1)[1]
            return sel.default_field(obj, name)

        return new_event_field
    return sel.default_field


def matcher(call: Call) -> Callable[[Obj], bool]:
    """Whether a stored object matches the call's label and field selectors."""
    labels = sel.parse_labels(call.query.get("labelSelector"))
    fields = sel.parse_fields(call.query.get("fieldSelector"), call.rtype.field_labels)
    getter = field_getter(call)

    def matches(obj: Obj) -> bool:
        return sel.labels_match(labels, obj) and sel.fields_match(fields, obj, getter)

    return matches


def _token(snap_id: str, offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"s": snap_id, "o": offset}).encode()).decode()


def _read_token(text: str) -> tuple[str, int]:
    try:
        data = json.loads(base64.urlsafe_b64decode(text.encode()))
        return str(data["s"]), int(data["o"])
    except (ValueError, KeyError, TypeError) as exc:
        raise bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version "
            "meta.k8s.io/v1)"
        ) from exc


def _limit(call: Call) -> int:
    try:
        return max(0, int(call.query.get("limit") or 0))
    except ValueError as exc:
        raise bad_request("limit must be an integer") from exc


def collection(cluster: Cluster, call: Call) -> tuple[int, list[Obj], str]:
    """(list RV, copies of the page's items, continue token) for a LIST.

    A paginated LIST's snapshot keeps the stored objects themselves, not copies: the
    store never changes an object in place (``Store.put_owned``), so a later page shows
    each one as it was at the list's RV, and only the page served is copied (a LIST of
    10,000 pods in pages of 500 copied all 10,000 for its first page, and kept them)."""
    _check_exact(cluster, call)
    limit = _limit(call)
    if cont := call.query.get("continue"):
        snap_id, offset = _read_token(cont)
        snap = cluster.store.snapshot(snap_id)
        if snap is None:
            raise _expired(cluster, call, offset)
        rv, items = snap
    else:
        items = _matching(cluster, call, matcher(call))
        rv, offset = cluster.store.resource_version, 0
        snap_id = cluster.store.save_snapshot(items) if limit and len(items) > limit else ""
    if not limit or offset + limit >= len(items):
        return rv, [clone(o) for o in items[offset:]], ""
    page = [clone(o) for o in items[offset : offset + limit]]
    return rv, page, _token(snap_id, offset + limit)


def _matching(cluster: Cluster, call: Call, matches: Callable[[Obj], bool]) -> list[Obj]:
    """The stored objects of the call's resource and namespace that match, themselves
    (the selectors only read them; ``collection`` copies what it serves)."""
    group, plural = call.rtype.store_key
    return [o for o in cluster.store.peek_list(group, plural, call.namespace or None) if matches(o)]


def _check_exact(cluster: Cluster, call: Call) -> None:
    rv = call.query.get("resourceVersion")
    if (
        call.query.get("resourceVersionMatch") == "Exact"
        and rv
        and rv.isdigit()
        and int(rv) < cluster.store.oldest_watchable
    ):
        raise gone("The resourceVersion for the provided list is too old.")


def _expired(cluster: Cluster, call: Call, offset: int) -> Exception:
    items = _matching(cluster, call, matcher(call))
    fresh = _token(cluster.store.save_snapshot(items), offset)
    exc = gone(
        "The provided continue parameter is too old to display a consistent list result. You can "
        "start a new list without the continue parameter, or use the continue token in this "
        "response to retrieve the remainder of the results. Continuing with the provided token "
        "results in an inconsistent list - objects that were created, modified, or deleted "
        "between the time the first chunk was returned and now may show up in the list."
    )
    exc.status["metadata"] = {"continue": fresh}
    return exc


def list_body(call: Call, rv: int, items: list[Obj], cont: str) -> Obj:
    """The ``<Kind>List`` document (built-in items carry no kind/apiVersion, as typed lists)."""
    shown = [present(call, o) for o in items]
    if not call.rtype.is_custom:
        for item in shown:
            item.pop("kind", None)
            item.pop("apiVersion", None)
    metadata: Obj = {"resourceVersion": str(rv)}
    if cont:
        metadata["continue"] = cont
    return {
        "kind": call.rtype.list_kind,
        "apiVersion": call.rtype.api_version,
        "metadata": metadata,
        "items": shown,
    }
