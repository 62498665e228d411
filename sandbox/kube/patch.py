"""The PATCH flavours: JSON Patch, JSON merge patch and strategic merge patch.

JSON Patch (RFC 6902) is applied by ``jsonpatch``; a failed ``test`` or an operation
on a missing path is a 422 (facts §3.1). A patch made only of ``add``, ``replace``,
``remove`` and ``test`` on plain paths (a ledger claim's shape) is applied directly
instead (``_simple``), giving what ``jsonpatch`` gives (its own comparison for
``test``); anything else, or any step it cannot take, goes to ``jsonpatch`` from the
start, so every refusal is ``jsonpatch``'s.
Merge patch is RFC 7386. Strategic merge follows the built-in types' patch strategies
for the kinds we serve: lists with a merge key are merged by it (``$patch: delete``
removes an element, ``$patch: replace`` replaces), primitive lists with a merge
strategy are unioned, every other list is replaced (``spec.tolerations`` is atomic).
The ``$setElementOrder`` and ``$retainKeys`` directives ``kubectl apply`` sends are
understood.
"""

from __future__ import annotations

import re
from typing import Any

import jsonpatch
import jsonpointer

from sandbox.kube.clone import clone
from sandbox.kube.errors import bad_request, error, too_large

Obj = dict[str, Any]

#: Most operations a JSON Patch may hold.
MAX_JSON_PATCH_OPS = 10000

#: Lists merged by a key, by path (``[]`` stands for "any element of").
MERGE_KEYS: dict[str, str] = {
    "metadata.ownerReferences": "uid",
    "spec.containers": "name",
    "spec.initContainers": "name",
    "spec.ephemeralContainers": "name",
    "spec.volumes": "name",
    "spec.imagePullSecrets": "name",
    "spec.schedulingGates": "name",
    "spec.resourceClaims": "name",
    "spec.hostAliases": "ip",
    "spec.topologySpreadConstraints": "topologyKey",
    "spec.ports": "port",
    "status.conditions": "type",
    "status.addresses": "type",
    "status.containerStatuses": "name",
    "status.initContainerStatuses": "name",
    "status.podIPs": "ip",
    "status.images": "names",
}
for _pod_list in ("containers", "initContainers", "ephemeralContainers"):
    MERGE_KEYS[f"spec.{_pod_list}[].env"] = "name"
    MERGE_KEYS[f"spec.{_pod_list}[].ports"] = "containerPort"
    MERGE_KEYS[f"spec.{_pod_list}[].volumeMounts"] = "mountPath"
    MERGE_KEYS[f"spec.{_pod_list}[].volumeDevices"] = "devicePath"
#: A pod template's spec (Deployments, ReplicaSets, Jobs) merges as a pod's spec does.
_POD_SPEC_LISTS = (
    "containers",
    "initContainers",
    "ephemeralContainers",
    "volumes",
    "imagePullSecrets",
    "schedulingGates",
    "resourceClaims",
    "hostAliases",
    "topologySpreadConstraints",
)
for _path, _key in list(MERGE_KEYS.items()):
    if _path.split(".")[1].split("[")[0] in _POD_SPEC_LISTS:
        MERGE_KEYS[f"spec.template.{_path}"] = _key
#: Primitive lists whose strategy is ``merge`` (union).
MERGE_PRIMITIVES = frozenset({"metadata.finalizers"})


def json_patch(target: Obj, ops: Any, share: bool = False) -> Obj:
    """Apply an RFC 6902 patch; malformed → 400, inapplicable or failed test → 422.

    ``share``: the result may share with ``target`` the containers the patch does not
    change (a simple patch copies only the objects and arrays on its paths: for a
    ledger claim the root, ``status`` and the holds array, not the 50 holds), for a
    caller that changes nothing of the result in place below what the patch itself
    wrote. ``target`` is never changed either way."""
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    if len(ops) > MAX_JSON_PATCH_OPS:
        raise too_large(
            f"The allowed operations in this JSON patch is {MAX_JSON_PATCH_OPS}, got {len(ops)}"
        )
    if all(type(op) is dict and op.get("op") in _SIMPLE_OPS for op in ops):
        simple = dict(target) if share else clone(target)
        if _simple(simple, ops, _Copies(simple) if share else None):
            return simple
    return with_jsonpatch(target, ops)


def with_jsonpatch(target: Obj, ops: list[Any]) -> Obj:
    """``ops`` applied to a copy of ``target`` by ``jsonpatch``, refusals mapped to 422
    (cannot apply, failed ``test``) or 400 (not a patch)."""
    try:
        patch = jsonpatch.JsonPatch(ops)
        result = patch.apply(clone(target), in_place=True)  # the clone is ours: no second copy
    except jsonpatch.JsonPatchTestFailed as exc:
        raise _rejected(str(exc)) from exc
    except (jsonpatch.JsonPatchConflict, jsonpointer.JsonPointerException) as exc:
        raise _rejected(str(exc)) from exc
    except (jsonpatch.InvalidJsonPatch, TypeError, KeyError) as exc:
        raise bad_request(f"invalid JSON Patch: {exc}") from exc
    if not isinstance(result, dict):
        raise _rejected("the patch replaced the whole object with a non-object")
    return result


#: jsonpatch's comparison for ``test`` (RFC 6902 4.6: ``true`` is not ``1``); without
#: it, ``test`` is left to jsonpatch.
_json_equal: Any = getattr(jsonpatch, "_json_equal", None)
_SIMPLE_OPS = frozenset({"add", "replace", "remove", *(("test",) if _json_equal else ())})
_INDEX = re.compile(r"0|[1-9][0-9]*")


class _Copies:
    """The containers a sharing patch made for itself (its root first): only these
    may be changed in place; any other container on a path is copied first."""

    def __init__(self, root: Obj) -> None:
        self._made: dict[int, Any] = {id(root): root}  # held: no id is reused meanwhile

    def own(self, parent: Any, part: str, child: Any) -> Any:
        """``child`` (``parent``'s member ``part``), replaced by a copy unless made here."""
        if self._made.get(id(child)) is child:
            return child
        copy: Any = dict(child) if type(child) is dict else list(child)
        parent[part if type(parent) is dict else int(part)] = copy
        self._made[id(copy)] = copy
        return copy


def _simple(doc: Obj, ops: list[Any], copies: _Copies | None = None) -> bool:
    """Apply ``ops`` to ``doc`` in place when every one is an ``add``, ``replace``,
    ``remove`` or a passing ``test`` whose path (no ``~`` escapes) leads through
    existing objects and arrays to a place it applies to — exactly as ``jsonpatch``
    would, values copied as it copies them. False as soon as one is not: ``doc`` is
    then partly changed, and the caller applies the whole patch with ``jsonpatch`` to
    a fresh copy (which gives its refusal). With ``copies`` (``doc`` a shallow copy of
    the target), a container on a changing op's path is copied before it is changed."""
    for op in ops:
        if type(op) is not dict:
            return False
        kind, path = op.get("op"), op.get("path")
        if type(kind) is not str or kind not in _SIMPLE_OPS:
            return False
        if type(path) is not str or not path.startswith("/"):
            return False
        if "~" in path or (kind != "remove" and "value" not in op):
            return False
        *parents, last = path[1:].split("/")
        container: Any = doc
        for part in parents:
            if type(container) is dict and part in container:
                child = container[part]
            elif type(container) is list and _INDEX.fullmatch(part) and int(part) < len(container):
                child = container[int(part)]
            else:
                return False
            if copies is not None and kind != "test" and type(child) in (dict, list):
                child = copies.own(container, part, child)
            container = child
        if not _apply_simple(container, kind, last, op.get("value")):
            return False
    return True


def _apply_simple(container: Any, kind: str, last: str, value: Any) -> bool:
    if kind == "test":
        return _passes(container, last, value)
    if type(container) is dict:
        if kind == "add":
            container[last] = clone(value)
        elif last not in container:
            return False
        elif kind == "replace":
            container[last] = clone(value)
        else:
            del container[last]
        return True
    if type(container) is not list:
        return False
    if kind == "add" and last == "-":
        container.append(clone(value))
        return True
    if not _INDEX.fullmatch(last):
        return False
    index = int(last)
    if kind == "add" and index <= len(container):
        container.insert(index, clone(value))
    elif index >= len(container):
        return False
    elif kind == "replace":
        container[index] = clone(value)
    else:
        del container[index]
    return True


def _passes(container: Any, last: str, value: Any) -> bool:
    """A ``test`` whose path exists and whose value equals ``value`` (jsonpatch's
    comparison); anything else is left to jsonpatch."""
    if type(container) is dict and last in container:
        return _equal(container[last], value)
    if type(container) is list and _INDEX.fullmatch(last) and int(last) < len(container):
        return _equal(container[int(last)], value)
    return False


_EXACT = frozenset({str, int, float, bool, type(None)})


def _equal(stored: Any, value: Any) -> bool:
    """jsonpatch's comparison (``true`` is not ``1``, members one by one), with an object's
    members of one scalar type on both sides compared directly — for them it is plain
    equality (the reconciler's drops test whole holds, ≈ 7 µs each through jsonpatch's
    walk)."""
    if type(stored) is not dict or type(value) is not dict:
        return bool(_json_equal(stored, value))
    if len(stored) != len(value):
        return False
    for key, member in stored.items():
        if key not in value:
            return False
        other = value[key]
        if type(member) is type(other) and type(member) in _EXACT:
            if member != other:
                return False
        elif not _json_equal(member, other):
            return False
    return True


def _rejected(detail: str) -> Exception:
    return error(
        422,
        "Invalid",
        "the server rejected our request due to an error in our request",
        {"causes": [{"reason": "FieldValueInvalid", "message": detail}]},
    )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, ``null`` deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(target: Obj, patch: Any) -> Obj:
    """Apply a strategic merge patch to a built-in object."""
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch must be a JSON object")
    result = _merge_map(target, patch, "")
    return result if isinstance(result, dict) else {}


def _merge_map(target: Any, patch: Obj, path: str) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: clone(v) for k, v in patch.items() if not k.startswith("$")}
    result = clone(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [v for v in result.get(name) or [] if v not in value]
            continue
        child = f"{path}.{key}" if path else key
        if value is None:
            result.pop(key, None)
        else:
            merged = _merge_value(result.get(key), value, child)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_value(target: Any, value: Any, path: str) -> Any:
    if isinstance(value, dict):
        return _merge_map(target, value, path)
    if isinstance(value, list):
        return _merge_list(target if isinstance(target, list) else [], value, path)
    return clone(value)


def _merge_list(target: list[Any], patch: list[Any], path: str) -> list[Any]:
    key = MERGE_KEYS.get(path)
    if path in MERGE_PRIMITIVES:
        return [*target, *(v for v in patch if v not in target)]
    if key is None:
        return [clone(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
        return [clone(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    result = clone(target)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise bad_request(f"map: {item} does not contain declared merge key: {key}")
        index = next(
            (
                i
                for i, old in enumerate(result)
                if isinstance(old, dict) and old.get(key) == item[key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append(_merge_map({}, item, path + "[]"))
        else:
            result[index] = _merge_map(result[index], item, path + "[]")
    return result
