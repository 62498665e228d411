"""The patch diff: applying ``diff(original, edited)`` to the original gives the edited
object exactly, for random documents and random edits (CONVENTIONS 5, DESIGN §4)."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.policy.builders import gpu_pod
from webhook.patch import apply, diff, shallow

#: Keys that need RFC 6901 escaping, and keys that look like escapes already.
KEYS = st.sampled_from(["a", "b", "a/b", "x~y", "~1", "~0/", "/", "", "0", "-"]) | st.text(
    max_size=4
)
LEAF = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.0, 1.0, 1.5])
    | st.text(max_size=4)
)
JSON = st.recursive(
    LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=25,
)
DOC = st.dictionaries(KEYS, JSON, max_size=5)
#: Generating nested documents is slow on a loaded machine; that is not a failure.
SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]


def canonical(doc: Any) -> str:
    """A text that tells JSON values apart exactly (``true`` is not ``1``, ``1`` is not
    ``1.0``; map order does not matter)."""
    return json.dumps(doc, sort_keys=True)


def assert_round_trip(original: dict[str, Any], edited: dict[str, Any]) -> None:
    before, wanted = canonical(original), canonical(edited)
    ops = diff(original, edited)
    assert canonical(original) == before, "diff changed the original"
    assert canonical(apply(original, ops)) == wanted
    assert canonical(original) == before
    if before == wanted:
        assert ops == []


@st.composite
def edited_copy(draw: st.DrawFn, original: Any, depth: int = 0) -> Any:
    """``original`` edited at random the way the webhook edits: maps and lists on the
    way to an edit are copied, everything else shared with the original."""
    if isinstance(original, dict) and original and depth < 4 and draw(st.booleans()):
        out = dict(original)
        for key in draw(st.lists(st.sampled_from(sorted(original)), max_size=2, unique=True)):
            action = draw(st.sampled_from(["edit", "drop", "replace"]))
            if action == "edit":
                out[key] = draw(edited_copy(original[key], depth + 1))
            elif action == "drop":
                del out[key]
            else:
                out[key] = draw(JSON)
        for key, value in draw(st.dictionaries(KEYS, JSON, max_size=2)).items():
            out[key] = value
        return out
    if isinstance(original, list) and depth < 4 and draw(st.booleans()):
        out_list = list(original)
        for _ in range(draw(st.integers(0, 3))):
            action = draw(st.sampled_from(["append", "insert", "pop", "edit"]))
            at = draw(st.integers(0, len(out_list)))
            if action == "append":
                out_list.append(draw(JSON))
            elif action == "insert":
                out_list.insert(at, draw(JSON))
            elif out_list and action == "pop":
                out_list.pop(min(at, len(out_list) - 1))
            elif out_list:
                i = min(at, len(out_list) - 1)
                out_list[i] = draw(edited_copy(out_list[i], depth + 1))
        return out_list
    return draw(JSON) if draw(st.booleans()) else original


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW_OK)
@given(data=st.data(), original=DOC)
def test_random_edits_of_a_shared_copy_round_trip(data: st.DataObject, original: Any) -> None:
    edited = data.draw(edited_copy(original))
    if not isinstance(edited, dict):
        edited = {"replaced": edited}
    assert_round_trip(original, edited)


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW_OK)
@given(data=st.data(), original=DOC)
def test_random_edits_of_a_deep_copy_round_trip(data: st.DataObject, original: Any) -> None:
    """The baseline's way: nothing shared, everything compared by value."""
    edited = data.draw(edited_copy(copy.deepcopy(original)))
    if not isinstance(edited, dict):
        edited = {"replaced": edited}
    assert_round_trip(original, copy.deepcopy(edited))


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW_OK)
@given(original=DOC, edited=DOC)
def test_unrelated_documents_round_trip(original: Any, edited: Any) -> None:
    assert_round_trip(original, edited)


@pytest.mark.parametrize(
    ("original", "edited"),
    [
        pytest.param({"a": True}, {"a": 1}, id="true becomes 1"),
        pytest.param({"a": 1}, {"a": 1.0}, id="1 becomes 1.0"),
        pytest.param({"a": [1, [True]]}, {"a": [1, [1]]}, id="a nested true becomes 1"),
        pytest.param({"a": {"b": 0}}, {"a": {"b": False}}, id="0 becomes false in a map"),
    ],
)
def test_a_value_of_another_json_type_is_replaced(original: Any, edited: Any) -> None:
    ops = diff(original, edited)
    assert ops
    assert canonical(apply(original, ops)) == canonical(edited)


def test_new_parents_are_added_whole_and_keys_are_escaped() -> None:
    pod = gpu_pod(1).build()
    edited = dict(pod)
    meta = shallow(edited, "metadata", dict)
    shallow(meta, "annotations", dict)["a/b~c"] = "x"
    shallow(shallow(edited, "spec", dict), "tolerations", list).append({"key": "k"})
    assert diff(pod, edited) == [
        {"op": "add", "path": "/metadata/annotations", "value": {"a/b~c": "x"}},
        {"op": "add", "path": "/spec/tolerations", "value": [{"key": "k"}]},
    ]
    meta["annotations"] = {"a/b~c": "y"}
    edited_again = {**edited, "metadata": {**meta, "annotations": {"a/b~c": "z"}}}
    assert diff(edited, edited_again) == [
        {"op": "replace", "path": "/metadata/annotations/a~1b~0c", "value": "z"}
    ]


def test_a_list_grown_at_the_end_gets_adds_and_a_strip_gets_removes() -> None:
    old = {"l": [{"k": 1}, {"k": 2}, {"k": 3}]}
    assert diff(old, {"l": [*old["l"], {"k": 4}]}) == [
        {"op": "add", "path": "/l/3", "value": {"k": 4}}
    ]
    assert diff(old, {"l": [{"k": 1}, {"k": 3}]}) == [{"op": "remove", "path": "/l/1"}]


def test_shallow_copies_only_the_path_and_replaces_malformed_containers() -> None:
    pod = {"metadata": {"annotations": "nonsense", "labels": {"a": "b"}}, "spec": {}}
    edited = dict(pod)
    meta = shallow(edited, "metadata", dict)
    notes = shallow(meta, "annotations", dict)
    notes["x"] = "y"
    assert pod == {"metadata": {"annotations": "nonsense", "labels": {"a": "b"}}, "spec": {}}
    assert meta["labels"] is pod["metadata"]["labels"]
    assert edited["spec"] is pod["spec"]
    assert canonical(apply(pod, diff(pod, edited))) == canonical(edited)


def test_the_diff_agrees_with_jsonpatch_on_an_admitted_pod() -> None:
    pod = gpu_pod(1).build()
    edited = copy.deepcopy(pod)
    edited["spec"]["tolerations"] = [{"key": "k", "operator": "Exists"}]
    edited["metadata"]["annotations"] = {"a": "1"}
    ours = apply(pod, diff(pod, edited))
    theirs = jsonpatch.make_patch(pod, edited).apply(pod)
    assert canonical(ours) == canonical(theirs) == canonical(edited)
