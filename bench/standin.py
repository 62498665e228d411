"""The reconciler's upkeep of one booking, as a process of its own (webhook benchmark).

``python -m bench.standin KUBECONFIG NAMESPACE NAME`` passes over the booking's ledger
back to back (``PAUSE_S`` apart), each pass a ``ledger.amend`` applying ``upkeep_pass``
through the thread-pool gateway the reconciler uses: every new hold is bound to its pod
and all but the newest ``KEEP_HOLDS`` are dropped (those pods finished), so the booking
never fills and its writes are the reconciler's contention. The real reconciler is a
process of its own beside the API server, so the stand-in is one too: inside the
benchmark's process its client threads would share the emulator's interpreter lock.
It prints ``ready`` once its gateway is built, runs until its standard input closes,
then prints the number of ledger writes it made.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import replace

from shared import ledger, model
from shared.clock import SystemClock
from shared.gateway import Gateway

#: Holds left after each pass (the older pods have finished).
KEEP_HOLDS = 32
#: Pause between two passes: the reconciler's pass follows the pod events at once
#: (``reconciler.upkeep.Keeper``: woken by each pod event, no debounce); this stands for
#: the watch delivering the new pods and the pass's own work.
PAUSE_S = 0.01


def upkeep_pass(res: model.GPUReservation) -> model.GPUReservation:
    """What one reconciler upkeep pass does to the booking's ledger while pods stream in
    (pure): every new hold is bound to its pod, and all but the newest ``KEEP_HOLDS``
    are dropped."""
    bound = tuple(
        h if h.bound else replace(h, pod=h.pod or h.claim, pod_uid=f"uid-{h.claim}")
        for h in res.holds[-KEEP_HOLDS:]
    )
    return replace(res, holds=bound)


async def passes(gateway: ledger.LedgerGateway, namespace: str, name: str) -> int:
    """Passes until standard input closes; the ledger writes made."""
    loop = asyncio.get_running_loop()
    closed = loop.run_in_executor(None, sys.stdin.read)
    writes = 0
    changed = False

    def change(res: model.GPUReservation) -> model.GPUReservation:
        nonlocal changed
        updated = upkeep_pass(res)
        changed = updated.holds != res.holds
        return updated

    while not closed.done():
        await asyncio.sleep(PAUSE_S)
        now = SystemClock().now()
        deadline = time.monotonic() + 2
        got = await ledger.amend(gateway, namespace, name, change, now=now, deadline=deadline)
        writes += got is not None and changed
    return writes


def main(argv: list[str]) -> int:
    kubeconfig, namespace, name = argv
    gateway = Gateway.from_kubeconfig(kubeconfig)
    try:
        print("ready", flush=True)
        print(asyncio.run(passes(gateway, namespace, name)), flush=True)
    finally:
        gateway.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
