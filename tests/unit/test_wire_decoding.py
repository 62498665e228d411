"""How the API server's answers and watch lines are decoded (``shared.kubewire`` with
``jsontext.from_server``): the value ``json.loads`` gives, but for an integer beyond 64
bits (the float64 the server holds); what is not JSON, or not the JSON object expected,
is our ``ServerError`` with its message, never a crash of the reader."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from shared import errors
from shared.jsontext import from_server
from shared.kubewire import answer, watch_event

#: The integers orjson gives as ints (any other comes back as a float).
INT_MIN, INT_MAX = -(2**63), 2**64 - 1

TEXT = st.text(st.characters(exclude_categories=()))  # lone surrogates too
NUMBERS = (
    st.integers(INT_MIN, INT_MAX)
    | st.floats()  # NaN and the infinities: json writes them, the reader's fallback reads
    | st.sampled_from([0.0, -0.0, 5e-324, 1.7976931348623157e308, 2.0**53 + 1])
)
JSON = st.recursive(
    st.none() | st.booleans() | NUMBERS | TEXT,
    lambda inner: st.lists(inner) | st.dictionaries(TEXT, inner),
    max_leaves=30,
)

#: Pieces of JSON text and of what is almost JSON, joined at random.
PIECES = st.sampled_from(
    [
        "{", "}", "[", "]", ",", ":", " ", "\n", '"a"', '"\\ud800"', '"\\u00e9"', '"é"',
        '"\\"', "1", "-0", "01", "1.", ".5", "1e5", "1E400", "-1e-400", "2.5E-3",
        "18446744073709551615", "-9223372036854775808", "NaN", "-NaN", "Infinity",
        "-Infinity", "true", "false", "null", "nul", "\ufeff", "\x00", "\t",
    ]
)  # fmt: skip


def same(a: Any, b: Any) -> bool:
    """``a`` and ``b`` are one JSON value: same types, same keys in the same order, floats
    alike to the sign of a zero (NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and (
            a == b or (math.isnan(a) and math.isnan(b))
        )
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)


def beyond_64_bits(value: Any) -> bool:
    if isinstance(value, dict):
        return any(map(beyond_64_bits, value.values()))
    if isinstance(value, list):
        return any(map(beyond_64_bits, value))
    return isinstance(value, int) and not INT_MIN <= value <= INT_MAX


def outcome(read: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "value", read(data)
    except ValueError as exc:  # UnicodeDecodeError is one
        return "refused", type(exc)


@given(JSON, st.booleans(), st.sampled_from([None, 0, 2]))
def test_the_reader_gives_json_loads_value_for_json_text(
    value: Any, ascii_only: bool, indent: int | None
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    assert same(from_server(text), json.loads(text))
    try:
        data = text.encode()
    except UnicodeEncodeError:  # a lone surrogate written raw: no UTF-8 bytes for it
        return
    assert same(from_server(data), json.loads(data))


@given(st.lists(PIECES, max_size=12).map("".join))
@example('{"a": NaN, "b": [Infinity, -Infinity]}')
@example("1E400")
@example('"\\ud800"')
@example("\ufeff{}")
def test_the_reader_takes_and_refuses_what_json_loads_does(text: str) -> None:
    data = text.encode()
    expected = outcome(json.loads, data)
    assume(not beyond_64_bits(expected[1]))
    got = outcome(from_server, data)
    assert got[0] == expected[0]
    assert same(got[1], expected[1])


def test_a_text_nested_deeper_than_python_reads_is_not_json_never_a_crash() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000  # orjson stops at 1,024, json.loads at the stack
    with pytest.raises(ValueError, match="nested too deep"):
        from_server(deep)
    with pytest.raises(errors.ServerError, match="a line that is not JSON"):
        watch_event(b'{"type": "ADDED", "object": {"a": ' + deep + b"}}")
    with pytest.raises(errors.ServerError, match="answer is not JSON"):
        answer("GET", "/x", 200, deep, Headers())


@given(st.binary(max_size=40))
def test_the_reader_refuses_bytes_json_loads_refuses(data: bytes) -> None:
    expected = outcome(json.loads, data)
    assume(not beyond_64_bits(expected[1]))
    got = outcome(from_server, data)
    assert got[0] == expected[0]
    assert same(got[1], expected[1])


@given(st.integers(INT_MAX + 1, 10**40) | st.integers(-(10**40), INT_MIN - 1))
@example(INT_MAX + 1)
@example(INT_MIN - 1)
def test_an_integer_beyond_64_bits_is_read_as_the_nearest_float(n: int) -> None:
    """The documented difference from ``json.loads`` (module docstring of
    ``shared.jsontext``): the nearest float, where ``json.loads`` gives an int."""
    got = from_server(f'{{"n": {n}}}'.encode())["n"]
    assert isinstance(got, float)
    assert got == float(n)


@given(st.floats(min_value=2.0**64, max_value=1e21, exclude_max=True), st.booleans())
def test_a_float64_the_server_writes_as_an_integer_is_read_as_that_float(
    held: float, negative: bool
) -> None:
    """Go writes a float64 below 1e21 in its shortest digits without an exponent: the
    text of an integer beyond 64 bits, read back as the very float the server holds."""
    held = -held if negative else held
    text = str(int(Decimal(repr(held))))
    assert from_server(text.encode()) == held


def test_a_watch_line_and_an_answer_are_read_by_the_servers_reader() -> None:
    for doc in (b'{"n": 100000000000000000000}', b'{"nan": NaN}'):
        event = watch_event(b'{"type": "ADDED", "object": ' + doc + b"}")
        body = answer("GET", "/x", 200, doc, Headers()).body
        for got in (event.object, body):
            if "n" in got:  # orjson's reading, not json.loads'
                assert got["n"] == 1e20
                assert isinstance(got["n"], float)
            else:  # json.loads' reading, which orjson refuses
                assert math.isnan(got["nan"])


def test_a_status_in_an_error_answer_is_read_by_the_servers_reader() -> None:
    status = b'{"kind": "Status", "code": 409, "reason": "Conflict", "message": "m",'
    error = errors.from_status(409, status + b' "details": {"n": 100000000000000000000}}')
    assert isinstance(error, errors.Conflict)
    assert error.details == {"n": 1e20}
    assert isinstance(error.details["n"], float)


class Headers(dict[str, str]):
    """What ``answer`` needs of a client's headers."""

    def getlist(self, name: str) -> list[str]:
        return [self[name]] if name in self else []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json", "a line that is not JSON"),
        (b'{"type": "ADDED", "object": {}', "a line that is not JSON"),
        (b"\xff\xfe\xfa", "a line that is not JSON"),
        (b'{"type": "ADDED", "object": {"a": "\xff"}}', "a line that is not JSON"),
        (b"", "a line that is not JSON"),
        (b"[1, 2]", "a line that is not a JSON object"),
        (b'"ADDED"', "a line that is not a JSON object"),
        (b"42", "a line that is not a JSON object"),
        (b"null", "a line that is not a JSON object"),
        (b'{"type": "ADDED", "object": [1]}', "an event whose object is not a JSON object"),
        (b'{"type": "ERROR", "object": "gone"}', "an event whose object is not a JSON object"),
    ],
    ids=[
        "not-json",
        "cut-short",
        "not-utf8",
        "not-utf8-in-a-string",
        "empty",
        "array",
        "string",
        "number",
        "null",
        "object-an-array",
        "error-object-a-string",
    ],
)
def test_a_malformed_watch_line_is_a_server_error(line: bytes, message: str) -> None:
    with pytest.raises(errors.ServerError) as caught:
        watch_event(line)
    assert caught.value.code == 0
    assert caught.value.message == f"watch stream carried {message}"


def test_a_watch_line_gives_its_event_and_an_error_event_raises_its_error() -> None:
    event = watch_event(b'{"type": "MODIFIED", "object": {"metadata": {"name": "a"}}}')
    assert (event.type, event.object) == ("MODIFIED", {"metadata": {"name": "a"}})
    assert watch_event(b'{"type": "BOOKMARK", "object": null}').object == {}
    gone = b'{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}'
    with pytest.raises(errors.Gone):
        watch_event(gone)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"<html>oops</html>", "answer is not JSON"),
        (b"\xff\xfe\xfa", "answer is not JSON"),
        (b'{"a": 1', "answer is not JSON"),
        (b"[1, 2]", "answer is not a JSON object"),
        (b"NaN", "answer is not a JSON object"),
    ],
    ids=["html", "not-utf8", "cut-short", "array", "nan"],
)
def test_a_malformed_answer_is_a_server_error(data: bytes, message: str) -> None:
    with pytest.raises(errors.ServerError) as caught:
        answer("GET", "/api/v1/pods", 200, data, Headers())
    assert caught.value.code == 200
    assert caught.value.message == f"GET /api/v1/pods: {message}"


def test_an_empty_success_is_an_empty_object() -> None:
    assert answer("DELETE", "/x", 200, b"", Headers()).body == {}
