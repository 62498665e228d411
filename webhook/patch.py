"""Mutate a copy, derive the patch (CONVENTIONS 5, DESIGN §4).

The webhook never edits the request's pod: each step copies what it edits (``edited``
shares every other subtree with the original — ``shallow`` copies one map or list on
the way to an edit) and ``diff`` turns original vs. edited into an RFC 6902 JSON Patch.
The patch is always a diff, never hand-built; ``apply`` (jsonpatch) is the reference
its tests check it against.

``diff`` is our own rather than ``jsonpatch.make_patch``: it skips a subtree the edited
pod shares with the original by identity, compares the rest with the interpreter's own
equality, and needs no copy of the values — ≈ 10× cheaper on an admitted pod
(``docs/developer/webhook.md``, "The patch"). Its rules:

- maps: a key gone is ``remove``d, a new key ``add``ed whole — a diff never adds under
  a missing parent (a new ``annotations`` map goes in whole, a new ``tolerations``
  list whole: the mistake that makes the apiserver fail a create even with
  ``failurePolicy: Ignore``); a changed key is compared further;
- lists: the common head and tail are kept; between them, items at the same position
  are compared further, the surplus ``add``ed (in order) or ``remove``d (from the
  end), so a list grown at the end gets ``add``s and a strip gets ``remove``s;
- anything else that differs — or the same value under another JSON type (``true``
  against ``1``, ``1`` against ``1.0``) — is ``replace``d;
- map keys in paths are escaped as RFC 6901 says (``~`` → ``~0``, ``/`` → ``~1``).

Patch values are the edited pod's own objects, not copies: encode the patch, never
edit it.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch

from shared.pointer import segment

Op = dict[str, Any]


def edit_copy(pod: dict[str, Any]) -> dict[str, Any]:
    """A deep copy to edit (the baseline's copy; the webhook copies along the path)."""
    return copy.deepcopy(pod)


def shallow(parent: dict[str, Any], key: str, empty: type[dict[str, Any]] | type[list[Any]]) -> Any:
    """``parent[key]`` replaced by a shallow copy of itself and returned, to edit; a
    value that is not an ``empty``-typed container (missing, null, malformed) becomes
    a new empty one. ``parent`` must itself be a copy."""
    value = parent.get(key)
    parent[key] = fresh = empty(value) if isinstance(value, empty) else empty()
    return fresh


def diff(original: dict[str, Any], edited: dict[str, Any]) -> list[Op]:
    """The JSON Patch taking ``original`` to ``edited`` (empty when equal; module
    docstring); no side effects."""
    ops: list[Op] = []
    _values(original, edited, "", ops)
    return ops


def apply(original: dict[str, Any], operations: list[Op]) -> dict[str, Any]:
    """``operations`` applied to a copy of ``original`` (tests and self-checks)."""
    result: dict[str, Any] = jsonpatch.apply_patch(original, operations, in_place=False)
    return result


def _same(old: Any, new: Any) -> bool:
    """Equal as JSON values: same types all the way down (``True`` is not ``1``, nor
    ``1`` ``1.0``: a value is kept as sent unless changed). Stricter on purpose than
    ``shared.ledger.patches._same_json``, which predicts the server's JSON Patch ``test``
    (docs/developer/webhook.md "The patch")."""
    if old is new:
        return True
    if type(old) is not type(new) or old != new:
        return False
    if isinstance(old, (dict, list)):  # == let True equal 1 inside: check the types
        return json.dumps(old) == json.dumps(new) or not _any_op(old, new)
    return True


def _any_op(old: Any, new: Any) -> bool:
    ops: list[Op] = []
    _values(old, new, "", ops)
    return bool(ops)


def _values(old: Any, new: Any, path: str, ops: list[Op]) -> None:
    if old is new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        _maps(old, new, path, ops)
    elif isinstance(old, list) and isinstance(new, list):
        _lists(old, new, path, ops)
    elif type(old) is not type(new) or old != new:
        ops.append({"op": "replace", "path": path, "value": new})


def _maps(old: dict[str, Any], new: dict[str, Any], path: str, ops: list[Op]) -> None:
    for key in old:
        if key not in new:
            ops.append({"op": "remove", "path": f"{path}/{segment(key)}"})
    for key, value in new.items():
        if key not in old:
            ops.append({"op": "add", "path": f"{path}/{segment(key)}", "value": value})
        elif old[key] is not value:
            _values(old[key], value, f"{path}/{segment(key)}", ops)


def _lists(old: list[Any], new: list[Any], path: str, ops: list[Op]) -> None:
    n, m = len(old), len(new)
    head = 0
    while head < n and head < m and _same(old[head], new[head]):
        head += 1
    tail = 0
    while tail < n - head and tail < m - head and _same(old[n - 1 - tail], new[m - 1 - tail]):
        tail += 1
    common = min(n, m) - head - tail
    for i in range(head, head + common):
        _values(old[i], new[i], f"{path}/{i}", ops)
    for i in range(head + common, m - tail):
        ops.append({"op": "add", "path": f"{path}/{i}", "value": new[i]})
    for i in reversed(range(head + common, n - tail)):
        ops.append({"op": "remove", "path": f"{path}/{i}"})
