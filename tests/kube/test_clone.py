"""``sandbox.kube.clone.clone``: the emulator's copy of a JSON value is deep and equal."""

from __future__ import annotations

from typing import Any

from sandbox.kube.clone import clone


def test_a_clone_is_equal_and_shares_no_container() -> None:
    obj: dict[str, Any] = {"a": [1, {"b": "c", "d": [True, None, 2.5]}], "e": {"f": {}}}
    copied = clone(obj)
    assert copied == obj
    copied["a"][1]["d"].append("x")
    copied["e"]["f"]["g"] = 1
    assert obj == {"a": [1, {"b": "c", "d": [True, None, 2.5]}], "e": {"f": {}}}


def test_a_value_that_is_not_json_is_still_copied_deeply() -> None:
    inner = [1]
    copied = clone({"t": (inner,)})
    assert copied == {"t": ([1],)}
    assert copied["t"][0] is not inner
