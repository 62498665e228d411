"""Mutate a copy, derive the patch (CONVENTIONS 5, DESIGN §4).

Every step of the webhook edits a deep copy of the pod; ``diff`` turns original vs.
edited into an RFC 6902 JSON Patch with ``jsonpatch``. A diff never adds under a
missing parent: a new ``annotations`` map is added whole, a new ``tolerations`` list
whole — the mistake that makes the apiserver fail a create even with
``failurePolicy: Ignore``.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch


def edit_copy(pod: dict[str, Any]) -> dict[str, Any]:
    """A deep copy to edit."""
    return copy.deepcopy(pod)


def diff(original: dict[str, Any], edited: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch taking ``original`` to ``edited`` (empty when equal)."""
    if original == edited:
        return []
    operations: list[dict[str, Any]] = jsonpatch.make_patch(original, edited).patch
    return operations


def apply(original: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """``operations`` applied to a copy of ``original`` (tests and self-checks)."""
    result: dict[str, Any] = jsonpatch.apply_patch(original, operations, in_place=False)
    return result
