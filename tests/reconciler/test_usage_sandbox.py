"""Issue 31 acceptance 1 and 2: booked versus used in the sandbox, read with the real
``kubectl gpures usage`` and from the reconcilers' metrics, across a leader change and
a restart.

kube, app, cluster (scheduler, kubelet) and the webhook run in-process, the reconciler
as real processes on a scaled clock. Three owners each book 4 h100 GPUs for the same
window: alice runs 4 GPUs for all of it, bob 2 GPUs for its first half, carol never comes
and her booking is cancelled as a no-show. Mid-window the leader is killed (the standby
takes over), later the new leader is stopped and a fresh replica restarts the count.

The *known values* are what the scenario did, read from Kubernetes: each pod's
containers' ``startedAt``/``finishedAt`` and the no-show record's ``cancelledAt``,
clipped to the window — computed here plainly, not with the product's code. The
accounting must agree within 1 %; the designed shares (100 %, 25 %, 0 %) are checked
loosely (the pods start a few sandbox seconds after the window opens).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sandbox.release_replicas import ReconcilerPod
from sandbox.runner import clock_env
from sandbox.scenario import load_scenario
from shared import vocab
from shared.clock import ScaledClock, parse_utc
from shared.resources import PODS
from tests.reconciler.test_integration import World, eventually, kubectl_sandbox_marks, world
from tests.sandboxkit import book

pytest.importorskip("sandbox.kube.component")

pytestmark = kubectl_sandbox_marks(300)
NS = vocab.PRODUCT_NAME
SCALE = 10.0
#: The window (sandbox seconds) and when it opens after the booking is made.
WINDOW_S = 600
LEAD_S = 60
PLUGIN = Path(sys.executable).parent / "kubectl-gpures"
ROOT = Path(__file__).resolve().parents[2]
ENV = {
    "NOSHOW_TIMEOUT_MINUTES": "1",
    "RESERVATION_FETCH_INTERVAL": "3600",
    "QUEUE_PROCESSOR_INTERVAL": "10",
    "LEADER_ELECTION_LEASE_SECONDS": "20",
    "LEADER_ELECTION_RENEW_SECONDS": "5",
    # A pass every sandbox second: a replica's counters scraped just before it is killed
    # miss at most one pass (Prometheus misses what it had not scraped the same way).
    "USAGE_INTERVAL_SECONDS": "1",
    "USAGE_CHECKPOINT_SECONDS": "1",
}
OWNERS = ("alice", "bob", "carol")
#: The most GPUs any owner books or runs at once (each books 4).
MOST_GPUS = 4


def gpu_pod(name: str, namespace: str, gpus: int, run_s: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {vocab.GPU_CLASS_LABEL: "h100"},
            "annotations": {vocab.SANDBOX_RUN_SECONDS: str(run_s)},
        },
        "spec": {
            "tolerations": [
                {
                    "key": vocab.GPU_CLASS_LABEL,
                    "operator": "Equal",
                    "value": "h100",
                    "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
                }
            ],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {vocab.GPU_RESOURCE: str(gpus)}},
                }
            ],
        },
    }


def plugin(config: Path, clock: ScaledClock, *args: str) -> str:
    """``kubectl gpures …`` as a user types it: kubectl finds the plugin on PATH; the
    plugin's clock is the sandbox's."""
    env = {
        **os.environ,
        **clock_env(clock),
        "PATH": f"{PLUGIN.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(config),
        # The plugin runs this tree's code (the interpreter's install may be another's).
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [shutil.which("kubectl") or "kubectl", vocab.CRD_SHORT_NAME, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def seconds(a: datetime, b: datetime) -> float:
    return max(0.0, (b - a).total_seconds())


def ran(pod: dict[str, Any]) -> tuple[datetime, datetime | None]:
    """The pod's containers' start and finish, as Kubernetes recorded them."""
    assert "containerStatuses" in pod["status"], (pod["metadata"], pod["status"])
    (status,) = pod["status"]["containerStatuses"]
    state = status["state"].get("running") or status["state"]["terminated"]
    end = state.get("finishedAt")
    return parse_utc(state["startedAt"]), parse_utc(end) if end else None


async def running(w: World, name: str, namespace: str) -> bool:
    pod = await w.gateway.get(PODS, name, namespace)
    return bool(pod["status"].get("phase") == "Running")


async def leads(w: World, proc: ReconcilerPod) -> bool:
    if not proc.running:
        return False
    return bool((await w.http.get(f"{proc.url}/health")).json()["leader"])


async def leader_of(w: World, procs: list[ReconcilerPod]) -> ReconcilerPod:
    async def found() -> ReconcilerPod | None:
        for p in procs:
            if await leads(w, p):
                return p
        return None

    got: ReconcilerPod = await eventually(found, 10)
    return got


#: The counters ``counted`` reads, by sample name, and the labels of the series.
COUNTERS = {f"gpu_reservation_usage_{k}_gpu_seconds_total": k for k in ("booked", "used")}
SERIES = {"gpu_class": "h100", "kind": "booking", "group": "lab"}


async def counted(w: World, proc: ReconcilerPod) -> dict[str, dict[str, float]]:
    """The replica's usage counters by owner (booked, used), from one scrape."""
    text = (await w.http.get(f"{proc.url}/metrics")).text
    out = {owner: dict.fromkeys(COUNTERS.values(), 0.0) for owner in OWNERS}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            kind, labels = COUNTERS.get(sample.name), sample.labels
            ours = all(labels.get(k) == v for k, v in SERIES.items())
            if kind is not None and ours and labels.get("owner") in out:
                out[labels["owner"]][kind] = sample.value
    return out


async def scraped_then_stilled(
    w: World, proc: ReconcilerPod, still: Callable[[], Awaitable[None]]
) -> tuple[dict[str, dict[str, float]], float]:
    """Scrape the replica's counters, then ``still`` it (it counts nothing after); also
    the sandbox seconds from the scrape to its stillness, which it may have counted
    unseen (what Prometheus would miss the same way): a bound measured, not assumed."""
    began = time.monotonic()
    seen = await counted(w, proc)
    await still()
    return seen, (time.monotonic() - began) * SCALE


async def frozen(proc: ReconcilerPod) -> None:
    proc.signal(signal.SIGSTOP)


def test_acceptance_booked_versus_used_through_a_leader_change_and_a_restart(
    tmp_path: Path,
) -> None:
    asyncio.run(scenario(tmp_path))


async def scenario(tmp_path: Path) -> None:
    clock = ScaledClock(factor=SCALE)
    plan = load_scenario()
    plan["app"]["bookings"] = []  # only the three bookings below
    components = ("kube", "app", "cluster", "webhook")
    async with world(tmp_path, clock, components, scenario=plan) as w:
        config = tmp_path / "kubeconfig"
        a = await w.replica("ra", True, **ENV)
        b = await w.replica("rb", False, **ENV)
        rids = {
            owner: await book(
                w.http,
                w.app,
                user=owner,
                gpus=4,
                start=f"+{LEAD_S}s",
                end=f"+{LEAD_S + WINDOW_S}s",
                gpu_class="h100",
            )
            for owner in OWNERS
        }
        names = {o: f"{vocab.RESERVATION_REF_PREFIX}{rid}" for o, rid in rids.items()}
        objs = {o: await eventually(functools.partial(w.get, n), 10) for o, n in names.items()}
        # Each booking's own window (booked one after the other: a second apart, maybe).
        windows = {
            o: (parse_utc(obj["spec"]["start"]), parse_utc(obj["spec"]["end"]))
            for o, obj in objs.items()
        }
        start = max(s for s, _ in windows.values())
        end = max(e for _, e in windows.values())

        async def until(at: datetime) -> None:
            await clock.sleep(max(0.0, (at - clock.now()).total_seconds()))

        # alice: 4 GPUs from the window's opening to its end (and on past it).
        await until(start)
        await w.gateway.create(PODS, gpu_pod("full", "alice", 4, 10 * WINDOW_S), "alice")
        # bob: 2 GPUs for the first half of the window (before the no-show deadline).
        await w.gateway.create(PODS, gpu_pod("half", "bob", 2, WINDOW_S // 2), "bob")
        for pod, ns in (("full", "alice"), ("half", "bob")):
            await eventually(functools.partial(running, w, pod, ns), 10)

        # Mid-window: the leader dies; the standby takes over.
        await until(start + timedelta(seconds=WINDOW_S / 2))
        first = await leader_of(w, [a, b])
        standby = b if first is a else a
        # frozen, then gone without a shutdown, as after a crash; no restart
        dead = [await scraped_then_stilled(w, first, functools.partial(frozen, first))]
        await first.kill()
        second = await leader_of(w, [standby])

        # Later: a fresh replica joins, the leader stops, the fresh one counts on.
        await until(start + timedelta(seconds=3 * WINDOW_S / 4))
        c = await w.replica("rc", False, **ENV)
        dead.append(await scraped_then_stilled(w, second, second.stop))  # a clean exit
        third = await leader_of(w, [c])

        # After the window: the figures are final.
        await until(end + timedelta(seconds=20))

        # The known values, from what Kubernetes recorded.
        full = await w.gateway.get(PODS, "full", "alice")
        half = await w.gateway.get(PODS, "half", "bob")
        f0, _ = ran(full)
        h0, h1 = ran(half)
        assert h1 is not None  # bob's pod finished inside the window
        carol = await w.get(names["carol"])
        assert carol is not None
        cancelled = parse_utc(carol["status"]["noShow"]["cancelledAt"])
        (a0, a1), (b0, b1), (c0, _) = (windows[o] for o in OWNERS)
        known = {
            "alice": (4 * seconds(a0, a1), 4 * seconds(max(f0, a0), a1)),
            "bob": (4 * seconds(b0, b1), 2 * seconds(max(h0, b0), min(h1, b1))),
            "carol": (4 * seconds(c0, cancelled), 0.0),
        }

        # Through the real kubectl gpures usage.
        async def final() -> dict[str, Any] | None:
            text = await asyncio.to_thread(
                plugin, config, clock, "usage", "-A", "--since", "2h", "-o", "json"
            )
            got = {r["key"]: r for r in json.loads(text)["rows"]}
            return got if set(got) == set(OWNERS) else None

        rows = await eventually(final, 10)
        for owner, (booked_s, used_s) in known.items():
            row = rows[owner]
            assert row["bookedGpuHours"] * 3600 == pytest.approx(booked_s, rel=0.01), owner
            assert row["usedGpuHours"] * 3600 == pytest.approx(used_s, rel=0.01, abs=1), (
                owner,
                "kubectl",
            )
        assert rows["carol"]["noShows"] == 1
        # The designed shares, loosely (the pods start a few sandbox seconds late).
        assert rows["alice"]["utilisationPercent"] == pytest.approx(100, abs=5)
        assert rows["bob"]["utilisationPercent"] == pytest.approx(25, abs=3)
        assert rows["carol"]["utilisationPercent"] == 0

        # The same figures in the metrics: every replica's counters, the dead ones as
        # scraped just before they went. What a dead one counted after its scrape is
        # lost to the sum, at most its unseen seconds at MOST_GPUS.
        live = await counted(w, third)
        unseen = sum(s for _, s in dead) * MOST_GPUS
        for owner, (booked_s, used_s) in known.items():
            for kind, want in (("used", used_s), ("booked", booked_s)):
                total = sum(d[owner][kind] for d in [*(c for c, _ in dead), live])
                near = max(0.01 * want, 1.0)
                assert want - unseen - near <= total <= want + near, (owner, kind, unseen)
