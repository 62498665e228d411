"""Issue 12 acceptance 3 in the sandbox: how app refusals are retried and told.

On a scaled clock (60×: a sandbox minute per wall second), one pod at a time: a
contended 409 is told once (``OnDemandLeaseDenied``) and retried 2–5 minutes later; a
structural 409 is told with "waiting will not help" and backed off; a 404 (a usage
group the app does not know) is told ``OnDemandLeaseRejected`` naming the user, the
group and where it came from; a network error is retried without an Event.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sandbox.release_replicas import ReconcilerPod
from shared import vocab
from shared.clock import ScaledClock, parse_utc
from tests.reconciler import test_queue_sandbox as queue_sandbox
from tests.reconciler.test_integration import World, eventually
from tests.reconciler.test_ondemand_sandbox import jit_manifest, leases
from tests.reconciler.test_queue_sandbox import (
    ENV,
    create,
    events_of,
    pod_of,
    reference,
    sandbox_world,
)

pytestmark = queue_sandbox.pytestmark


async def ours(config: Path, pod: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in await events_of(config, pod) if e.get("reason") == reason]


async def admitted(w: World, pod: str) -> bool:
    return reference(await pod_of(w, pod)) is not None


def lease_for(w: World, pod: dict[str, Any]) -> Any:
    rid = int(str(reference(pod)).removeprefix(vocab.RESERVATION_REF_PREFIX))
    return next(r for r in leases(w) if r.id == rid)


async def retry_at(proc: ReconcilerPod, pod: str) -> datetime | None:
    """When the replica planned to ask again for ``pod`` after its first refusal."""
    refused = [
        e
        for e in proc.logs()
        if e.get("event") == "ondemand.lease_refused" and e.get("pod") == f"alice/{pod}"
    ]
    return datetime.fromisoformat(refused[0]["retry_at"]) if refused else None


def test_acceptance_3_refusals_are_retried_and_told(tmp_path: Path) -> None:
    asyncio.run(refusals(tmp_path))


async def refusals(tmp_path: Path) -> None:
    async with sandbox_world(tmp_path, ScaledClock(factor=60.0)) as w:
        config = tmp_path / "kubeconfig"
        proc = await w.replica("r1", True, **ENV)
        denials = f"{w.app}/_sandbox/denials"

        # Contended: told once, asked again 2-5 minutes later, then granted.
        body = {"code": "capacity_physical", "retryable": True, "detail": "No capacity now."}
        assert (await w.http.post(denials, json=body)).status_code == 201
        await create(config, jit_manifest("contended"))
        await eventually(lambda: admitted(w, "contended"), 20)
        told = await ours(config, "contended", vocab.REASON_ONDEMAND_LEASE_DENIED)
        assert len(told) == 1
        assert "No capacity now." in told[0]["message"]
        # The retry is planned 2-5 minutes after the denial, and not asked before then.
        # Both from stamps the reconciler and the app wrote: at 60x a wall second is a
        # sandbox minute, so when the test sees things says nothing.
        denied_at = parse_utc(told[0]["firstTimestamp"])  # the reconciler's `now`, whole s
        planned = await eventually(lambda: retry_at(proc, "contended"), 5)
        waited = (planned - denied_at).total_seconds()
        assert 120 <= waited < 301, f"retry planned {waited:.0f} s after the denial"
        granted_at = lease_for(w, await pod_of(w, "contended")).created_at
        assert granted_at >= planned - timedelta(seconds=1), "asked again before its time"

        # Structural: the Event says waiting will not help; backed off, not hammered.
        body = {"code": "not_a_member", "retryable": False, "detail": "Not a member."}
        assert (await w.http.post(denials, json=body)).status_code == 201
        await create(config, jit_manifest("structural"))

        async def told_structural() -> list[dict[str, Any]]:
            return await ours(config, "structural", vocab.REASON_ONDEMAND_LEASE_DENIED)

        said = await eventually(told_structural, 10)
        assert "Waiting will not help" in said[0]["message"]
        await eventually(lambda: admitted(w, "structural"), 20)
        granted_at = lease_for(w, await pod_of(w, "structural")).created_at
        waited = (granted_at - parse_utc(said[0]["firstTimestamp"])).total_seconds()
        assert waited >= 59, f"structural refusal retried after only {waited:.0f} s"

        # 404: the app knows no such usage group.
        unknown = jit_manifest("unknown-group")
        unknown["metadata"]["annotations"][vocab.USAGE_GROUP] = "no-such-group"
        await create(config, unknown)

        async def rejected() -> list[dict[str, Any]]:
            return await ours(config, "unknown-group", vocab.REASON_ONDEMAND_LEASE_REJECTED)

        message = (await eventually(rejected, 10))[0]["message"]
        assert "'alice'" in message
        assert "'no-such-group'" in message
        assert vocab.USAGE_GROUP in message
        assert "usage group(s) lab" in message  # alice's h100 booking is under lab
        assert not await admitted(w, "unknown-group")

        # A network error: no Event, asked again later.
        fault = {"method": "POST", "path": "/api/reservations", "drop": True, "count": 1}
        assert (await w.http.post(f"{w.app}/_sandbox/faults", json=fault)).status_code == 201
        await create(config, jit_manifest("network"))
        await eventually(lambda: admitted(w, "network"), 20)
        everything = [e.get("reason") for e in await events_of(config, "network")]
        assert vocab.REASON_ONDEMAND_LEASE_DENIED not in everything
        assert vocab.REASON_ONDEMAND_LEASE_REJECTED not in everything
