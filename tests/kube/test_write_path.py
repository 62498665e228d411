"""The emulator's write path stays exact where it skips work (docs/developer/performance.md).

Array items already found clean or valid are remembered per item schema, an object no
admission plugin changed is not pruned twice, a stored write is kept without copies,
and a change's watch line is encoded once for all watchers alike: each test here would
fail if one of those shortcuts gave a different answer than the full work.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.kube import encoding, schema
from sandbox.kube.admission_api import (
    AdmissionAttributes,
    AdmissionResult,
    MutatingAdmission,
    UserInfo,
)
from sandbox.kube.cluster import Call, present
from sandbox.kube.registry import Registry
from sandbox.kube.strategy import Strategy
from tests.kube.conftest import Running, crd, install_crd

ENTRY = {
    "type": "object",
    "required": ["id", "n"],
    "properties": {"id": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
}
TALLIES = "/apis/example.com/v1/namespaces/{ns}/tallies"


def _schema() -> dict[str, Any]:
    """A fresh status schema (a new identity, as a new CRD version would have)."""
    return {
        "type": "object",
        "properties": {"entries": {"type": "array", "items": json.loads(json.dumps(ENTRY))}},
    }


def _entries(count: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"e{i}", "n": i} for i in range(start, start + count)]


def _causes(errors: list[Any]) -> set[str]:
    return {e.field for e in errors}


# --- the item memo, on the schema functions --------------------------------------------


def test_a_remembered_item_does_not_hide_a_changed_one() -> None:
    """An item valid once is skipped next time; an item differing in any value, or only in
    its value's type (``true`` for ``1``, ``1.0`` for ``1``), is checked in full."""
    status = _schema()
    assert schema.validate({"entries": _entries(3)}, status) == []
    bad = [*_entries(3), {"id": "e1", "n": True}, {"id": "e2", "n": -1}, {"id": "e3", "n": 1.5}]
    assert _causes(schema.validate({"entries": bad}, status)) == {
        "entries[3].n",
        "entries[4].n",
        "entries[5].n",
    }
    assert schema.validate({"entries": [{"id": "e1", "n": 1.0}]}, status) == []


def test_memo_belongs_to_one_schema() -> None:
    """What one schema accepted is judged afresh by another (a changed CRD version)."""
    loose = _schema()
    assert schema.validate({"entries": _entries(2)}, loose) == []
    strict = _schema()
    strict["properties"]["entries"]["items"]["properties"]["n"]["minimum"] = 5
    assert _causes(schema.validate({"entries": _entries(2)}, strict)) == {
        "entries[0].n",
        "entries[1].n",
    }


def test_pruning_a_remembered_item_gives_a_copy_and_unknown_fields_still_drop() -> None:
    status = _schema()
    entries = _entries(2)
    first, dropped = schema.prune({"entries": entries}, status)
    assert (first, dropped) == ({"entries": entries}, [])
    again, _ = schema.prune({"entries": entries}, status)
    assert again["entries"] == entries
    assert all(a is not b for a, b in zip(again["entries"], entries, strict=True))
    extra = [*entries, {"id": "e0", "n": 0, "odd": 1}]
    pruned, dropped = schema.prune({"entries": extra}, status)
    assert pruned["entries"][2] == {"id": "e0", "n": 0}
    assert dropped == ["entries[2].odd"]


def test_pruning_keeps_its_own_clean_copies_as_they_are() -> None:
    """Pruning's own clean copy of a flat item, pruned again (a later write left it
    alone), is kept itself instead of copied again; anything else is still copied and
    pruned. With a default below the items, every item is a fresh copy (defaulting
    writes into what pruning gives)."""
    status = _schema()
    first, _ = schema.prune({"entries": _entries(2)}, status)
    extra = {"id": "e9", "n": 9, "odd": 1}
    again, dropped = schema.prune({"entries": [*first["entries"], extra]}, status)
    assert dropped == ["entries[2].odd"]
    assert again["entries"][0] is first["entries"][0]
    assert again["entries"][1] is first["entries"][1]
    assert again["entries"][2] == {"id": "e9", "n": 9}
    third, _ = schema.prune(again, status)
    assert third["entries"][2] is not again["entries"][2]  # it dropped a field: not kept
    defaulted = _schema()
    items = defaulted["properties"]["entries"]["items"]
    items["properties"]["n"]["default"] = 0
    items["required"] = ["id"]
    one, _ = schema.prune({"entries": [{"id": "a"}]}, defaulted)
    two, _ = schema.prune(one, defaulted)
    assert two["entries"][0] == one["entries"][0]
    assert two["entries"][0] is not one["entries"][0]


_MEMBER_TYPES = st.sampled_from(["string", "integer", "boolean", "number"])
_MEMBER_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(-3, 3, allow_nan=False),
    st.sampled_from(["", "s", "1"]),
    st.just([1]),
    st.just({"a": 1}),
)


@st.composite
def _plain_schemas(draw: st.DrawFn) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(["a", "b", "c"]), unique=True, max_size=3)):
        kind = draw(_MEMBER_TYPES)
        member: dict[str, Any] = {"type": kind, "description": "d"}
        if kind in ("integer", "number"):
            for bound in ("minimum", "maximum"):
                if draw(st.booleans()):
                    member[bound] = draw(st.integers(-2, 2))
        props[key] = member
    required = draw(st.lists(st.sampled_from(["a", "b", "d"]), unique=True, max_size=2))
    return {"type": "object", "properties": props, "required": required}


@settings(max_examples=500, deadline=None)
@given(
    plain=_plain_schemas(),
    value=st.one_of(
        st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), _MEMBER_VALUES, max_size=4),
        _MEMBER_VALUES,
    ),
)
def test_the_quick_check_passes_only_what_validation_passes(
    plain: dict[str, Any], value: Any
) -> None:
    """An item the quick check passes is one full validation finds no fault in (a
    failing quick check only sends the item to full validation)."""
    check = schema.plain_check(plain)
    assert check is not None
    if check(value):
        assert schema.validate(value, plain) == []
    if isinstance(value, dict) and schema.validate(value, plain) == []:
        loose = [
            k
            for k, v in value.items()
            if plain["properties"].get(k, {}).get("type") == "integer" and type(v) is float
        ]
        assert check(value) or loose  # only a whole float for an integer takes the long way


def test_the_quick_check_is_only_for_plain_schemas() -> None:
    member = {"type": "string"}
    for odd in (
        {"type": "object", "properties": {"a": {**member, "pattern": "x"}}},
        {"type": "object", "properties": {"a": {**member, "enum": ["x"]}}},
        {"type": "object", "properties": {"a": {**member, "minimum": 1}}},
        {"type": "object", "properties": {"a": {"type": "object"}}},
        {"type": "object", "properties": {"a": member}, "additionalProperties": member},
        {"type": "object", "properties": {"a": {**member, "nullable": True}}},
        {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        {"type": "array", "items": member},
    ):
        assert schema.plain_check(odd) is None, odd
    assert schema.plain_check(ENTRY) is not None
    assert schema.validate({"entries": [{"id": "x", "n": -1}]}, _schema()) != []


def test_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema, "KNOWN_ITEMS", 8)
    status = _schema()
    for start in range(0, 40, 4):
        assert schema.validate({"entries": _entries(4, start)}, status) == []
    known = schema._VALID.of(status["properties"]["entries"]["items"])
    assert len(known) <= 8


def test_nested_items_are_never_remembered() -> None:
    """Only flat items are remembered: a nested value is validated every time."""
    nested = {"type": "array", "items": {"type": "object", "properties": {"m": ENTRY}}}
    good = [{"m": {"id": "a", "n": 1}}]
    assert schema.validate(good, nested) == []
    assert schema.flat_key(good[0]) is None
    bad = [{"m": {"id": "a", "n": -1}}]
    assert _causes(schema.validate(bad, nested)) == {"[0].m.n"}


# --- through the API ---------------------------------------------------------------------


def _tally_crd() -> dict[str, Any]:
    """The Widget CRD of conftest renamed Tally, with entries in its status."""
    definition = crd(printer=False)
    definition["metadata"]["name"] = "tallies.example.com"
    definition["spec"]["names"] = {"plural": "tallies", "singular": "tally", "kind": "Tally"}
    [version] = definition["spec"]["versions"]
    version["schema"]["openAPIV3Schema"]["properties"] = {
        "spec": {"type": "object", "properties": {"size": {"type": "integer", "default": 1}}},
        "status": _schema(),
    }
    return definition


@pytest.fixture(scope="module")
def tallies(kube: Running) -> str:
    install_crd(kube, _tally_crd())
    return TALLIES


def _tally(api: httpx.Client, ns: str, path: str, name: str = "t") -> dict[str, Any]:
    body = {"apiVersion": "example.com/v1", "kind": "Tally", "metadata": {"name": name}}
    created = api.post(path.format(ns=ns), json={**body, "spec": {}})
    assert created.status_code == 201, created.text
    return created.json()  # type: ignore[no-any-return]


def _put_status(api: httpx.Client, path: str, obj: dict[str, Any]) -> httpx.Response:
    return api.put(f"{path}/{obj['metadata']['name']}/status", json=obj)


def test_status_writes_keep_every_rule_for_items_seen_before(
    api: httpx.Client, ns: str, tallies: str
) -> None:
    """Writes that send back the same entries each time (as a ledger does) still get a 422
    for a bad new entry, and a pruned unknown field, however often the others were seen."""
    path = tallies.format(ns=ns)
    obj = _tally(api, ns, tallies)
    for round_ in range(3):
        obj["status"] = {"entries": _entries(3 + round_)}
        written = _put_status(api, path, obj)
        assert written.status_code == 200, written.text
        obj = written.json()
    refused = {**obj, "status": {"entries": [*_entries(5), {"id": "x", "n": -1}]}}
    answer = _put_status(api, path, refused)
    assert answer.status_code == 422
    assert [c["field"] for c in answer.json()["details"]["causes"]] == ["status.entries[5].n"]
    typed = {**obj, "status": {"entries": [*_entries(5), {"id": "e4", "n": True}]}}
    assert _put_status(api, path, typed).status_code == 422
    odd = {**obj, "status": {"entries": [*_entries(5), {"id": "y", "n": 1, "odd": 2}]}}
    answer = _put_status(api, path, odd)
    assert answer.status_code == 200
    assert answer.json()["status"]["entries"][-1] == {"id": "y", "n": 1}
    assert answer.headers.get_list("warning") == [
        '299 - "unknown field \\"status.entries[5].odd\\""'
    ]


class AddsUnknownField:
    """Puts an undeclared field and drops the defaulted one in Tally specs."""

    async def admit(self, attrs: AdmissionAttributes) -> AdmissionResult:
        obj = attrs.object
        if obj is not None and attrs.resource == "tallies" and not attrs.subresource:
            obj["spec"] = {"extra": True}
        return AdmissionResult(obj)


class Unchanged:
    """Returns what it was given; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def admit(self, attrs: AdmissionAttributes) -> AdmissionResult:
        self.calls += 1
        return AdmissionResult(attrs.object)


class Plugs:
    """The emulated apiserver's admission plugins for one test, and its stored objects."""

    def __init__(self, kube: Running) -> None:
        self.kube = kube
        self.added: list[MutatingAdmission] = []

    def plug(self, plugin: MutatingAdmission) -> None:
        self.kube.server.mutating_admission.append(plugin)
        self.added.append(plugin)

    def stored(self, ns: str, name: str) -> dict[str, Any]:
        store = self.kube.server.store
        found = self.kube.call(lambda: store.get("example.com", "tallies", ns, name))
        assert found is not None
        return found


@pytest.fixture
def admission(kube: Running) -> Iterator[Plugs]:
    """Adds admission plugins for one test (removed after it)."""
    plugs = Plugs(kube)
    yield plugs
    for plugin in plugs.added:
        kube.server.mutating_admission.remove(plugin)


def test_an_object_changed_by_admission_is_pruned_and_defaulted_again(
    admission: Plugs, api: httpx.Client, ns: str, tallies: str
) -> None:
    admission.plug(AddsUnknownField())
    created = _tally(api, ns, tallies)
    assert created["spec"] == {"size": 1}
    updated = api.put(f"{tallies.format(ns=ns)}/t", json={**created, "spec": {"size": 4}})
    assert updated.status_code == 200
    assert updated.json()["spec"] == {"size": 1}
    assert admission.stored(ns, "t")["spec"] == {"size": 1}


def test_an_object_admission_left_alone_is_stored_as_sent(
    admission: Plugs, api: httpx.Client, ns: str, tallies: str
) -> None:
    plugin = Unchanged()
    admission.plug(plugin)
    created = _tally(api, ns, tallies)
    obj = {**created, "status": {"entries": _entries(2)}}
    written = _put_status(api, tallies.format(ns=ns), obj)
    assert written.status_code == 200
    assert admission.stored(ns, "t") == written.json()
    assert written.json()["status"] == {"entries": _entries(2)}
    assert plugin.calls == 2


def test_a_stored_write_is_not_changed_by_the_next_one(
    api: httpx.Client, ns: str, tallies: str
) -> None:
    """The store keeps each write's own object: a later write (status and main resource)
    leaves the earlier state as it was, as a watch replaying both shows."""
    created = _tally(api, ns, tallies)
    path = tallies.format(ns=ns)
    first = _put_status(api, path, {**created, "status": {"entries": _entries(2)}}).json()
    second = _put_status(api, path, {**first, "status": {"entries": _entries(1, 5)}}).json()
    third = api.put(f"{path}/t", json={**second, "spec": {"size": 3}}).json()
    found: list[dict[str, Any]] = []
    _watch(
        api, path, found, resourceVersion=created["metadata"]["resourceVersion"], timeoutSeconds="1"
    )
    assert [e["object"] for e in found] == [first, second, third]
    assert first["status"] == {"entries": _entries(2)}
    assert third["status"] == {"entries": _entries(1, 5)}
    assert third["spec"] == {"size": 3}


# --- one encoding per change ---------------------------------------------------------------


def _watch(api: httpx.Client, path: str, found: list[dict[str, Any]], **params: str) -> None:
    with api.stream("GET", path, params={"watch": "true", **params}) as response:
        for line in response.iter_lines():
            if line:
                found.append(json.loads(line))


def test_watchers_of_one_change_each_get_their_own_event(
    kube: Running, api: httpx.Client, ns: str
) -> None:
    """Two watchers share a MODIFIED encoding; one whose selector the object leaves gets a
    DELETED of the previous state from the same change."""
    cms = f"/api/v1/namespaces/{ns}/configmaps"
    start = api.post(cms, json={"metadata": {"name": "a", "labels": {"w": "1"}}, "data": {}})
    rv = start.json()["metadata"]["resourceVersion"]
    api.patch(
        f"{cms}/a",
        json={"metadata": {"labels": {"w": "2"}}, "data": {"k": "v"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    watches: dict[str, list[dict[str, Any]]] = {"all": [], "all2": [], "w1": []}
    params = {"resourceVersion": rv, "timeoutSeconds": "1"}
    threads = [
        threading.Thread(target=_watch, args=(api, cms, watches["all"]), kwargs=params),
        threading.Thread(target=_watch, args=(api, cms, watches["all2"]), kwargs=params),
        threading.Thread(
            target=_watch, args=(api, cms, watches["w1"]), kwargs={**params, "labelSelector": "w=1"}
        ),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert watches["all"] == watches["all2"]
    [modified] = watches["all"]
    assert modified["type"] == "MODIFIED"
    assert modified["object"]["data"] == {"k": "v"}
    assert modified["object"]["kind"] == "ConfigMap"
    [gone] = watches["w1"]
    assert gone["type"] == "DELETED"
    assert gone["object"]["metadata"]["labels"] == {"w": "1"}
    assert (
        gone["object"]["metadata"]["resourceVersion"]
        == modified["object"]["metadata"]["resourceVersion"]
    )


# --- fewer copies and one encoding per stored state (docs/developer/performance.md) -------


def test_an_item_of_declared_scalars_is_copied_whole() -> None:
    """Pruning's shortcut for a flat item whose keys are all declared gives what the full
    walk gives: an equal copy; an undeclared key or a nested value takes the full walk."""
    items = _schema()["properties"]["entries"]["items"]
    item = {"id": "e1", "n": 1}
    pruned, dropped = schema.prune(item, items, "x", False)
    assert (pruned, dropped) == (item, [])
    assert pruned is not item
    pruned, dropped = schema.prune({"id": "e1", "n": 1, "odd": 2}, items, "x", False)
    assert (pruned, dropped) == (item, ["x.odd"])
    nested = {"type": "object", "properties": {"m": items}}
    pruned, dropped = schema.prune({"m": {"id": "a", "n": 1, "odd": 3}}, nested, "", False)
    assert (pruned, dropped) == ({"m": {"id": "a", "n": 1}}, ["m.odd"])


def test_present_never_changes_the_stored_object() -> None:
    """Showing a stored object through a resource of another apiVersion gives a copy with
    that apiVersion; the stored object keeps its own (a GET reads it in place)."""
    registry = Registry()
    rtype = registry.find("", "v1", "configmaps")
    assert rtype is not None
    call = Call(rtype, Strategy(), UserInfo("u"))
    stored = {"apiVersion": "v0", "kind": "ConfigMap", "metadata": {"name": "a"}}
    shown = present(call, stored)
    assert (shown["apiVersion"], stored["apiVersion"]) == ("v1", "v0")
    assert shown["metadata"] is stored["metadata"]
    same = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
    assert present(call, same) is same


def test_object_encodings_are_kept_by_identity_and_bounded() -> None:
    kept = encoding.ObjectBytes(kept=2)
    first = {"a": "é"}
    assert kept.of(first) == '{"a":"é"}'.encode()
    assert kept.of(first) is kept.of(first)
    equal = {"a": "é"}
    assert kept.of(equal) == kept.of(first)
    assert kept.of(equal) is not kept.of(first)
    for n in range(5):
        kept.of({"n": n})
    assert len(kept._bytes) == 2


def test_the_encoding_is_compact_utf8_and_json_takes_what_orjson_cannot() -> None:
    """orjson's bytes are json's (compact, UTF-8, no ASCII escapes) for what the API
    stores; an integer beyond 64 bits and a key that is no string go to json, which
    encodes them as before; a lone surrogate is still refused."""
    obj = {
        "metadata": {"name": "é", "labels": {"a\u2028b": "ü"}, "generation": 3},
        "spec": {"n": -7, "x": 0.5, "big": 2**63 - 1, "ok": True, "absent": None},
        "status": {"holds": [{"claim": "c", "gpus": 1}], "empty": {}, "list": []},
    }
    strict = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    assert encoding.encode(obj) == strict.encode()
    huge = {"n": 2**70, 1: "one"}
    assert encoding.encode(huge) == b'{"n":1180591620717411303424,"1":"one"}'
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        encoding.encode({"s": "\ud800"})
    line = encoding.watch_line("ADDED", encoding.encode(obj))
    assert json.loads(line) == {"type": "ADDED", "object": obj}


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(text: str) -> None:
    """Python's json reads them; the apiserver's decoder does not, and neither does the
    emulator (so no stored object holds a number JSON cannot write)."""
    with pytest.raises(ValueError, match="looking for beginning of value"):
        encoding.decode(f'{{"a": [1, {text}]}}')
    assert encoding.decode('{"a": [1, 2.5, "NaN"]}') == {"a": [1, 2.5, "NaN"]}
    with pytest.raises(ValueError, match="unsupported value"):
        encoding.refuse_non_finite({"a": [{"b": float(text.lower().replace("infinity", "inf"))}]})
    assert encoding.refuse_non_finite({"a": [1.5, "nan"]}) == {"a": [1.5, "nan"]}


def test_a_body_or_patch_holding_nan_is_refused_and_nothing_changes(
    api: httpx.Client, ns: str, tallies: str
) -> None:
    """A create, a JSON Patch, a merge patch and a YAML body carrying NaN or infinity are
    400s (the emulator's JSON decoding refuses them, as the apiserver's does) and leave
    the stored object as it was."""
    path = tallies.format(ns=ns)
    created = _tally(api, ns, tallies)
    raw = b'{"apiVersion":"example.com/v1","kind":"Tally","metadata":{"name":"n"},"spec":{"x":NaN}}'
    made = api.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert made.status_code == 400, made.text
    assert "json parse error" in made.json()["message"]
    ops = b'[{"op":"add","path":"/status/used","value":Infinity}]'
    patched = api.patch(
        f"{path}/t/status", content=ops, headers={"Content-Type": "application/json-patch+json"}
    )
    assert patched.status_code == 400, patched.text
    merged = api.patch(
        f"{path}/t",
        content=b'{"spec":{"size":-Infinity}}',
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert merged.status_code == 400, merged.text
    yaml_body = b"apiVersion: example.com/v1\nkind: Tally\nmetadata: {name: y}\nspec: {x: .nan}\n"
    from_yaml = api.post(path, content=yaml_body, headers={"Content-Type": "application/yaml"})
    assert from_yaml.status_code == 400, from_yaml.text
    assert api.get(f"{path}/t").json() == created
    assert api.get(f"{path}/n").status_code == 404
    assert api.get(f"{path}/y").status_code == 404


def _patch_status(api: httpx.Client, path: str, ops: list[dict[str, Any]]) -> httpx.Response:
    return api.patch(
        f"{path}/t/status", json=ops, headers={"Content-Type": "application/json-patch+json"}
    )


def test_a_status_patch_shares_what_it_left_alone_and_judges_what_it_changed(
    kube: Running, api: httpx.Client, ns: str, tallies: str
) -> None:
    """A status JSON Patch of a custom resource stores a state sharing the entries it did
    not touch with the state before (which stays as it was); an entry it changed is a
    copy, pruned and validated afresh (an invalid value is a 422 naming it)."""
    path = tallies.format(ns=ns)
    created = _tally(api, ns, tallies)
    assert _put_status(api, path, {**created, "status": {"entries": _entries(3)}}).is_success
    key = ("example.com", "tallies", ns, "t")
    before = kube.call(lambda: kube.server.store.peek(*key))
    before_json = json.dumps(before, sort_keys=True)
    bad = _patch_status(api, path, [{"op": "replace", "path": "/status/entries/1/n", "value": -1}])
    assert bad.status_code == 422
    assert [c["field"] for c in bad.json()["details"]["causes"]] == ["status.entries[1].n"]
    odd = [{"op": "add", "path": "/status/entries/2/odd", "value": 1}]
    assert _patch_status(api, path, odd).status_code == 200
    good = _patch_status(api, path, [{"op": "replace", "path": "/status/entries/1/n", "value": 5}])
    assert good.status_code == 200, good.text
    assert good.json()["status"]["entries"] == [
        *_entries(1),
        {"id": "e1", "n": 5},
        _entries(1, 2)[0],
    ]
    after = kube.call(lambda: kube.server.store.peek(*key))
    assert before is not None
    assert after is not None
    assert after["status"]["entries"][0] is before["status"]["entries"][0]
    assert after["status"]["entries"][1] is not before["status"]["entries"][1]
    assert after["spec"] is not before["spec"]  # a /status write copies the rest
    assert json.dumps(before, sort_keys=True) == before_json


def test_a_status_patch_keeps_every_rule_and_leaves_stored_states_alone(
    api: httpx.Client, ns: str, tallies: str
) -> None:
    """The claim's write shape (a resourceVersion precondition, then appends): a stale
    version is 409, a failed ``test`` 422, an invalid appended entry 422 — none changes the
    stored object — and a good one is the answer, the GET after it and the watch event,
    byte for byte, while the earlier states a watch replays stay as they were written."""
    path = tallies.format(ns=ns)
    created = _tally(api, ns, tallies)
    first = _put_status(api, path, {**created, "status": {"entries": _entries(3)}})
    assert first.status_code == 200
    rv = first.json()["metadata"]["resourceVersion"]

    def append(version: str, entry: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"op": "replace", "path": "/metadata/resourceVersion", "value": version},
            {"op": "add", "path": "/status/entries/-", "value": entry},
        ]

    stale = _patch_status(api, path, append(created["metadata"]["resourceVersion"], _entries(1)[0]))
    assert stale.status_code == 409
    failed = _patch_status(api, path, [{"op": "test", "path": "/status/entries/0/n", "value": 7}])
    assert failed.status_code == 422
    assert failed.json()["reason"] == "Invalid"
    bad = _patch_status(api, path, append(rv, {"id": "x", "n": -1}))
    assert bad.status_code == 422
    assert [c["field"] for c in bad.json()["details"]["causes"]] == ["status.entries[3].n"]
    assert api.get(f"{path}/t").content == first.content

    good = _patch_status(api, path, append(rv, {"id": "é", "n": 9}))
    assert good.status_code == 200, good.text
    assert good.json()["status"]["entries"][-1] == {"id": "é", "n": 9}
    assert good.json()["spec"] == created["spec"]
    assert good.json()["metadata"]["generation"] == created["metadata"]["generation"]
    assert api.get(f"{path}/t").content == good.content
    lines: list[bytes] = []
    with api.stream(
        "GET", path, params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "1"}
    ) as response:
        lines += [line for line in response.iter_bytes() if line]
    [line] = b"".join(lines).splitlines()
    assert line == b'{"type":"MODIFIED","object":' + good.content + b"}"
    replayed: list[dict[str, Any]] = []
    _watch(
        api,
        path,
        replayed,
        resourceVersion=created["metadata"]["resourceVersion"],
        timeoutSeconds="1",
    )
    assert [e["object"] for e in replayed] == [first.json(), good.json()]
    assert api.get(f"{path}/t").json() == good.json()
