"""JSON Patch application with the apiserver's failure rules (pure)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from sandbox.kube.admission.hook import AdmissionError
from sandbox.kube.admission.patching import apply_patch
from tests.admission.builders import pod


def patch(*ops: Mapping[str, object]) -> bytes:
    return json.dumps(list(ops)).encode()


def test_an_applicable_patch() -> None:
    """Rule: a valid JSON Patch is applied to the object."""
    result = apply_patch(
        "h", patch({"op": "add", "path": "/metadata/annotations", "value": {}}), pod("p")
    )
    assert result is not None
    assert result["metadata"]["annotations"] == {}


@pytest.mark.parametrize(
    "operation",
    [
        pytest.param(
            {"op": "add", "path": "/metadata/annotations/a", "value": "1"}, id="missing-parent"
        ),
        pytest.param({"op": "remove", "path": "/metadata/labels"}, id="remove-missing"),
        pytest.param(
            {"op": "replace", "path": "/spec/nodeName", "value": "n"}, id="replace-missing"
        ),
        pytest.param({"op": "test", "path": "/metadata/name", "value": "q"}, id="failed-test"),
        pytest.param({"op": "add", "path": "/metadata", "value": "text"}, id="undecodable-result"),
    ],
)
def test_unappliable_patches_are_500(operation: dict[str, object]) -> None:
    """Rule: add under a missing parent, remove/replace of a missing path, a failed test, or a
    result that no longer decodes → 500 InternalError."""
    with pytest.raises(AdmissionError) as info:
        apply_patch("h", patch(operation), pod("p"))
    assert info.value.code == 500
    assert info.value.status["reason"] == "InternalError"
    assert info.value.status["message"].startswith("Internal error occurred: ")


def test_the_missing_path_is_named() -> None:
    """Rule: the 500 message names the missing path as json-patch v4 does (``add operation does not
    apply: doc is missing path``)."""
    op = {"op": "add", "path": "/metadata/annotations/a", "value": "1"}
    with pytest.raises(AdmissionError, match="add operation does not apply: doc is missing path"):
        apply_patch("h", patch(op), pod("p"))


def test_not_a_patch_document_is_500() -> None:
    """Rule: patch bytes that are not a JSON Patch document → 500."""
    with pytest.raises(AdmissionError) as info:
        apply_patch("h", b'{"op": "add"}', pod("p"))
    assert info.value.code == 500


def test_a_patch_on_delete_is_500_but_an_empty_one_is_fine() -> None:
    """Rule: a non-empty patch on a DELETE → 500; an empty one is fine."""
    assert apply_patch("h", b"[]", None) is None
    with pytest.raises(AdmissionError, match="attempted to modify the object"):
        apply_patch("h", patch({"op": "add", "path": "/x", "value": 1}), None)
