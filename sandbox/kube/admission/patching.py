"""Applying a webhook's JSON Patch with the apiserver's failure rules.

Whatever the failure policy, the request fails with 500 when the patch bytes are not a
JSON Patch document, when an operation cannot be applied (``add`` under a missing
parent, ``remove``/``replace`` of a missing path, a failed ``test``), when a DELETE
gets a non-empty patch, or when the result no longer decodes as the object's type.
The apiserver uses ``gopkg.in/evanphx/json-patch.v4``; ``jsonpatch`` (RFC 6902) refuses
the same documents. Source: kubernetes/apiserver
``pkg/admission/plugin/webhook/mutating/dispatcher.go`` (``callAttrMutatingHook``).
"""

from __future__ import annotations

from typing import Any

import jsonpatch
import jsonpointer

from sandbox.kube import encoding
from sandbox.kube.admission.status import internal_error
from sandbox.kube.clone import clone


def apply_patch(webhook: str, patch: bytes, obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """``obj`` with ``patch`` applied (a new object); raises a 500 ``AdmissionError``."""
    operations = decode(patch)
    if not operations:
        return obj
    if obj is None:
        raise internal_error(
            f'admission webhook "{webhook}" attempted to modify the object, '
            "which is not supported for this operation"
        )
    try:
        # On a copy of its own, in place: ``apply`` would deep-copy the whole object again.
        patched = jsonpatch.JsonPatch(operations).apply(clone(obj), in_place=True)
    except jsonpatch.JsonPatchTestFailed as exc:
        raise internal_error(f"testing value failed: {exc}") from exc
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise internal_error(_apply_message(operations, obj, exc)) from exc
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise internal_error(f"unable to apply patch: {exc}") from exc
    _check_decodes(obj, patched)
    result: dict[str, Any] = patched
    return result


def decode(patch: bytes) -> list[dict[str, Any]]:
    """The operations of a patch document; 500 when it is not a JSON array of objects."""
    try:
        document = encoding.decode(patch)
    except ValueError as exc:
        raise internal_error(f"invalid JSON patch document: {exc}") from exc
    if not isinstance(document, list) or not all(isinstance(op, dict) for op in document):
        raise internal_error("json: cannot unmarshal patch into Go value of type jsonpatch.Patch")
    return document


def _apply_message(operations: list[dict[str, Any]], obj: dict[str, Any], exc: Exception) -> str:
    failing = _first_failing(operations, obj)
    op = str(failing.get("op", "")) if failing else ""
    path = str(failing.get("path", "")) if failing else ""
    if op in ("add", "remove", "replace", "move", "copy"):
        return f'{op} operation does not apply: doc is missing path: "{path}": missing value'
    return f"unable to apply patch: {exc}"


def _first_failing(operations: list[dict[str, Any]], obj: dict[str, Any]) -> dict[str, Any] | None:
    """Replay the operations one by one to name the one that failed."""
    doc: Any = clone(obj)
    for operation in operations:
        try:
            doc = jsonpatch.JsonPatch([operation]).apply(doc)
        except Exception:
            return operation
    return None


def _check_decodes(original: dict[str, Any], patched: Any) -> None:
    if not isinstance(patched, dict):
        raise internal_error("the patched object is not a JSON object")
    if not isinstance(patched.get("metadata", {}), dict):
        raise internal_error(
            "json: cannot unmarshal into Go struct field .metadata of type v1.ObjectMeta"
        )
    for key in ("apiVersion", "kind"):
        if patched.get(key) != original.get(key):
            raise internal_error(f"the patch changed the object's {key}")
