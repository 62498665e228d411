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
    with pytest.raises(AdmissionError) as info:
        apply_patch("h", patch(operation), pod("p"))
    assert info.value.code == 500
    assert info.value.status["reason"] == "InternalError"
    assert info.value.status["message"].startswith("Internal error occurred: ")


def test_the_missing_path_is_named() -> None:
    op = {"op": "add", "path": "/metadata/annotations/a", "value": "1"}
    with pytest.raises(AdmissionError, match="add operation does not apply: doc is missing path"):
        apply_patch("h", patch(op), pod("p"))


def test_not_a_patch_document_is_500() -> None:
    with pytest.raises(AdmissionError) as info:
        apply_patch("h", b'{"op": "add"}', pod("p"))
    assert info.value.code == 500


def test_a_patch_on_delete_is_500_but_an_empty_one_is_fine() -> None:
    assert apply_patch("h", b"[]", None) is None
    with pytest.raises(AdmissionError, match="attempted to modify the object"):
        apply_patch("h", patch({"op": "add", "path": "/x", "value": 1}), None)
