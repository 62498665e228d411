"""The release's values layers: Helm's parser, Helm's precedence, Helm's messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox.values import Layers, ValuesError, parse_set, read_file, set_into, user_layers


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("name=value", {"name": "value"}),
        ("a=b,c=d", {"a": "b", "c": "d"}),
        ("outer.inner=value", {"outer": {"inner": "value"}}),
        ("name={a,b,c}", {"name": ["a", "b", "c"]}),
        ("servers[0].port=80", {"servers": [{"port": 80}]}),
        ("name=value1\\,value2", {"name": "value1,value2"}),
        (
            "nodeSelector.kubernetes\\.io/role=master",
            {"nodeSelector": {"kubernetes.io/role": "master"}},
        ),
        ("name=null", {"name": None}),
        ("a=1,b=true,c=0.5,d=007", {"a": 1, "b": True, "c": "0.5", "d": "007"}),
    ],
    ids=[
        "plain",
        "pairs",
        "dotted",
        "list",
        "index",
        "escaped-comma",
        "escaped-dot",
        "null",
        "types",
    ],
)
def test_set_is_parsed_by_helms_own_parser(expression: str, expected: dict[str, Any]) -> None:
    assert parse_set(expression) == expected


@pytest.mark.parametrize("expression", ["a.b", "a[x]=1", "a[-1]=1"])
def test_a_malformed_set_gives_helms_message(expression: str) -> None:
    with pytest.raises(ValuesError, match="failed parsing --set data"):
        parse_set(expression)


def test_files_merge_in_order_and_every_set_beats_every_file(tmp_path: Path) -> None:
    first = write(tmp_path, "1.yaml", "webhook: {replicas: 2, port: 9443}\nx: [1, 2]\n")
    second = write(tmp_path, "2.yaml", "webhook: {replicas: 3}\nx: [3]\n")
    files, sets = user_layers([first, second], ["webhook.replicas=5", "webhook.replicas=4"])
    merged = Layers({"webhook": {"replicas": 1, "healthPort": 1}}, {}, files, sets).merged()
    assert merged["webhook"] == {"replicas": 4, "port": 9443, "healthPort": 1}
    assert merged["x"] == [3]  # a file replaces a list whole


def test_a_set_index_replaces_that_element_only() -> None:
    base = {"a": [{"b": 1, "c": 2}, "keep"], "s": "x"}
    assert set_into(base, parse_set("a[0].b=9")) == {"a": [{"b": 9, "c": 2}, "keep"], "s": "x"}
    assert set_into(base, parse_set("a[3]=z"))["a"] == [{"b": 1, "c": 2}, "keep", None, "z"]
    assert set_into(base, parse_set("s.t=1"))["s"] == {"t": 1}


def test_null_reaches_the_chart_to_delete_a_default() -> None:
    assert Layers({"a": {"b": 1}}, {}, (), ("a.b=null",)).merged() == {"a": {"b": None}}


def test_upgrade_layers_go_on_top() -> None:
    """``helm upgrade --reuse-values`` coalesces the new values over the release's
    config: an upgrade's file beats an earlier ``--set`` (Helm's ``CoalesceTables(new,
    current.Config)``), and within one command ``--set`` beats ``-f``."""
    layers = Layers({"a": 1}, {"b": 1}, ({"a": 2},), ("a=3",))
    more = layers.plus(({"a": 4, "c": 1},), ("c=2",))
    assert more.merged() == {"a": 4, "b": 1, "c": 2}
    again = more.plus(({"c": 5},))
    assert again.merged() == {"a": 4, "b": 1, "c": 5}
    assert Layers.from_json(again.to_json()) == again


@pytest.mark.parametrize(
    ("text", "expected"),
    [("a: [\n", "failed to parse"), ("- 1\n- 2\n", "failed to parse")],
    ids=["not-yaml", "not-a-mapping"],
)
def test_a_bad_values_file_gives_helms_message(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ValuesError, match=expected):
        read_file(write(tmp_path, "v.yaml", text))


def test_a_missing_or_empty_values_file(tmp_path: Path) -> None:
    with pytest.raises(ValuesError, match="open"):
        read_file(tmp_path / "absent.yaml")
    assert read_file(write(tmp_path, "empty.yaml", "")) == {}
