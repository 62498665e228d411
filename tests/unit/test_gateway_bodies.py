"""The gateway's request bodies and answers: compact JSON in, and a success's body left
undecoded when the caller asks (``answer(decode=False)``); errors decoded as always."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import errors
from shared.gateway import answer, encoded


class Headers(dict[str, str]):
    """What ``answer`` needs of a client's headers."""

    def getlist(self, name: str) -> list[str]:
        return [self[name]] if name in self else []


class Phase(StrEnum):
    ACTIVE = "Active"


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


@given(JSON.filter(lambda value: value is not None))
def test_a_body_is_the_json_of_the_value(body: Any) -> None:
    headers: dict[str, str] = {}
    data = encoded(body, headers)
    assert data is not None
    assert json.loads(data) == json.loads(json.dumps(body))
    assert headers["Content-Type"] == "application/json"


def test_a_body_takes_what_json_dumps_takes_the_same_way() -> None:
    body = {1: Phase.ACTIVE, "big": 2**70, "t": (1, 2)}
    data = encoded(body, {})
    assert data is not None
    assert json.loads(data) == {"1": "Active", "big": 2**70, "t": [1, 2]}
    assert encoded([{"op": "add", "path": "/a", "value": {}}], {}) == (
        b'[{"op":"add","path":"/a","value":{}}]'
    )


def test_a_body_json_dumps_refuses_is_refused() -> None:
    with pytest.raises(TypeError):
        encoded({"at": datetime(2026, 1, 1, tzinfo=UTC)}, {})


def test_a_patch_keeps_its_content_type_and_no_body_is_none() -> None:
    headers = {"Content-Type": "application/json-patch+json"}
    assert encoded([], headers) == b"[]"
    assert headers["Content-Type"] == "application/json-patch+json"
    assert encoded(None, {}) is None


def test_a_success_not_decoded_is_empty_whatever_its_body() -> None:
    got = answer("PATCH", "/x", 200, b"<html>not json", Headers(Warning='299 - "w"'), False)
    assert got.body == {}
    assert got.warnings == ["w"]


def test_an_error_is_decoded_even_when_a_success_would_not_be() -> None:
    status = json.dumps({"kind": "Status", "code": 409, "reason": "Conflict", "message": "m"})
    with pytest.raises(errors.Conflict):
        answer("PATCH", "/x", 409, status.encode(), Headers(), False)


def test_a_number_that_is_not_finite_is_sent_as_null() -> None:
    assert encoded([float("nan"), float("inf")], {}) == b"[null,null]"
