"""The workload controllers' pure rules (``sandbox.cluster.workloads``) and their client
rate limit (``sandbox.cluster.ratelimit``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sandbox.cluster.ratelimit import BURST, QPS, LimitedClient, TokenBucket
from sandbox.cluster.workloads import (
    POD_TEMPLATE_HASH,
    REPLICASETS,
    deletion_cost,
    deletion_order,
    pod_from_template,
    same_template,
    slow_start,
    template_hash,
)
from shared import vocab


def test_the_bucket_allows_a_burst_of_30_then_20_a_second() -> None:
    """Rule: kube-controller-manager's client defaults, QPS 20 and burst 30: thirty
    requests at once, then one every 50 ms (a fake clock: nothing waits here)."""
    now = [0.0]
    bucket = TokenBucket(now=lambda: now[0])
    assert (QPS, BURST) == (20.0, 30)

    async def take(count: int) -> None:
        for _ in range(count):
            await bucket.take()

    asyncio.run(take(30))
    assert bucket.wait_s() == pytest.approx(0.05)
    now[0] += 0.5
    assert bucket.wait_s() == 0.0
    asyncio.run(take(10))
    assert bucket.wait_s() == pytest.approx(0.05)


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 5), (1, 0)])
def test_a_bucket_refuses_nonsense(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="qps"):
        TokenBucket(qps, burst)


def test_the_template_hash_has_the_controllers_form() -> None:
    """Rule: a string of the safe alphabet, stable for a template, changed by the template
    and by the collision count."""
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}
    digest = template_hash(template)
    assert digest == template_hash(dict(template))
    assert set(digest) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert 1 <= len(digest) <= 10
    assert template_hash(template, 1) != digest
    assert template_hash({"metadata": {}, "spec": {"containers": []}}) != digest


def test_a_pod_from_a_template() -> None:
    """Rule: template labels, annotations and finalizers; ``generateName: <owner>-``; one
    controller ownerReference with blockOwnerDeletion."""
    owner: dict[str, Any] = {
        "metadata": {"name": "web-abc", "namespace": "n", "uid": "u1"},
        "spec": {
            "template": {
                "metadata": {"labels": {"a": "b"}, "annotations": {"x": "y"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            }
        },
    }
    pod = pod_from_template(owner, REPLICASETS)
    assert pod["metadata"]["generateName"] == "web-abc-"
    assert (pod["metadata"]["labels"], pod["metadata"]["annotations"]) == ({"a": "b"}, {"x": "y"})
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web-abc",
            "uid": "u1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert pod["spec"] == owner["spec"]["template"]["spec"]


def test_slow_start_batches_double() -> None:
    """Rule: creations go 1, 2, 4, … (``slowStartBatch``)."""
    assert list(slow_start(10)) == [1, 2, 4, 3]
    assert list(slow_start(0)) == []


def test_scale_down_removes_unassigned_pending_unready_newest_first() -> None:
    def pod(name: str, node: str, phase: str, ready: bool, created: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeName": node} if node else {},
            "status": {
                "phase": phase,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }

    pods = [
        pod("old-ready", "n", "Running", True, "2026-01-01T00:00:00Z"),
        pod("new-ready", "n", "Running", True, "2026-01-02T00:00:00Z"),
        pod("unready", "n", "Running", False, "2026-01-01T00:00:00Z"),
        pod("pending", "n", "Pending", False, "2026-01-01T00:00:00Z"),
        pod("unbound", "", "Pending", False, "2026-01-01T00:00:00Z"),
    ]
    order = [p["metadata"]["name"] for p in sorted(pods, key=deletion_order)]
    assert order == ["unbound", "pending", "unready", "new-ready", "old-ready"]


def _costed(name: str, created: str, cost: Any = None) -> dict[str, Any]:
    notes = {} if cost is None else {vocab.POD_DELETION_COST: cost}
    return {
        "metadata": {"name": name, "creationTimestamp": created, "annotations": notes},
        "spec": {"nodeName": "n"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_among_ready_pods_the_lowest_deletion_cost_goes_first() -> None:
    """``controller.kubernetes.io/pod-deletion-cost`` ranks ready pods before their age:
    an old pod of cost -5 goes before a new one of no cost, one of cost 7 last."""
    pods = [
        _costed("new", "2026-01-02T00:00:00Z"),
        _costed("old-cheap", "2026-01-01T00:00:00Z", "-5"),
        _costed("newest-dear", "2026-01-03T00:00:00Z", "7"),
    ]
    order = [p["metadata"]["name"] for p in sorted(pods, key=deletion_order)]
    assert order == ["old-cheap", "new", "newest-dear"]


@pytest.mark.parametrize("value", ["", "1.5", " 3", "x", "2147483648", "-2147483649", "1_0", 3])
def test_a_deletion_cost_that_is_no_int32_counts_as_zero(value: Any) -> None:
    assert deletion_cost(_costed("p", "2026-01-01T00:00:00Z", value)) == 0


@pytest.mark.parametrize(("value", "cost"), [("+4", 4), ("-2147483648", -(2**31)), ("0", 0)])
def test_a_deletion_cost_is_a_signed_decimal(value: str, cost: int) -> None:
    assert deletion_cost(_costed("p", "2026-01-01T00:00:00Z", value)) == cost


def test_a_replicaset_runs_the_template_up_to_its_hash_label() -> None:
    template = {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": []}}
    hashed = {
        "metadata": {"labels": {"app": "w", POD_TEMPLATE_HASH: "x"}},
        "spec": {"containers": []},
    }
    assert same_template(template, hashed)
    other = {
        "metadata": {"labels": {"app": "v", POD_TEMPLATE_HASH: "x"}},
        "spec": {"containers": []},
    }
    assert not same_template(template, other)


class _Recorder:
    """A gateway stand-in that records calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def create(self, res: Any, body: Any, namespace: Any) -> Any:
        self.calls.append("create")
        return type("R", (), {"body": body})()

    async def get(self, res: Any, name: Any, namespace: Any) -> Any:
        self.calls.append("get")
        return {}

    async def patch(self, *args: Any) -> Any:
        self.calls.append("patch")
        return {}

    async def request(self, *args: Any) -> Any:
        self.calls.append("delete")
        return None


def test_every_controller_request_takes_a_token() -> None:
    """Rule: a controller's client spends one token of its bucket per request, whatever
    the verb (a fake clock that never advances: the 31st request would wait)."""
    bucket = TokenBucket(now=lambda: 0.0)
    recorder = _Recorder()
    client = LimitedClient(recorder, bucket)  # type: ignore[arg-type]
    pod = {"metadata": {"name": "p", "namespace": "n", "uid": "u"}}

    async def use() -> None:
        await client.create(REPLICASETS, {}, "n")
        await client.get(REPLICASETS, "x", "n")
        await client.patch(REPLICASETS, "x", {}, "n")
        await client.delete(REPLICASETS, pod)

    asyncio.run(use())
    assert recorder.calls == ["create", "get", "patch", "delete"]
    assert bucket.wait_s() == 0.0
    assert bucket.tokens == BURST - 4
