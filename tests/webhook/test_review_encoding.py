"""The answer's encoding (``review.answer_json``, orjson): byte for byte what the
response class renders for the same document (``json.dumps`` with
``ensure_ascii=False`` and compact separators, in UTF-8), or refused alike."""

from __future__ import annotations

import asyncio
import base64
import json
import math
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.policy.builders import gpu_pod, reservation
from tests.webhook.helpers import review, wired
from webhook.review import answer, answer_json

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
    """``answer_json(doc)`` is what the response class renders (returned), or both
    refuse ``doc`` alike (a lone surrogate: None)."""
    wanted = rendered(doc)
    if wanted is None:
        with pytest.raises(orjson.JSONEncodeError):
            answer_json(doc)
        return None
    assert answer_json(doc) == wanted
    return wanted


@settings(max_examples=300, deadline=None)
@given(uid=TEXT, warnings=st.lists(TEXT, max_size=6))
@example(uid='\u2028\x7f\x1f"\\', warnings=["é\u2029", "\x00"])
def test_an_allowed_answer_without_a_patch_renders_as_the_response_class_does(
    uid: str, warnings: list[str]
) -> None:
    renders_alike(answer(uid, warnings=warnings))


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
# a number that is not finite keeps its value: the patch itself is encoded by ``json``
# (orjson would write null) and travels as base64 text
@example(uid="", warnings=[], patch=[{"op": "add", "path": "", "value": math.inf}])
def test_an_allowed_answer_with_a_patch_renders_as_the_response_class_does(
    uid: str, warnings: list[str], patch: list[dict[str, Any]]
) -> None:
    doc = answer(uid, patch=patch, warnings=warnings)
    wanted = renders_alike(doc)
    if wanted is not None:
        assert json.loads(base64.b64decode(json.loads(wanted)["response"]["patch"])) == patch


@settings(max_examples=200, deadline=None)
@given(uid=TEXT, message=TEXT, warnings=st.lists(TEXT, max_size=6), code=st.integers(400, 599))
def test_a_denial_and_an_error_render_as_the_response_class_does(
    uid: str, message: str, warnings: list[str], code: int
) -> None:
    renders_alike(answer(uid, allowed=False, message=message, warnings=warnings, code=code))
    renders_alike({"error": message})


NAMES = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    uid=NAMES,
    name=NAMES,
    notes=st.dictionaries(NAMES, NAMES, max_size=3),
    gpus=st.integers(0, 3),
    dry_run=st.booleans(),
)
def test_every_answer_to_a_random_review_renders_as_the_response_class_does(
    uid: str, name: str, notes: dict[str, str], gpus: int, dry_run: bool
) -> None:
    """Random reviews through the handler (admitted, queued, no match, forged notes
    stripped, dry runs): each answer's orjson bytes are the response class's."""

    async def run() -> None:
        admission, _ = await wired(reservation(1, gpus=2))
        pod = gpu_pod(gpus).build()
        pod["metadata"].update(name=name, annotations=notes)
        doc = review(pod, dry_run=dry_run, uid=uid)
        status, answered = await admission.review(json.dumps(doc).encode())
        assert status == 200
        assert answer_json(answered) == rendered(answered)

    asyncio.run(run())
