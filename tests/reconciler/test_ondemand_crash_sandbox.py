"""Issue 12 acceptance 4 in the sandbox: the reconciler killed between grant and admit.

The app grants the lease at once but its answer is held back (fault
``answer_after_s``); the reconciler is killed (SIGKILL) while it waits. After a new
replica starts, the lease is either used for that pod (the pod is still there: the
same idempotency key returns it) or cancelled ``controller-revoked`` (the pod is gone:
nothing in the cluster uses the lease) — never left active and unused.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from shared import vocab
from shared.clock import SystemClock
from tests.reconciler import test_queue_sandbox as queue_sandbox
from tests.reconciler.test_evict_sandbox import kubectl
from tests.reconciler.test_integration import World, eventually
from tests.reconciler.test_ondemand_sandbox import jit_manifest, leases
from tests.reconciler.test_queue_sandbox import ENV, create, pod_of, reference, sandbox_world

pytestmark = queue_sandbox.pytestmark
#: The orphan rule's grace, short for the test.
CRASH_ENV = {**ENV, "LEDGER_CLAIM_TTL_SECONDS": "2"}


async def crash_after_grant(w: World, config: Path, name: str) -> int:
    """Create ``name``; kill the reconciler once the app granted its lease; the lease id."""
    proc = await w.replica("r1", True, **CRASH_ENV)
    await asyncio.sleep(1.0)
    fault = {"method": "POST", "path": "/api/reservations", "answer_after_s": 5, "count": 1}
    assert (await w.http.post(f"{w.app}/_sandbox/faults", json=fault)).status_code == 201
    await create(config, jit_manifest(name))

    async def granted() -> list[int]:
        return [r.id for r in leases(w)]

    ids: list[int] = await eventually(granted, 10)
    proc.signal(signal.SIGKILL)
    await proc.stop()
    assert reference(await pod_of(w, name)) is None, "killed before the admission"
    assert (await w.http.delete(f"{w.app}/_sandbox/faults")).status_code in (200, 204)
    return ids[0]


def test_acceptance_4_restart_uses_the_lease_for_its_pod(tmp_path: Path) -> None:
    asyncio.run(used_after_restart(tmp_path))


async def used_after_restart(tmp_path: Path) -> None:
    async with sandbox_world(tmp_path, SystemClock()) as w:
        config = tmp_path / "kubeconfig"
        rid = await crash_after_grant(w, config, "survivor")
        await w.replica("r2", True, **CRASH_ENV)

        async def admitted() -> bool:
            return reference(await pod_of(w, "survivor")) == f"{vocab.RESERVATION_REF_PREFIX}{rid}"

        await eventually(admitted, 10)
        assert [r.id for r in leases(w)] == [rid], "the same lease, no second one"
        assert all(r.is_active for r in leases(w))


def test_acceptance_4_restart_cancels_a_lease_whose_pod_left(tmp_path: Path) -> None:
    asyncio.run(revoked_after_restart(tmp_path))


async def revoked_after_restart(tmp_path: Path) -> None:
    async with sandbox_world(tmp_path, SystemClock()) as w:
        config = tmp_path / "kubeconfig"
        rid = await crash_after_grant(w, config, "leaver")
        await asyncio.to_thread(
            kubectl, config, "delete", "pod", "leaver", "-n", "alice", "--grace-period=0",
            "--force",
        )  # fmt: skip
        await w.replica("r2", True, **CRASH_ENV)

        async def revoked() -> bool:
            lease = next(r for r in leases(w) if r.id == rid)
            return not lease.is_active

        await eventually(revoked, 10)
        lease = next(r for r in leases(w) if r.id == rid)
        assert lease.cancel_reason == "controller-revoked"
