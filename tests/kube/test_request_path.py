"""The emulator's request path stays exact where it skips work (docs/developer/performance.md,
"The kube emulator's request path", sixth session).

Each shortcut is tied to what it replaced: orjson's decoding to ``json``'s (values,
types and refusals), the remembered RBAC decisions to a fresh decision after every
RBAC write, the store's per-resource write stamps to the writes, the header lookup and
body reading to Starlette's ``Headers.get`` and ``Request.stream``, a JSON answer to
the messages Starlette's ``Response`` sends, and a watch's one timer to its changes,
bookmarks and end.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import MutableMapping
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from sandbox.kube import encoding, rbac, routes, warnheaders
from sandbox.kube.admission_api import UserInfo
from sandbox.kube.errors import ApiError
from sandbox.kube.rbac import RBAC_GROUP, Authorizer
from sandbox.kube.store import Store
from tests.kube.conftest import Running

# --- JSON decoding: orjson where it gives json's result --------------------------------------


def _json_decode(raw: bytes | str) -> Any:
    """The decoding before orjson: json, NaN/Infinity refused, overflow refused."""

    def constant(text: str) -> Any:
        raise ValueError(text)

    # json's value, a lone surrogate made U+FFFD as Go's decoder makes it
    decoded = encoding.refuse_non_finite(json.loads(raw, parse_constant=constant))
    return _go_surrogates(decoded)


def _go_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in value)
    if isinstance(value, dict):
        return {_go_surrogates(k): _go_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_go_surrogates(v) for v in value]
    return value


def _typed(value: Any) -> Any:
    """``value`` with every scalar's type beside it (1 and 1.0, 0.0 and -0.0 differ)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, float):
        return ("float", value.hex())
    return (type(value).__name__, value)


def _same_outcome(raw: bytes | str) -> None:
    try:
        expected = _typed(_json_decode(raw))
    except ValueError:
        with pytest.raises(ValueError, match=r"."):
            encoding.decode(raw)
        return
    assert _typed(encoding.decode(raw)) == expected


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(VALUES, st.booleans(), st.booleans())
def test_a_json_text_decodes_to_what_json_gives(
    value: Any, ascii_only: bool, as_text: bool
) -> None:
    """Every JSON document decodes to json's value with json's types — integers beyond
    64 bits stay integers, floats are the same doubles, strings the same (escaped or
    not), lone surrogates included (as U+FFFD)."""
    text = json.dumps(value, ensure_ascii=ascii_only)
    _same_outcome(text if as_text else text.encode("utf-8", "surrogatepass"))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=40) | st.text(alphabet='{}[]:,"\\ue0123456789.-+Na ', max_size=40))
def test_any_input_is_accepted_or_refused_as_json_decides(raw: bytes | str) -> None:
    """Arbitrary bytes and near-JSON text: accepted with json's value, or refused."""
    _same_outcome(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"123456789012345678901234567890",
        b"-9223372036854775809",
        b"18446744073709551616",
        b'{"n": 1e3, "m": -0.0, "k": 0.1}',
        b'"\\ud800"',
        b"\xef\xbb\xbf{}",
        '{"a": "é"}'.encode("utf-16"),
        b'{"a":1,"a":2}',
        b'{"a": "\xff"}',
        b"[1e-400]",
    ],
)
def test_what_orjson_reads_differently_or_refuses_goes_to_json(raw: bytes) -> None:
    """Big integers (orjson would give a float), lone surrogates, a BOM, UTF-16,
    duplicate keys, invalid UTF-8 and underflow: json's outcome."""
    _same_outcome(raw)


@pytest.mark.parametrize("raw", ["1e400", '{"a": [1, -1e999]}', "123.456e789"])
def test_a_number_beyond_the_float_range_is_refused(raw: str) -> None:
    """json reads it as an infinity, which no JSON can carry (orjson would write it as
    null): refused as NaN is, as the apiserver's decoder refuses it."""
    with pytest.raises(ValueError, match="unsupported value"):
        encoding.decode(raw)
    with pytest.raises(ValueError, match="unsupported value"):
        encoding.decode(raw.encode())


def test_a_body_with_an_overflowing_number_is_a_400_and_nothing_is_stored(
    api: httpx.Client, ns: str
) -> None:
    raw = b'{"metadata":{"name":"cm"},"data":{"a":"b"},"x":1e400}'
    made = api.post(
        f"/api/v1/namespaces/{ns}/configmaps",
        content=raw,
        headers={"Content-Type": "application/json"},
    )
    assert made.status_code == 400, made.text
    assert api.get(f"/api/v1/namespaces/{ns}/configmaps/cm").status_code == 404


# --- the store's write stamps -----------------------------------------------------------------


def test_every_write_of_a_resource_and_only_its_writes_change_its_stamp() -> None:
    store = Store()
    assert store.written("g", "things") == 0
    store.put(("g", "things", "", "a"), {"metadata": {"name": "a"}})
    first = store.written("g", "things")
    assert first == store.resource_version
    store.put(("g", "others", "", "b"), {"metadata": {"name": "b"}})
    assert store.written("g", "things") == first
    store.put(("g", "things", "", "a"), {"metadata": {"name": "a"}})
    second = store.written("g", "things")
    assert second > first
    store.remove(("g", "things", "", "missing"))
    assert store.written("g", "things") == second
    store.remove(("g", "things", "", "a"))
    assert store.written("g", "things") > second


# --- RBAC decisions remembered until an RBAC write --------------------------------------------

JANE = UserInfo("jane", "u1", ("devs", "system:authenticated"))


def _role(name: str, verbs: list[str], namespace: str = "") -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]
    return {"metadata": meta, "rules": rules}


def _binding(name: str, kind: str, role: str, subject: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": kind, "name": role},
        "subjects": [subject],
    }


def _get_pod(user: UserInfo = JANE, name: str = "p", namespace: str = "ns") -> rbac.Request:
    return rbac.Request(user, "get", "", "pods", "", namespace, name)


def test_a_remembered_decision_follows_every_rbac_write() -> None:
    """Granted by a new binding, refused once its role loses the verb, granted again by
    a namespaced Role, refused once that binding is deleted — each seen by the very next
    decision — and a fresh authorizer always agrees with the remembering one."""
    store = Store()
    authz = Authorizer(store)

    def decided(req: rbac.Request) -> bool:
        verdict = authz.allowed(req)
        assert verdict == Authorizer(store)._decide(req)
        return verdict

    user = {"kind": "User", "name": "jane"}
    assert not decided(_get_pod())
    store.put((RBAC_GROUP, "clusterroles", "", "reader"), _role("reader", ["get"]))
    assert not decided(_get_pod())
    crb = (RBAC_GROUP, "clusterrolebindings", "", "jane")
    store.put(crb, _binding("jane", "ClusterRole", "reader", user))
    assert decided(_get_pod())
    assert decided(_get_pod())
    assert not decided(rbac.Request(JANE, "delete", "", "pods", "", "ns", "p"))
    store.put((RBAC_GROUP, "clusterroles", "", "reader"), _role("reader", ["list"]))
    assert not decided(_get_pod())
    store.put((RBAC_GROUP, "roles", "ns", "r"), _role("r", ["get"], "ns"))
    group = {"kind": "Group", "name": "devs"}
    rb = (RBAC_GROUP, "rolebindings", "ns", "devs")
    store.put(rb, _binding("devs", "Role", "r", group))
    assert decided(_get_pod())
    assert not decided(_get_pod(namespace="other"))
    assert not decided(_get_pod(UserInfo("joe", "u2", ("system:authenticated",))))
    store.remove(rb)
    assert not decided(_get_pod())
    store.remove(crb)
    assert not decided(_get_pod())


def test_a_decision_is_remembered_and_the_memo_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = Store()
    store.put((RBAC_GROUP, "clusterroles", "", "reader"), _role("reader", ["get"]))
    subject = {"kind": "User", "name": "jane"}
    store.put(
        (RBAC_GROUP, "clusterrolebindings", "", "j"),
        _binding("j", "ClusterRole", "reader", subject),
    )
    authz = Authorizer(store)
    decisions: list[rbac.Request] = []
    decide = authz._decide

    def counted(req: rbac.Request) -> bool:
        decisions.append(req)
        return decide(req)

    monkeypatch.setattr(authz, "_decide", counted)
    monkeypatch.setattr(rbac, "DECISIONS_KEPT", 3)
    for _ in range(3):
        assert authz.allowed(_get_pod())
    assert len(decisions) == 1
    for n in range(10):
        authz.allowed(_get_pod(name=f"p{n}"))
    assert len(authz._decisions) <= 3


def test_a_new_binding_is_honoured_by_the_next_request(
    kube: Running, api: httpx.Client, ns: str
) -> None:
    """Through the API: refused, then (right after the binding's create) allowed, then
    refused again right after its delete."""
    path = f"/api/v1/namespaces/{ns}/configmaps"
    with kube.client(kube.server.mint_token("lee", ["testers"])) as lee:
        assert lee.get(path).status_code == 403
        role = _role("cm-reader", ["list"])
        role["rules"][0]["resources"] = ["configmaps"]
        assert (
            api.post(f"/apis/{RBAC_GROUP}/v1/namespaces/{ns}/roles", json=role).status_code == 201
        )
        binding = _binding("lee", "Role", "cm-reader", {"kind": "User", "name": "lee"})
        bindings = f"/apis/{RBAC_GROUP}/v1/namespaces/{ns}/rolebindings"
        assert api.post(bindings, json=binding).status_code == 201
        assert lee.get(path).status_code == 200
        assert api.delete(f"{bindings}/lee").status_code == 200
        assert lee.get(path).status_code == 403


# --- headers, body and answers without Starlette's per-request objects ------------------------

HEADER_NAMES = st.sampled_from([b"accept", b"authorization", b"content-type", b"x-a", b"accept-x"])


@given(st.lists(st.tuples(HEADER_NAMES, st.binary(max_size=8)), max_size=6), HEADER_NAMES)
def test_a_header_is_read_as_starlette_reads_it(
    headers: list[tuple[bytes, bytes]], name: bytes
) -> None:
    """The first header of the name, latin-1 — ``Headers.get`` over the same scope."""
    request = Request({"type": "http", "headers": headers})
    assert routes.header(request, name) == Headers(scope=request.scope).get(name.decode())


def _request(messages: list[dict[str, Any]], length: str | None = None) -> Request:
    headers = [(b"content-length", length.encode())] if length is not None else []
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    return Request({"type": "http", "headers": headers}, receive)


async def _streamed(request: Request) -> bytes:
    return b"".join([chunk async for chunk in request.stream()])


@given(st.lists(st.binary(max_size=6), min_size=1, max_size=5), st.booleans())
def test_a_body_is_read_as_starlette_streams_it(chunks: list[bytes], other: bool) -> None:
    """The body's chunks joined, messages of another type passed over."""
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": chunk, "more_body": True} for chunk in chunks[:-1]
    ]
    if other:
        messages.insert(0, {"type": "http.other"})
    messages.append({"type": "http.request", "body": chunks[-1]})
    mine = asyncio.run(routes.read_body(_request(messages)))
    assert mine == asyncio.run(_streamed(_request(messages))) == b"".join(chunks)


def test_a_client_gone_mid_body_and_a_body_too_large() -> None:
    gone: list[dict[str, Any]] = [
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.disconnect"},
    ]
    with pytest.raises(ClientDisconnect):
        asyncio.run(routes.read_body(_request(gone)))
    with pytest.raises(ClientDisconnect):
        asyncio.run(_streamed(_request(gone)))
    with pytest.raises(ApiError) as declared:
        asyncio.run(routes.read_body(_request([], str(routes.MAX_BODY + 1))))
    assert declared.value.code == 413
    half = b"x" * (routes.MAX_BODY // 2 + 1)
    sent = [{"type": "http.request", "body": half, "more_body": True}] * 2
    with pytest.raises(ApiError) as streamed:
        asyncio.run(routes.read_body(_request(sent, "10")))
    assert streamed.value.code == 413


async def _messages(response: Response) -> list[MutableMapping[str, Any]]:
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    await response({"type": "http"}, receive, send)
    return sent


def _starlette_answer(body: bytes, code: int, warnings: list[str]) -> Response:
    """What ``_encoded`` built before: Starlette's Response and appended warnings (their
    values as the apiserver writes them, UTF-8: ``warnheaders``)."""
    response = Response(body, status_code=code, media_type="application/json")
    for value in warnheaders.headers(warnings):
        response.raw_headers.append((b"warning", value))
    return response


@given(
    st.binary(max_size=20),
    st.sampled_from([200, 201, 204, 304, 400, 403, 404, 409, 413, 422, 500]),
    st.lists(st.text(alphabet='ab "\\é-', max_size=8), max_size=3),
)
def test_a_json_answer_sends_what_starlettes_response_sent(
    body: bytes, code: int, warnings: list[str]
) -> None:
    """Same status, headers (order included) and body, in the same two messages."""
    mine = asyncio.run(_messages(routes.JsonAnswer(body, code, warnings)))
    theirs = asyncio.run(_messages(_starlette_answer(body, code, warnings)))
    assert mine == theirs


def test_a_warning_latin_1_cannot_hold_is_sent_as_utf_8() -> None:
    """Rule: warning text is UTF-8 on the wire, as Go writes it (a latin-1 encoding
    refused it, and the write that produced it answered 500 after storing)."""
    answer = routes.JsonAnswer(b"{}", 200, ["snow ☃"])
    assert (b"warning", '299 - "snow ☃"'.encode()) in answer.raw_headers


def test_answers_through_the_server_keep_their_headers(api: httpx.Client, ns: str) -> None:
    """A write and an error Status over HTTP: content-length and content-type as before
    (Warning headers through the server: test_crd.py, test_admission_hook.py)."""
    made = api.post(f"/api/v1/namespaces/{ns}/configmaps", json={"metadata": {"name": "w"}})
    assert made.status_code == 201
    assert made.headers["content-type"] == "application/json"
    assert made.headers["content-length"] == str(len(made.content))
    missing = api.get(f"/api/v1/namespaces/{ns}/configmaps/none")
    assert missing.status_code == 404
    assert missing.json()["reason"] == "NotFound"
    assert missing.headers["content-length"] == str(len(missing.content))


# --- a watch's clock: one timer per stream, not a timeout per change -----------------------


def test_a_busy_watch_gets_its_changes_in_order_bookmarks_and_its_end(
    kube: Running, api: httpx.Client, ns: str
) -> None:
    """Changes written every few milliseconds reach the watch in order, a BOOKMARK comes
    once its interval has passed even while changes flow, and the stream still ends at
    ``timeoutSeconds``; a stream the client leaves is unsubscribed (no watcher left)."""
    path = f"/api/v1/namespaces/{ns}/configmaps"
    kube.server.bookmark_interval = 0.1
    lines: list[dict[str, Any]] = []
    try:
        params = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": "2"}
        with api.stream("GET", path, params=params) as response:
            names = []
            for n in range(30):
                api.post(path, json={"metadata": {"name": f"c{n}"}})
                names.append(f"c{n}")
                time.sleep(0.01)
            raw = response.read().decode()  # returns only when the server ends the stream
    finally:
        kube.server.bookmark_interval = 5.0
    lines = [json.loads(line) for line in raw.split("\n") if line]
    added = [e["object"]["metadata"]["name"] for e in lines if e["type"] == "ADDED"]
    assert added == names
    assert any(e["type"] == "BOOKMARK" for e in lines)
    with api.stream("GET", path, params={"watch": "true"}) as response:
        assert response.status_code == 200
    deadline = time.monotonic() + 30
    while kube.call(lambda: len(kube.server.store._watchers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert kube.call(lambda: len(kube.server.store._watchers)) == 0
