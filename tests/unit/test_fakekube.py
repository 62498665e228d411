"""The unit-test fake refuses what the apiserver refuses, worded as the emulator words it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared.errors import Conflict, Invalid, NotFound
from shared.resources import GPU_RESERVATIONS, LEASES, PODS
from tests.fakekube import FakeKube


def pod(name: str = "p") -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "annotations": {"a": "1"}}
    return {"metadata": meta, "spec": {}, "status": {"phase": "Running"}}


def reservation() -> dict[str, Any]:
    return {"metadata": {"name": "r", "namespace": "ns"}, "spec": {"n": 1}, "status": {"u": 1}}


def test_stale_put_missing_object_and_taken_name() -> None:
    kube = FakeKube()
    stored = kube.add(PODS, pod())
    kube.add(PODS, pod())  # someone else wrote since
    with pytest.raises(Conflict) as stale:
        asyncio.run(kube.replace(PODS, "p", stored, "ns"))
    assert stale.value.message == (
        'Operation cannot be fulfilled on pods "p": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    with pytest.raises(NotFound, match='pods "q" not found'):
        asyncio.run(kube.get(PODS, "q", "ns"))
    with pytest.raises(Conflict) as taken:
        asyncio.run(kube.create(PODS, pod(), "ns"))
    assert taken.value.reason == "AlreadyExists"


def test_custom_resources_and_leases_need_a_resource_version() -> None:
    kube = FakeKube()
    kube.add(GPU_RESERVATIONS, reservation())
    kube.add(LEASES, {"metadata": {"name": "l", "namespace": "ns"}, "spec": {}})
    for res, name in ((GPU_RESERVATIONS, "r"), (LEASES, "l")):
        with pytest.raises(Invalid, match="must be specified for an update"):
            asyncio.run(kube.replace(res, name, {"metadata": {"name": name}}, "ns"))


def test_failed_json_patch_test_is_422_and_a_stale_patched_version_409() -> None:
    kube = FakeKube()
    kube.add(PODS, pod())
    failing = [{"op": "test", "path": "/metadata/uid", "value": "other"}]
    with pytest.raises(Invalid) as invalid:
        asyncio.run(kube.patch(PODS, "p", failing, "ns"))
    assert invalid.value.message == "the server rejected our request due to an error in our request"
    stale = [{"op": "replace", "path": "/metadata/resourceVersion", "value": "0"}]
    with pytest.raises(Conflict):
        asyncio.run(kube.patch(PODS, "p", stale, "ns"))
    assert kube.writes == 0


def test_status_only_through_the_status_subresource() -> None:
    kube = FakeKube()
    current = kube.add(GPU_RESERVATIONS, reservation())
    main = dict(current, spec={"n": 2}, status={"u": 9})
    written = asyncio.run(kube.replace(GPU_RESERVATIONS, "r", main, "ns"))
    assert (written["spec"], written["status"]) == ({"n": 2}, {"u": 1})
    status = dict(written, spec={"n": 3}, status={"u": 5})
    written = asyncio.run(kube.replace(GPU_RESERVATIONS, "r", status, "ns", "status"))
    assert (written["spec"], written["status"]) == ({"n": 2}, {"u": 5})
    created = asyncio.run(
        kube.create(GPU_RESERVATIONS, dict(reservation(), metadata={"name": "s"}), "ns")
    )
    assert "status" not in created.body


def test_delete_with_a_uid_precondition() -> None:
    kube = FakeKube()
    kube.add(PODS, pod())
    with pytest.raises(Conflict, match=r"the UID in the precondition \(old\) does not match"):
        asyncio.run(kube.delete(PODS, "p", "ns", uid="old"))
    asyncio.run(kube.delete(PODS, "p", "ns", uid="uid-p"))
    assert kube.items(PODS) == []
