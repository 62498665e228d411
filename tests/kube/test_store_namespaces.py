"""``Store``'s index by namespace: a LIST of one namespace reads only that namespace's
objects, in name order, and stays equal to them through replaces and removes."""

from __future__ import annotations

from sandbox.kube.store import Store


def _obj(name: str) -> dict[str, object]:
    return {"metadata": {"name": name}}


def _names(items: list[dict[str, object]]) -> list[str]:
    return [item["metadata"]["name"] for item in items]  # type: ignore[index]


def test_a_namespaces_list_follows_its_objects() -> None:
    store = Store()
    for namespace, name in [("a", "z"), ("b", "y"), ("a", "x"), ("a", "z")]:
        store.put(("", "events", namespace, name), _obj(name))
    assert _names(store.peek_list("", "events", "a")) == ["x", "z"]
    assert _names(store.peek_list("", "events", "b")) == ["y"]
    store.remove(("", "events", "b", "y"))
    assert store.peek_list("", "events", "b") == []
    store.put(("", "events", "b", "w"), _obj("w"))
    assert _names(store.peek_list("", "events", "b")) == ["w"]
    assert _names(store.peek_list("", "events")) == ["x", "z", "w"]
    assert store.peek_list("", "events", "c") == []
