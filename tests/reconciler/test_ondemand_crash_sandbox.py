"""Issue 12 acceptance 4 in the sandbox: the reconciler killed between grant and admit.

The app grants the lease at once but its answer is held back (fault
``answer_after_s``); the reconciler is killed (SIGKILL) while it waits. After a new
replica starts, the lease is either used for that pod (the pod is still there: the
same idempotency key returns it) or cancelled ``controller-revoked`` (the pod is gone:
nothing in the cluster uses the lease) — never left active and unused.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from shared import vocab
from shared.clock import SystemClock
from tests.reconciler import test_queue_sandbox as queue_sandbox
from tests.reconciler.test_evict_sandbox import kubectl
from tests.reconciler.test_integration import World, eventually, leading
from tests.reconciler.test_ondemand_sandbox import app_of, jit_manifest, leases
from tests.reconciler.test_queue_sandbox import ENV, create, pod_of, reference, sandbox_world

pytestmark = queue_sandbox.pytestmark
#: The orphan rule's grace, short for the test.
CRASH_ENV = {**ENV, "LEDGER_CLAIM_TTL_SECONDS": "2"}


async def uid_of(w: World, name: str) -> str:
    return str((await pod_of(w, name))["metadata"]["uid"])


def test_acceptance_4_killed_between_grant_and_admit(tmp_path: Path) -> None:
    asyncio.run(killed(tmp_path))


async def killed(tmp_path: Path) -> None:
    """Two pods granted, the reconciler killed before either is admitted; one pod then
    leaves. After the restart the other is admitted under its own lease (its key is
    replayed) and the leaver's lease is cancelled ``controller-revoked``."""
    async with sandbox_world(tmp_path, SystemClock()) as w:
        config = tmp_path / "kubeconfig"
        proc = await w.replica("r1", True, **CRASH_ENV)
        await leading(proc)
        fault = {"method": "POST", "path": "/api/reservations", "answer_after_s": 12, "count": 2}
        assert (await w.http.post(f"{w.app}/_sandbox/faults", json=fault)).status_code == 201
        await create(config, jit_manifest("survivor"), jit_manifest("leaver"))

        async def granted() -> bool:
            return len(leases(w)) == 2

        await eventually(granted, 10)
        await proc.kill()  # SIGKILLed and gone: no restart before the leaver is deleted
        for name in ("survivor", "leaver"):
            assert reference(await pod_of(w, name)) is None, "killed before the admission"
        assert (await w.http.delete(f"{w.app}/_sandbox/faults")).status_code in (200, 204)
        keys = app_of(w).state.idempotency
        kept = keys[await uid_of(w, "survivor")]
        dropped = keys[await uid_of(w, "leaver")]
        await asyncio.to_thread(
            kubectl, config, "delete", "pod", "leaver", "-n", "alice", "--grace-period=0",
            "--force",
        )  # fmt: skip
        await w.replica("r2", True, **CRASH_ENV)

        async def admitted() -> bool:
            ref = reference(await pod_of(w, "survivor"))
            return ref == f"{vocab.RESERVATION_REF_PREFIX}{kept}"

        async def revoked() -> bool:
            return not next(r for r in leases(w) if r.id == dropped).is_active

        await eventually(admitted, 10)
        await eventually(revoked, 10)
        assert next(r for r in leases(w) if r.id == dropped).cancel_reason == "controller-revoked"
        assert next(r for r in leases(w) if r.id == kept).is_active
        assert len(leases(w)) == 2, "no third lease"
