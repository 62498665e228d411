"""How the API server's answers and watch lines are decoded (``shared.kubewire``): what
is not JSON, or not the JSON object expected, is our ``ServerError`` with its message,
never a crash of the reader."""

from __future__ import annotations

import pytest

from shared import errors
from shared.kubewire import answer, watch_event


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
