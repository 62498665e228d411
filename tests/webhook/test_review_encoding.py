"""The no-change answer's encoding (``review.allowed_json``): byte for byte what the
response class renders for the same document, or None when it does not apply."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.review import allowed_json, answer

TEXT = st.text(max_size=200)  # any code point: quotes, controls, non-ASCII, surrogates


def rendered(doc: dict[str, Any]) -> bytes | None:
    """What ``webhook.app.json_response`` (Starlette's ``JSONResponse``) sends; None
    when that cannot be encoded either (a lone surrogate)."""
    text = json.dumps(doc, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None


@settings(max_examples=300, deadline=None)
@given(uid=TEXT, warnings=st.lists(TEXT, max_size=6))
def test_an_allowed_answer_without_a_patch_renders_as_the_response_class_does(
    uid: str, warnings: list[str]
) -> None:
    doc = answer(uid, warnings=warnings)
    wanted = rendered(doc)
    if wanted is None:  # both refuse it alike
        try:
            allowed_json(doc)
        except UnicodeEncodeError:
            return
        raise AssertionError("a lone surrogate was encoded")
    assert allowed_json(doc) == wanted
    assert allowed_json(doc) == wanted  # and again, from the memo


def test_other_documents_are_left_to_the_response_class() -> None:
    patch = [{"op": "add", "path": "/a", "value": 1}]
    for doc in (
        answer("u", allowed=False, message="no", warnings=["w"]),
        answer("u", patch=patch),
        answer("u", patch=patch, warnings=["w"]),
        {"error": "request body too large"},
        {**answer("u"), "extra": 1},
        {**answer("u"), "kind": "Other"},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": []},
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": 1, "allowed": True},
        },
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"allowed": True, "x": 1},
        },
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "u", "allowed": True, "warnings": "w"},
        },
    ):
        assert allowed_json(doc) is None, doc
