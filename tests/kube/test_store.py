"""``sandbox.kube.store.Store``: the per-resource index a LIST reads stays equal to the
objects (puts, replaces, removes), and reads hand out copies unless they peek."""

from __future__ import annotations

from sandbox.kube.store import Store


def _obj(name: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "data": {"k": name}}


def _names(items: list[dict[str, object]]) -> list[str]:
    return [item["metadata"]["name"] for item in items]  # type: ignore[index]


def test_a_list_holds_exactly_the_live_objects_of_its_resource() -> None:
    store = Store()
    store.put(("", "pods", "a", "p2"), _obj("p2"))
    store.put(("", "pods", "b", "p1"), _obj("p1"))
    store.put(("", "configmaps", "a", "c1"), _obj("c1"))
    store.put(("apps", "pods", "a", "other-group"), _obj("other-group"))
    store.put(("", "pods", "a", "p2"), _obj("p2"))  # a replace is not a second entry
    store.put_owned(("", "pods", "c", "p3"), _obj("p3"))
    assert _names(store.list("", "pods")) == ["p2", "p1", "p3"]  # by namespace, name
    assert _names(store.list("", "pods", "b")) == ["p1"]
    store.remove(("", "pods", "a", "p2"))
    assert _names(store.list("", "pods")) == ["p1", "p3"]
    assert store.list("", "secrets") == []
    assert _names(store.list("", "configmaps")) == ["c1"]


def test_list_copies_and_peek_does_not() -> None:
    store = Store()
    store.put(("", "roles", "a", "r"), _obj("r"))
    listed = store.list("", "roles")[0]
    listed["data"] = "changed"
    assert store.peek("", "roles", "a", "r") == {
        "metadata": {"name": "r", "resourceVersion": "1"},
        "data": {"k": "r"},
    }
    assert store.peek_list("", "roles")[0] is store.peek("", "roles", "a", "r")
