"""The allowed answer's encoding (``review.allowed_json``): byte for byte what the
response class renders for the same document, or None when it does not apply."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

from hypothesis import example, given, settings
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


def renders_alike(doc: dict[str, Any]) -> bytes | None:
    """``allowed_json(doc)`` is what the response class renders (returned), or both
    refuse ``doc`` alike (a lone surrogate: None)."""
    wanted = rendered(doc)
    if wanted is None:
        try:
            allowed_json(doc)
        except UnicodeEncodeError:
            return None
        raise AssertionError("a lone surrogate was encoded")
    assert allowed_json(doc) == wanted
    return wanted


@settings(max_examples=300, deadline=None)
@given(uid=TEXT, warnings=st.lists(TEXT, max_size=6))
def test_an_allowed_answer_without_a_patch_renders_as_the_response_class_does(
    uid: str, warnings: list[str]
) -> None:
    doc = answer(uid, warnings=warnings)
    wanted = renders_alike(doc)
    if wanted is not None:
        assert allowed_json(doc) == wanted  # and again, from the memo


JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
OPS = st.lists(
    st.fixed_dictionaries(
        {"op": st.sampled_from(["add", "remove", "replace"]), "path": TEXT},
        optional={"value": JSON_VALUE},
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(uid=TEXT, warnings=st.lists(TEXT, max_size=6), patch=OPS)
# a number that is not finite keeps its value (orjson, tried for the patch, wrote null)
@example(uid="", warnings=[], patch=[{"op": "add", "path": "", "value": math.inf}])
def test_an_allowed_answer_with_a_patch_renders_as_the_response_class_does(
    uid: str, warnings: list[str], patch: list[dict[str, Any]]
) -> None:
    doc = answer(uid, patch=patch, warnings=warnings)
    wanted = renders_alike(doc)
    if wanted is not None:
        assert json.loads(base64.b64decode(json.loads(wanted)["response"]["patch"])) == patch


def test_other_documents_are_left_to_the_response_class() -> None:
    patch = [{"op": "add", "path": "/a", "value": 1}]
    patched = answer("u", patch=patch, warnings=["w"])
    reordered = {k: patched["response"][k] for k in ("uid", "allowed", "patch", "patchType")}
    for doc in (
        answer("u", allowed=False, message="no", warnings=["w"]),
        {**patched, "response": reordered},
        {**patched, "response": {**patched["response"], "patchType": "JSONMergePatch"}},
        {**patched, "response": {**patched["response"], "patch": b"W10="}},
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
