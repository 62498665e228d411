"""Issue 7 acceptance 4 against the sandbox: a cancel pushed by the app emulator evicts
the pod after a ReservationCancelled Event; a restart right after repeats nothing."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from shared import model, vocab
from shared.errors import NotFound
from shared.resources import EVENTS, PODS
from tests.reconciler.test_integration import eventually, kubectl_sandbox_marks, world
from tests.reconciler.upholdkit import raw_pod

pytestmark = kubectl_sandbox_marks(90)


def kubectl(config: Path, *args: str, stdin: str | None = None) -> str:
    binary = shutil.which("kubectl") or "kubectl"
    done = subprocess.run(
        [binary, "--kubeconfig", str(config), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,  # liveness: kubectl itself is slow to start on a loaded machine
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def reasons(config: Path) -> list[str]:
    text = await asyncio.to_thread(kubectl, config, "get", "events", "-n", "alice", "-o", "json")
    out = json.loads(text)
    return [e.get("reason") for e in out["items"]]


def test_cancel_evicts_after_the_event_and_a_restart_repeats_nothing(tmp_path: Path) -> None:
    asyncio.run(scenario(tmp_path))


async def scenario(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        config = tmp_path / "kubeconfig"
        first = await w.replica(
            "r1", LEADER_ELECTION_ENABLED="false", RESERVATION_FETCH_INTERVAL="3600"
        )
        rid = await w.book(gpus=2, start="-1m", end="+1h")
        name = model.reference(rid)
        await eventually(lambda: w.get(name), 10)
        pod: dict[str, Any] = raw_pod("job", name, node=None)
        pod["metadata"].pop("uid")
        await asyncio.to_thread(kubectl, config, "apply", "-f", "-", stdin=json.dumps(pod))

        async def has_guarantee() -> bool:
            got = await w.gateway.get(PODS, "job", "alice")
            notes = got["metadata"].get("annotations") or {}
            return vocab.GUARANTEED_UNTIL in notes

        await eventually(has_guarantee, 10)
        await w.cancel(rid)

        async def gone() -> bool:
            try:
                await w.gateway.get(PODS, "job", "alice")
            except NotFound:
                return True
            return False

        await eventually(gone, 2)
        assert (await reasons(config)).count(vocab.REASON_RESERVATION_CANCELLED) == 1
        before = len((await w.gateway.list_all(EVENTS, "alice")).items)
        await first.stop()
        await w.replica("r2", LEADER_ELECTION_ENABLED="false", RESERVATION_FETCH_INTERVAL="3600")
        await asyncio.sleep(2)
        assert len((await w.gateway.list_all(EVENTS, "alice")).items) == before
