"""Issue 27 in the sandbox with the real kubectl: waiting pods are admitted oldest first
after a relist (case 2), and a booking moved into the past leaves no guarantee ahead of
its overstay (case 4). kube and app run in-process, the reconciler as a real process;
no webhook, so the reconciler admits."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from shared import model, vocab
from shared.clock import ScaledClock, parse_utc
from tests.reconciler.test_evict_sandbox import kubectl
from tests.reconciler.test_explain_sandbox import PLUGIN
from tests.reconciler.test_integration import eventually, kubectl_sandbox_marks, world

pytest.importorskip("sandbox.kube.component")

pytestmark = kubectl_sandbox_marks(120)
ENV = {"LEADER_ELECTION_ENABLED": "false", "RESERVATION_FETCH_INTERVAL": "3600"}


def pod(name: str) -> dict[str, Any]:
    """An a100 pod of alice's asking for one GPU."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "alice", "labels": {vocab.GPU_CLASS_LABEL: "a100"}},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {vocab.GPU_RESOURCE: "1"}},
                }
            ]
        },
    }


async def apply(config: Path, obj: dict[str, Any]) -> None:
    await asyncio.to_thread(kubectl, config, "apply", "-f", "-", stdin=json.dumps(obj))


async def notes(config: Path, name: str) -> dict[str, str]:
    text = await asyncio.to_thread(kubectl, config, "get", "pod", "-n", "alice", name, "-o", "json")
    return dict(json.loads(text)["metadata"].get("annotations") or {})


async def admitted(config: Path, *names: str) -> list[str]:
    return [n for n in names if vocab.BOOKING_REFERENCE in await notes(config, n)]


def test_case_2_after_a_relist_the_oldest_waiting_pod_is_admitted_first(tmp_path: Path) -> None:
    asyncio.run(oldest_first(tmp_path))


async def oldest_first(tmp_path: Path) -> None:
    clock = ScaledClock(factor=4.0)
    async with world(tmp_path, clock) as w:
        config = tmp_path / "kubeconfig"
        rid = await w.book(gpus=1, start="+60s", end="+1h")
        await apply(config, pod("z-training"))
        created = parse_utc(
            json.loads(
                await asyncio.to_thread(
                    kubectl, config, "get", "pod", "-n", "alice", "z-training", "-o", "json"
                )
            )["metadata"]["creationTimestamp"]
        )
        await clock.sleep((created + timedelta(seconds=2) - clock.now()).total_seconds())
        await apply(config, pod("a-forged"))
        # The reconciler starts after both: its first LIST holds them by name.
        await w.replica("r1", True, **ENV)
        await eventually(lambda: w.get(model.reference(rid)), 10)

        async def one() -> list[str]:
            return await admitted(config, "a-forged", "z-training")

        assert await eventually(one, 30) == ["z-training"]


def test_case_4_a_booking_moved_into_the_past_ends_the_guarantee_there(tmp_path: Path) -> None:
    asyncio.run(moved(tmp_path))


async def moved(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        config = tmp_path / "kubeconfig"
        proc = await w.replica("r1", True, **ENV)
        rid = await w.book(gpus=1, start="-1m", end="+1h")
        await eventually(lambda: w.get(model.reference(rid)), 10)
        await apply(config, pod("train"))

        async def guaranteed() -> dict[str, str]:
            got = await notes(config, "train")
            return got if vocab.GUARANTEED_UNTIL in got else {}

        before = await eventually(guaranteed, 15)
        assert parse_utc(before[vocab.GUARANTEED_UNTIL]) > w.ctx.clock.now()
        answer = await w.http.post(
            f"{w.app}/_sandbox/bookings/{rid}/move", json={"start": "-3h", "end": "-2h"}
        )
        assert answer.status_code == 200, answer.text

        async def overstaying() -> dict[str, str]:
            got = await notes(config, "train")
            status = got.get(vocab.GUARANTEE_STATUS)
            return got if status == vocab.GUARANTEE_STATUS_OVERSTAY else {}

        after = await eventually(overstaying, 15)
        end = parse_utc(json.loads(answer.text)["end_utc"])
        assert parse_utc(after[vocab.GUARANTEED_UNTIL]) == end
        assert end < w.ctx.clock.now()
        # kubectl gpures explain repeats the annotation: an end in the past, said so.
        env = {
            **os.environ,
            "PATH": f"{PLUGIN.parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "GPURES_CONTROLLER_NAMESPACE": w.ctx.namespace,
            "KUBECONFIG": str(config),
            "TZ": "UTC",
        }
        done = await asyncio.to_thread(
            subprocess.run,
            [shutil.which("kubectl") or "kubectl", vocab.CRD_SHORT_NAME, "explain", "-n",
             "alice", "train"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "Its guarantee ended" in done.stdout
        assert "(in " not in done.stdout.split("Its guarantee ended", 1)[1].split(".")[0]
        await proc.stop()
