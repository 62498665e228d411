"""Issue 13 acceptance 1–4 in the sandbox with the real kubectl, on a scaled clock.

kube + app + cluster (the emulated scheduler and kubelet) run in-process; the
reconciler runs as a real process. The h100 class is three reserved nodes of 4 GPUs:
carol's 4-GPU pod (inside her booking's guarantee) fills one node, bob's eight 1-GPU
pods fill the other two. An admin then ends bob's booking (its window is moved into
the past), so bob's pods overstay; dave books 4 GPUs starting 90 s later.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared import vocab
from shared.clock import ScaledClock, parse_utc
from tests.reconciler.test_evict_sandbox import kubectl
from tests.reconciler.test_integration import World, eventually, kubectl_sandbox_marks, world
from tests.reconciler.test_queue_sandbox import ENV as QUEUE_ENV
from tests.reconciler.test_queue_sandbox import GATE

pytest.importorskip("sandbox.kube.component")

_log = logging.getLogger(__name__)
pytestmark = kubectl_sandbox_marks(120)
ENV = {
    **QUEUE_ENV,
    "PREEMPTION_LEAD_MINUTES": "1",
    "TERMINATION_WARNING_LEAD_MINUTES": "2",
    "PREEMPTION_CHECK_INTERVAL": "10",
}
USERS = ["alice", "bob", "carol", "dave"]


def node(name: str, gpus: int = 4) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {vocab.GPU_CLASS_LABEL: "h100"},
        "taints": [f"{vocab.RESERVATION_TAINT_KEY}=h100:NoSchedule"],
        "allocatable": {vocab.GPU_RESOURCE: str(gpus), "cpu": "32", "memory": "256Gi"},
    }


def scenario(nodes: list[dict[str, Any]], bookings: list[dict[str, Any]]) -> dict[str, Any]:
    total = sum(int(n["allocatable"][vocab.GPU_RESOURCE]) for n in nodes)
    return {
        "namespaces": [*USERS, vocab.PRODUCT_NAME],
        "nodes": nodes,
        "app": {
            "timezone": "Europe/Berlin",
            "seed": 7,
            "classes": [
                {
                    "id": 1,
                    "name": "H100",
                    "label_value": "h100",
                    "total_gpus": total,
                    "max_gpus_per_reservation": 8,
                }
            ],
            "users": USERS,
            "groups": [{"name": "lab", "members": USERS, "classes": ["h100"]}],
            "bookings": [
                {"group": "lab", "gpu_class": "h100", "start": "+0s", "end": "+2h", **b}
                for b in bookings
            ],
        },
    }


def manifest(name: str, user: str, gpus: int = 1, on: str | None = None) -> dict[str, Any]:
    """A gated h100 pod (the reconciler admits it while its owner's booking is open),
    pinned to node ``on`` by its host-name label when given."""
    pinned = {"nodeSelector": {"kubernetes.io/hostname": on}} if on else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": user,
            "labels": {vocab.GPU_CLASS_LABEL: "h100"},
            "annotations": {vocab.SANDBOX_RUN_SECONDS: "36000"},
        },
        "spec": {
            **pinned,
            "schedulingGates": [{"name": GATE}],
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {vocab.GPU_RESOURCE: str(gpus)}},
                }
            ],
        },
    }


async def create(config: Path, *pods: dict[str, Any]) -> None:
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(pods)})
    await asyncio.to_thread(kubectl, config, "create", "--validate=false", "-f", "-", stdin=body)


async def pods_of(config: Path, user: str) -> list[dict[str, Any]]:
    text = await asyncio.to_thread(kubectl, config, "get", "pods", "-n", user, "-o", "json")
    items: list[dict[str, Any]] = json.loads(text)["items"]
    return items


async def events_of(config: Path, user: str, reason: str) -> list[dict[str, Any]]:
    text = await asyncio.to_thread(kubectl, config, "get", "events", "-n", user, "-o", "json")
    return [e for e in json.loads(text)["items"] if e.get("reason") == reason]


def running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]


def notes(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


async def all_running(config: Path, user: str, count: int) -> bool:
    found = running(await pods_of(config, user))
    return len([p for p in found if not p["metadata"].get("deletionTimestamp")]) == count


async def book(w: World, user: str, gpus: int, start: str, end: str) -> int:
    body = {"username": user, "group": "lab", "gpu_class": "h100", "gpu_count": gpus}
    answer = await w.http.post(
        f"{w.app}/_sandbox/bookings", json={**body, "start": start, "end": end}
    )
    assert answer.status_code == 201, answer.text
    rid: int = answer.json()["id"]
    return rid


async def end_booking(w: World, rid: int) -> None:
    """An admin moves the booking's window into the past: its pods overstay."""
    answer = await w.http.post(
        f"{w.app}/_sandbox/bookings/{rid}/move", json={"start": "-10m", "end": "-1s"}
    )
    assert answer.status_code == 200, answer.text


async def overstaying(config: Path, user: str, count: int) -> bool:
    pods = await pods_of(config, user)
    status = [notes(p).get(vocab.GUARANTEE_STATUS) for p in pods]
    return status.count(vocab.GUARANTEE_STATUS_OVERSTAY) == count


async def full_class(w: World, config: Path) -> None:
    """carol's 4-GPU pod on one node, bob's eight 1-GPU pods on the other two."""
    await create(config, manifest("train", "carol", 4))
    await eventually(lambda: all_running(config, "carol", 1), 30)
    await create(config, *(manifest(f"job-{i}", "bob") for i in range(8)))
    await eventually(lambda: all_running(config, "bob", 8), 30)


def test_acceptance_1_and_3_warned_then_preempted_booking_runs_forecast(tmp_path: Path) -> None:
    asyncio.run(acceptance_1(tmp_path))


async def acceptance_1(tmp_path: Path) -> None:
    # 2x: between dave's booking and phase A (30 sandbox s) the test makes several
    # kubectl calls and the forecast checks, which must come before phase A: 15 wall s
    # leave a loaded machine room (at 4x, 7.5 s did not always).
    clock = ScaledClock(factor=2.0)
    seed = scenario(
        [node("h100-r1"), node("h100-r2"), node("h100-r3")],
        [{"username": "bob", "gpu_count": 8}, {"username": "carol", "gpu_count": 4}],
    )
    async with world(tmp_path, clock, ("kube", "app", "cluster"), seed) as w:
        config = tmp_path / "kubeconfig"
        proc = await w.replica("r1", True, **ENV)
        await full_class(w, config)
        await end_booking(w, 1)
        await eventually(lambda: overstaying(config, "bob", 8), 20)
        rid = await book(w, "dave", 4, "+90s", "+1h")
        res = await eventually(lambda: w.get(f"{vocab.RESERVATION_REF_PREFIX}{rid}"), 10)
        start = parse_utc(res["spec"]["start"])
        await create(config, manifest("big", "dave", 4))

        # Warned before phase A: dave's 4 GPUs need one node, so the planner frees the
        # block of one node's 4 overstayers; the app chooses among that node's pods,
        # which are therefore all at risk 1 — and only they are warned.
        async def warned() -> list[dict[str, Any]]:
            pods = await pods_of(config, "bob")
            found = [p for p in pods if vocab.TERMINATION_WARNING_AT in notes(p)]
            return found if len(found) >= 4 else []  # the four are patched one by one

        at_risk = await eventually(warned, 20)
        bob = await pods_of(config, "bob")
        where = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in bob}
        assert len(at_risk) == 4
        assert len({where[p["metadata"]["name"]] for p in at_risk}) == 1
        assert {notes(p)[vocab.TERMINATION_WARNING_RISK] for p in at_risk} == {"1.00"}
        assert all(" CET" in notes(p)[vocab.TERMINATION_WARNING_MESSAGE] for p in at_risk)
        carol = await pods_of(config, "carol")
        assert vocab.TERMINATION_WARNING_AT not in notes(carol[0])
        told = await events_of(config, "bob", vocab.REASON_TERMINATION_WARNING)
        assert {e["involvedObject"]["name"] for e in told} == {
            p["metadata"]["name"] for p in at_risk
        }
        assert {e["type"] for e in told} == {"Warning"}
        # Stamped with the reconciler's sandbox clock: a loaded poll may see them late.
        assert all(stamped(e) < start - timedelta(minutes=1) for e in told), "after phase A"

        await forecast_checks(w, proc.url, start, {p["metadata"]["name"] for p in at_risk})

        # Phase A: exactly enough overstayers (one node's 4) are preempted.
        async def preempted() -> list[dict[str, Any]]:
            return await events_of(config, "bob", vocab.REASON_PREEMPTED)

        await eventually(preempted, 60)
        await ran_after(config, "dave", start, clock)
        gone = await events_of(config, "bob", vocab.REASON_PREEMPTED)
        assert all(stamped(e) >= start - timedelta(minutes=1, seconds=1) for e in gone)
        assert len(gone) == 4
        assert await events_of(config, "carol", vocab.REASON_PREEMPTED) == []
        survivors = [
            p for p in await pods_of(config, "bob") if not p["metadata"].get("deletionTimestamp")
        ]
        assert len(survivors) == 4
        # The risk shown was the risk acted on: the victims are the pods warned.
        assert {e["involvedObject"]["name"] for e in gone} == {
            p["metadata"]["name"] for p in at_risk
        }
        # Acceptance 4: the app answered, and its choice was the one used.
        assert await selections(w, proc.url) == {"app": 1.0}


async def ran_after(config: Path, user: str, start: datetime, clock: ScaledClock) -> None:
    """The user's only pod runs, started (the emulated kubelet's sandbox stamp) no
    earlier than ``start``. How soon after is logged, not checked: issue 13 asks for
    "within 5 s", 1.25 to 2.5 wall s on these scaled clocks, which a loaded machine
    cannot promise. The wait expected is the wall time left until ``start`` (phase A
    preempts about a sandbox minute before it) plus 10 s."""

    async def ran() -> dict[str, Any] | None:
        found = running(await pods_of(config, user))
        return found[0] if found else None

    until_start_s = max(0.0, (start - clock.now()).total_seconds() / clock.factor)
    pod = await eventually(ran, until_start_s + 10)
    lag = (parse_utc(pod["status"]["startTime"]) - start).total_seconds()
    _log.info("%s's pod started %.1f sandbox s after its booking's start", user, lag)
    assert lag >= -1, f"{user}'s pod started {-lag:.1f} s before its booking"


def stamped(event: dict[str, Any]) -> datetime:
    return parse_utc(event["firstTimestamp"])


async def forecast_checks(w: World, url: str, start: datetime, at_risk: set[str]) -> None:
    """Acceptance 3 before the boundary: guaranteed pods at 0, the overstayers the
    sweep will take at risk 1 in the bucket of the kill window, the others at 0; the
    namespace filter; 401 without the token."""
    token = {"Authorization": f"Bearer {w.ctx.inbound_token}"}
    path = f"{url}/api/forecast/preemption-risk"
    answer = await w.http.get(path, headers=token)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    spans = [(parse_utc(b["start"]), parse_utc(b["end"])) for b in body["buckets"]]
    kill_from = start - timedelta(minutes=1)
    hit = {i for i, (a, b) in enumerate(spans) if kill_from < b and start >= a}
    pods = {p["name"]: p for p in body["pods"]}
    carol = pods["train"]
    assert [b["risk"] for b in carol["buckets"]] == [0, 0, 0]
    assert (
        carol["buckets"][0]["state"] == vocab.GUARANTEE_STATUS_GUARANTEED
    )  # her booking ends in 2 h
    for i in range(8):
        risks = [b["risk"] for b in pods[f"job-{i}"]["buckets"]]
        expected = 1.0 if f"job-{i}" in at_risk else 0.0
        assert all(risks[k] == expected for k in hit), risks
        assert all(risks[k] == 0 for k in range(3) if k not in hit), risks
    only = (await w.http.get(path, params={"namespace": "carol"}, headers=token)).json()
    assert [p["name"] for p in only["pods"]] == ["train"]
    assert len(only["buckets"]) == 3
    assert (await w.http.get(path)).status_code == 401
    wrong = await w.http.get(path, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong.headers["www-authenticate"] == "Bearer"


async def selections(w: World, url: str) -> dict[str, float]:
    """``gpu_reservation_preemption_selections_total`` by who chose."""
    text = (await w.http.get(f"{url}/metrics")).text
    found = {}
    for line in text.splitlines():
        if line.startswith("gpu_reservation_preemption_selections_total{"):
            labels, value = line.rsplit(" ", 1)
            found[labels.split('by="')[1].split('"')[0]] = float(value)
    return found


def test_acceptance_2_and_4_one_nodes_block_freed_with_the_random_fallback(
    tmp_path: Path,
) -> None:
    asyncio.run(acceptance_2(tmp_path))


async def acceptance_2(tmp_path: Path) -> None:
    """Four 2-GPU nodes, full: bob's overstayers job-1 and job-2 share h100-n1, job-3 and
    job-4 sit beside carol's guaranteed pods. Dave's 2-GPU booking needs one node's
    block: job-1 and job-2 die, not two pods on different nodes. The app's victim call
    times out (a fault delays it past the client's 15 s): the fallback still frees it."""
    clock = ScaledClock(factor=4.0)
    names = ["h100-n1", "h100-n2", "h100-n3", "h100-n4"]
    seed = scenario(
        [node(n, 2) for n in names],
        [{"username": "bob", "gpu_count": 4}, {"username": "carol", "gpu_count": 4}],
    )
    env = {**ENV, "PREEMPTION_LEAD_MINUTES": "2", "TERMINATION_WARNING_LEAD_MINUTES": "3"}
    async with world(tmp_path, clock, ("kube", "app", "cluster"), seed) as w:
        config = tmp_path / "kubeconfig"
        proc = await w.replica("r1", True, **env)
        placed = {
            ("bob", "job-1"): "h100-n1",
            ("bob", "job-2"): "h100-n1",
            ("bob", "job-3"): "h100-n2",
            ("bob", "job-4"): "h100-n3",
            ("carol", "c-1"): "h100-n2",
            ("carol", "c-2"): "h100-n3",
            ("carol", "c-3"): "h100-n4",
            ("carol", "c-4"): "h100-n4",
        }
        await create(config, *(manifest(p, u, 1, n) for (u, p), n in placed.items()))
        await eventually(lambda: all_running(config, "bob", 4), 30)
        await eventually(lambda: all_running(config, "carol", 4), 30)
        await end_booking(w, 1)
        await eventually(lambda: overstaying(config, "bob", 4), 20)
        fault = {"method": "POST", "path": "/api/reservations/preemption-victims", "delay_s": 17}
        assert (await w.http.post(f"{w.app}/_sandbox/faults", json=fault)).status_code < 300
        rid = await book(w, "dave", 2, "+150s", "+1h")
        res = await eventually(lambda: w.get(f"{vocab.RESERVATION_REF_PREFIX}{rid}"), 10)
        start = parse_utc(res["spec"]["start"])
        await create(config, manifest("pair", "dave", 2))

        async def preempted() -> list[dict[str, Any]]:
            return await events_of(config, "bob", vocab.REASON_PREEMPTED)

        await eventually(preempted, 80)
        await ran_after(config, "dave", start, clock)
        gone = sorted(e["involvedObject"]["name"] for e in await preempted())
        assert gone == ["job-1", "job-2"]
        (pair,) = await pods_of(config, "dave")
        assert pair["spec"]["nodeName"] == "h100-n1"
        assert await events_of(config, "carol", vocab.REASON_PREEMPTED) == []
        assert await selections(w, proc.url) == {"local": 1.0}


def test_acceptance_3_forecast_503_while_the_node_watch_is_not_synced(tmp_path: Path) -> None:
    asyncio.run(unsynced(tmp_path))


async def unsynced(tmp_path: Path) -> None:
    """The Kubernetes emulator fails every node LIST: the replica's node watch never
    syncs, so the forecast answers 503; once nodes can be listed again, 200. (The fault
    hits every client: the release is installed with a first replica, scaled away,
    before it — the sandbox's own caches and the webhook have synced by then.)"""
    async with world(tmp_path) as w:
        kube = w.ctx.handles["kube"]
        await (await w.replica("r0", True, **ENV)).stop()
        kube.faults.add(method="GET", path="/api/v1/nodes", status=500, count=None)
        proc = await w.replica("r1", True, **ENV)
        path = f"{proc.url}/api/forecast/preemption-risk"
        token = {"Authorization": f"Bearer {w.ctx.inbound_token}"}
        for _ in range(3):  # pods and reservations sync; nodes never do
            answer = await w.http.get(path, headers=token)
            assert answer.status_code == 503, answer.text
            assert "not known" in answer.json()["detail"]
            await asyncio.sleep(0.3)
        kube.faults.clear()

        async def served() -> bool:
            return (await w.http.get(path, headers=token)).status_code == 200

        await eventually(served, 20)
