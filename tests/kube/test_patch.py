"""PATCH flavours and their failure codes (facts §3.1, §3.5; checklist 18–19, 39)."""

from __future__ import annotations

from functools import partial
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.kube.clone import clone
from sandbox.kube.errors import ApiError
from sandbox.kube.patch import _equal, _json_equal, _simple, json_patch, with_jsonpatch
from tests.kube.conftest import pod

CM = "/api/v1/namespaces/{ns}/configmaps"


def _setup(api: httpx.Client, ns: str) -> dict[str, Any]:
    created: dict[str, Any] = api.post(
        CM.format(ns=ns), json={"metadata": {"name": "c"}, "data": {"a": "1"}}
    ).json()
    return created


def _patch(api: httpx.Client, path: str, body: object, content_type: str) -> httpx.Response:
    return api.patch(
        path, content=__import__("json").dumps(body), headers={"Content-Type": content_type}
    )


def test_json_patch_test_failure_is_422(api: httpx.Client, ns: str) -> None:
    """Rule: a failed JSON Patch ``test`` → 422 Invalid with the message ``the server rejected our
    request due to an error in our request`` and nothing written (a field-level
    compare-and-swap)."""
    created = _setup(api, ns)
    ops = [
        {"op": "test", "path": "/data/a", "value": "2"},
        {"op": "replace", "path": "/data/a", "value": "3"},
    ]
    response = _patch(api, f"{CM.format(ns=ns)}/c", ops, "application/json-patch+json")
    assert response.status_code == 422
    body = response.json()
    assert (body["kind"], body["status"], body["reason"], body["code"]) == (
        "Status",
        "Failure",
        "Invalid",
        422,
    )
    assert body["message"] == "the server rejected our request due to an error in our request"
    current = api.get(f"{CM.format(ns=ns)}/c").json()
    assert current["data"] == {"a": "1"}
    assert current["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    ops[0]["value"] = "1"
    passed = _patch(api, f"{CM.format(ns=ns)}/c", ops, "application/json-patch+json")
    assert passed.status_code == 200
    assert passed.json()["data"] == {"a": "3"}


def test_json_patch_on_missing_path_is_422(api: httpx.Client, ns: str) -> None:
    """Rule: an operation that does not apply (missing parent) → 422."""
    _setup(api, ns)
    ops = [{"op": "add", "path": "/metadata/annotations/x", "value": "1"}]
    assert (
        _patch(api, f"{CM.format(ns=ns)}/c", ops, "application/json-patch+json").status_code == 422
    )


def test_patch_with_stale_resource_version_conflicts(api: httpx.Client, ns: str) -> None:
    """Rule: a patch setting metadata.resourceVersion (merge patch or a JSON Patch ``replace``) is
    a precondition → 409 with the "object has been modified" message when stale; without it a
    patch applies to the current object and never conflicts."""
    created = _setup(api, ns)
    api.patch(
        f"{CM.format(ns=ns)}/c",
        json={"data": {"b": "2"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    old_rv = created["metadata"]["resourceVersion"]
    stale = {"metadata": {"resourceVersion": old_rv}, "data": {"c": "3"}}
    response = _patch(api, f"{CM.format(ns=ns)}/c", stale, "application/merge-patch+json")
    assert response.status_code == 409
    assert response.json()["message"] == (
        'Operation cannot be fulfilled on configmaps "c": the object has been modified; please '
        "apply your changes to the latest version and try again"
    )
    ops = [{"op": "replace", "path": "/metadata/resourceVersion", "value": old_rv}]
    response = _patch(api, f"{CM.format(ns=ns)}/c", ops, "application/json-patch+json")
    assert (response.status_code, response.json()["reason"]) == (409, "Conflict")
    assert (
        _patch(
            api, f"{CM.format(ns=ns)}/c", {"data": {"c": "3"}}, "application/merge-patch+json"
        ).status_code
        == 200
    )


def test_merge_patch_null_deletes(api: httpx.Client, ns: str) -> None:
    """Rule: RFC 7386: null deletes a key."""
    _setup(api, ns)
    body = _patch(
        api,
        f"{CM.format(ns=ns)}/c",
        {"data": {"a": None, "b": "2"}},
        "application/merge-patch+json",
    ).json()
    assert body["data"] == {"b": "2"}


def test_charset_suffix_is_ignored(api: httpx.Client, ns: str) -> None:
    """Rule: ``; charset=utf-8`` on the Content-Type is accepted."""
    _setup(api, ns)
    response = _patch(
        api,
        f"{CM.format(ns=ns)}/c",
        {"data": {"b": "2"}},
        "application/merge-patch+json; charset=utf-8",
    )
    assert response.status_code == 200


def test_strategic_merge_replaces_tolerations_and_merges_containers(
    api: httpx.Client, ns: str
) -> None:
    """Rule: strategic merge: tolerations are atomic, containers merge by name."""
    api.post(f"/api/v1/namespaces/{ns}/pods", json=pod())
    patch = {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}
    body = _patch(
        api, f"/api/v1/namespaces/{ns}/pods/p", patch, "application/strategic-merge-patch+json"
    ).json()
    assert body["spec"]["containers"][0]["image"] == "busybox:2"
    assert body["spec"]["containers"][0]["terminationMessagePath"] == "/dev/termination-log"
    existing = body["spec"]["tolerations"]
    added = {"key": "k", "operator": "Exists", "effect": "NoExecute"}
    body = _patch(
        api,
        f"/api/v1/namespaces/{ns}/pods/p",
        {"spec": {"tolerations": [*existing, added]}},
        "application/strategic-merge-patch+json",
    ).json()
    assert body["spec"]["tolerations"] == [*existing, added]


def test_custom_resources_refuse_strategic_merge(api: httpx.Client, ns: str, widgets: str) -> None:
    """Rule: custom resources do not accept strategic merge patch → 415 naming the accepted types;
    JSON Patch, merge patch and apply work on them."""
    api.post(
        widgets.format(ns=ns),
        json={
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"size": 1},
        },
    )
    path = f"{widgets.format(ns=ns)}/w"
    response = _patch(api, path, {"spec": {"size": 2}}, "application/strategic-merge-patch+json")
    assert response.status_code == 415
    assert response.json()["reason"] == "UnsupportedMediaType"
    assert response.json()["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )
    ops = [{"op": "replace", "path": "/spec/size", "value": 3}]
    assert _patch(api, path, ops, "application/json-patch+json").json()["spec"]["size"] == 3
    merged = _patch(api, path, {"spec": {"size": 4}}, "application/merge-patch+json")
    assert merged.json()["spec"]["size"] == 4
    manifest = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 5}\n"
    applied = api.patch(
        path,
        content=manifest,
        headers={"Content-Type": "application/apply-patch+yaml"},
        params={"fieldManager": "me"},
    )
    assert (applied.status_code, applied.json()["spec"]["size"]) == (200, 5)


def test_json_patch_with_too_many_operations(api: httpx.Client, ns: str) -> None:
    """Rule: a JSON Patch may have 10000 operations; more → 413 RequestEntityTooLarge."""
    _setup(api, ns)
    ops = [{"op": "test", "path": "/data/a", "value": "1"}] * 10000
    path = f"{CM.format(ns=ns)}/c"
    assert _patch(api, path, ops, "application/json-patch+json").status_code == 200
    response = _patch(api, path, [*ops, ops[0]], "application/json-patch+json")
    assert response.status_code == 413
    assert response.json()["reason"] == "RequestEntityTooLarge"


def test_apply_patch_requires_field_manager(api: httpx.Client, ns: str) -> None:
    """Rule: apply-patch+yaml needs ``fieldManager`` (422 without); with it a missing object is "
    "created."""
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied}\ndata: {a: '1'}\n"
    path = f"{CM.format(ns=ns)}/applied"
    headers = {"Content-Type": "application/apply-patch+yaml"}
    assert api.patch(path, content=manifest, headers=headers).status_code == 422
    created = api.patch(path, content=manifest, headers=headers, params={"fieldManager": "me"})
    assert created.status_code == 201


def test_unknown_patch_type_is_415(api: httpx.Client, ns: str) -> None:
    """Rule: an unknown PATCH content type → 415."""
    _setup(api, ns)
    assert _patch(api, f"{CM.format(ns=ns)}/c", {}, "text/plain").status_code == 415


def test_json_patch_of_a_custom_resources_status(api: httpx.Client, ns: str, widgets: str) -> None:
    """Rule: a JSON Patch of ``/status`` applies to the whole stored object but writes only
    its status (a spec edit in it is dropped), takes a ``replace`` of
    ``metadata.resourceVersion`` as a precondition (409 when stale), and is atomic: an
    operation that cannot apply (422) leaves the object as it was, including the
    operations before it (the ledger's claim write, ``shared.ledger.appended_ops``)."""
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "s"}}
    created = api.post(widgets.format(ns=ns), json={**body, "spec": {"size": 1}}).json()
    status_path = f"{widgets.format(ns=ns)}/s/status"
    version = created["metadata"]["resourceVersion"]
    ops: list[dict[str, Any]] = [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": version},
        {"op": "add", "path": "/status", "value": {"used": 1}},
        {"op": "replace", "path": "/spec/size", "value": 9},
    ]
    written = _patch(api, status_path, ops, "application/json-patch+json")
    assert written.status_code == 200
    assert (written.json()["status"], written.json()["spec"]["size"]) == ({"used": 1}, 1)
    stale = _patch(api, status_path, ops, "application/json-patch+json")
    assert (stale.status_code, stale.json()["reason"]) == (409, "Conflict")
    half = [
        {"op": "add", "path": "/status/used", "value": 5},
        {"op": "add", "path": "/status/missing/deeper", "value": 1},
    ]
    assert _patch(api, status_path, half, "application/json-patch+json").status_code == 422
    stored = api.get(f"{widgets.format(ns=ns)}/s").json()
    assert stored["status"] == {"used": 1}
    assert stored["metadata"]["resourceVersion"] == written.json()["metadata"]["resourceVersion"]


# --- the direct path for add/replace/remove gives what jsonpatch gives ----------------------

_TOKENS = st.sampled_from(["a", "b", "0", "1", "2", "-", "01", "", "~1", "x"])
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(["s", ""]))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "0"]), inner)
    ),
    max_leaves=6,
)


@st.composite
def _ops(draw: st.DrawFn) -> list[Any]:
    count = draw(st.integers(1, 4))
    ops: list[Any] = []
    for _ in range(count):
        kind = draw(st.sampled_from(["add", "replace", "remove", "test", "move", "bogus"]))
        path = "/" + "/".join(draw(st.lists(_TOKENS, min_size=0, max_size=3)))
        op: dict[str, Any] = {"op": kind, "path": draw(st.sampled_from([path, path[1:], 7]))}
        if draw(st.booleans()) or kind in ("add", "replace", "test"):
            op["value"] = draw(_VALUES)
        if kind == "move":
            op["from"] = "/a"
        ops.append(draw(st.sampled_from([op, op, op, "add"])))
    return ops


def _outcome(apply: Any, doc: dict[str, Any], ops: list[Any]) -> Any:
    before = clone(doc)
    try:
        result = apply(doc, ops)
    except ApiError as exc:
        result = (exc.code, exc.status["reason"], exc.status["message"])
    assert doc == before  # the target is never changed, whichever way it went
    return result


@settings(max_examples=400, deadline=None)
@given(
    doc=st.dictionaries(st.sampled_from(["a", "b", "0", "-"]), _VALUES, max_size=3),
    ops=_ops(),
)
def test_a_json_patch_gives_what_jsonpatch_gives(doc: dict[str, Any], ops: list[Any]) -> None:
    """Rule (facts §3.1): the result, or the refusal (status, reason, message), is the
    same whether the patch took the direct path or ``jsonpatch``'s."""
    assert _outcome(json_patch, doc, ops) == _outcome(with_jsonpatch, doc, ops)


@settings(max_examples=400, deadline=None)
@given(
    doc=st.dictionaries(st.sampled_from(["a", "b", "0", "-"]), _VALUES, max_size=3),
    ops=_ops(),
)
def test_a_sharing_json_patch_gives_what_jsonpatch_gives(
    doc: dict[str, Any], ops: list[Any]
) -> None:
    """The sharing patch (custom resources) gives the same result or refusal, never
    changes the target (``_outcome`` checks), and whatever it shares with the target is
    a container no op changed: changing the result's own containers after it does not
    reach the target."""
    shared = _outcome(partial(json_patch, share=True), doc, ops)
    assert shared == _outcome(with_jsonpatch, doc, ops)
    if isinstance(shared, dict):
        before = clone(doc)
        again = json_patch(doc, ops, share=True)
        changed = [op for op in ops if isinstance(op, dict) and op.get("op") != "test"]
        for op in changed:  # the containers on a changing op's path are the result's own
            container: Any = again
            try:
                for part in op["path"][1:].split("/")[:-1]:
                    container = container[part if isinstance(container, dict) else int(part)]
            except (KeyError, IndexError, TypeError, ValueError):
                continue  # a later op removed it, or an escaped path jsonpatch applied
            if isinstance(container, dict):
                container["__mark__"] = 1
            elif isinstance(container, list):
                container.append("__mark__")
        assert doc == before


def test_a_sharing_patch_copies_only_the_containers_on_its_paths() -> None:
    """A claim's patch shares the untouched holds and spec with the stored object and
    copies the root, ``status`` and the holds array it changes."""
    holds = [{"claim": f"c{i}", "gpus": 1} for i in range(3)]
    doc: dict[str, Any] = {
        "metadata": {"uid": "u"},
        "spec": {"gpuCount": 4},
        "status": {"holds": holds, "usedGpus": 3},
    }
    ops = [
        {"op": "test", "path": "/metadata/uid", "value": "u"},
        {"op": "remove", "path": "/status/holds/0"},
        {"op": "add", "path": "/status/holds/-", "value": {"claim": "c3", "gpus": 1}},
        {"op": "replace", "path": "/status/holds/0/gpus", "value": 2},
        {"op": "add", "path": "/status/usedGpus", "value": 4},
    ]
    result = json_patch(doc, ops, share=True)
    assert result == with_jsonpatch(doc, ops)
    assert result["spec"] is doc["spec"]
    assert result["metadata"] is doc["metadata"]  # only tested: the caller copies it
    assert result["status"] is not doc["status"]
    assert result["status"]["holds"] is not holds
    assert result["status"]["holds"][0] is not holds[1]  # changed: a copy
    assert result["status"]["holds"][1] is holds[2]  # untouched: shared
    assert holds == [{"claim": f"c{i}", "gpus": 1} for i in range(3)]
    assert json_patch(doc, ops)["spec"] is not doc["spec"]  # not sharing: a whole copy


@settings(max_examples=400, deadline=None)
@given(
    first=st.one_of(_VALUES, st.dictionaries(st.sampled_from(["a", "b"]), _SCALARS)),
    second=st.one_of(_VALUES, st.dictionaries(st.sampled_from(["a", "b"]), _SCALARS)),
)
def test_a_tests_comparison_is_jsonpatchs(first: Any, second: Any) -> None:
    """The direct path's ``test`` comparison gives jsonpatch's answer (``true`` is not
    ``1``, ``1`` is ``1.0``), whatever the values, including a value against itself."""
    assert _equal(first, second) == bool(_json_equal(first, second))
    assert _equal(first, clone(first)) == bool(_json_equal(first, clone(first)))
    assert _equal({"n": 1, "b": True}, {"b": 1, "n": 1.0}) is False
    assert _equal({"n": 1, "b": True}, {"b": True, "n": 1.0}) is True


def test_the_claims_patch_takes_the_direct_path() -> None:
    """A ledger claim's patch (its tests of uid, generation and token, or a
    resourceVersion precondition; appended holds; totals) is applied directly; its
    values are copies, never the patch's own; a ``test`` compares as jsonpatch does
    (``true`` is not ``1``) and a failing one leaves the patch to jsonpatch."""
    hold = {"claim": "c", "gpus": 1}
    doc: dict[str, Any] = {
        "metadata": {"resourceVersion": "7", "uid": "u", "generation": 1},
        "status": {"holds": [], "usedGpus": 0, "ledgerToken": "t"},
    }
    ops = [
        {"op": "test", "path": "/metadata/uid", "value": "u"},
        {"op": "test", "path": "/metadata/generation", "value": 1},
        {"op": "test", "path": "/status/ledgerToken", "value": "t"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "add", "path": "/status/holds/-", "value": hold},
        {"op": "add", "path": "/status/usedGpus", "value": 1},
    ]
    assert _simple(doc, ops)
    assert doc["status"] == {"holds": [hold], "usedGpus": 1, "ledgerToken": "t"}
    assert doc["status"]["holds"][0] is not hold
    assert not _simple(clone(doc), [{"op": "test", "path": "/metadata/generation", "value": True}])
    refused = _outcome(json_patch, doc, [{"op": "test", "path": "/status/usedGpus", "value": 2}])
    assert refused[:2] == (422, "Invalid")
