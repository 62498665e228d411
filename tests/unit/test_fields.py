"""The strict field readers: each returns the typed value or names the field."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import pytest

from shared import fields


class Colour(StrEnum):
    RED = "red"


def test_each_reader_returns_the_typed_value() -> None:
    assert fields.mapping({"a": 1}, "x") == {"a": 1}
    assert fields.entries(None, "x") == []
    assert fields.entries([1, 2], "x", limit=2) == [1, 2]
    assert fields.text("ok", "x", longest=2) == "ok"
    assert fields.whole(0, "x", minimum=0) == 0
    assert fields.instant("2026-12-05T10:00:00Z", "x") == datetime(2026, 12, 5, 10, tzinfo=UTC)
    assert fields.member(Colour, "red", "x") is Colour.RED


@pytest.mark.parametrize(
    ("read", "value", "message"),
    [
        pytest.param(fields.mapping, [1], "spec.f: not an object", id="mapping of a list"),
        pytest.param(fields.entries, {"a": 1}, "spec.f: not a list", id="entries of an object"),
        pytest.param(
            lambda v, w: fields.entries(v, w, limit=1), [1, 2], "more than 1", id="too many"
        ),
        pytest.param(fields.text, "", "expected a non-empty string", id="empty text"),
        pytest.param(fields.text, 7, "expected a non-empty string", id="text of a number"),
        pytest.param(
            lambda v, w: fields.text(v, w, longest=3), "long", "non-empty string", id="too long"
        ),
        pytest.param(fields.whole, True, "expected an integer", id="boolean is no integer"),
        pytest.param(fields.whole, 1.0, "expected an integer", id="float is no integer"),
        pytest.param(
            lambda v, w: fields.whole(v, w, minimum=0), -1, "must be >= 0", id="below minimum"
        ),
        pytest.param(fields.instant, 5, "expected a UTC instant", id="instant of a number"),
        pytest.param(fields.instant, "tomorrow", "not a UTC instant", id="instant of prose"),
        pytest.param(
            lambda v, w: fields.member(Colour, v, w), "blue", "is not one of red", id="no member"
        ),
    ],
)
def test_a_malformed_value_names_its_field(read: Any, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        read(value, "spec.f")
    assert str(caught.value).startswith("spec.f: ")
