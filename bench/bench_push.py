"""Push benchmark: how soon a booking and its cancellation reach the mirror by push.

The figure behind "a booking and its cancellation arrive by push within 2 s" (the
sandbox test ``test_booking_and_cancellation_arrive_by_push`` checks the behaviour
with a liveness bound only: a loaded CI machine cannot promise two seconds).

The sandbox's kube and app emulators run in this process (default scenario); one real
reconciler replica as a subprocess (leader election off, the poll an hour apart, so
only the app's pushes bring changes). ``BOOKINGS`` times, one after the other, alice
books one a100 GPU from now for an hour, then cancels it. Per booking, on the wall
clock (the sandbox clock at factor 1):

- *booked → Open*: from just before the app is asked to create the booking to the
  instant the kube store commits its GPUReservation with phase ``Open``;
- *cancelled → Cancelled*: from just before the cancel to the commit of phase
  ``Cancelled``.

The commit instants are taken in the kube store itself (no watch delivery delay).
Also reported: the full fetches the replica made meanwhile (0 = every change came by
push). Figures go to ``$BENCH_OUT/push.json``; a measurement, never a pass/fail check.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.bench_ondemand import metric_sum
from bench.bench_window_open import aligned_clock
from bench.sandboxed import measured, spread, with_replica
from sandbox.kube.store import Change
from sandbox.runner import SandboxContext
from sandbox.scenario import load_scenario
from shared import model, vocab
from shared.clock import ScaledClock

BOOKINGS = 100 if os.environ.get("BENCH_MODE") == "full" else 20
#: Wall seconds to wait for one change before counting it lost.
GIVE_UP_S = 30.0
ENV = {"LEADER_ELECTION_ENABLED": "false", "RESERVATION_FETCH_INTERVAL": "3600"}
FETCHES = "gpu_reservation_reservation_fetches_total"


class Phases(asyncio.Queue[Change | None]):
    """Fed by the kube store at each write: the first instant each GPUReservation is
    stored in each phase."""

    def __init__(self, clock: ScaledClock) -> None:
        super().__init__()
        self.clock = clock
        self.at: dict[tuple[str, str], datetime] = {}

    def put_nowait(self, item: Change | None) -> None:
        if item is None or item.type == "DELETED":
            return
        name = str((item.object.get("metadata") or {}).get("name"))
        phase = str((item.object.get("status") or {}).get("phase"))
        self.at.setdefault((name, phase), self.clock.now())


async def reached(phases: Phases, name: str, phase: str) -> datetime | None:
    """The commit instant of ``name`` in ``phase`` (None: not within GIVE_UP_S)."""
    deadline = time.monotonic() + GIVE_UP_S
    while (name, phase) not in phases.at and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)  # the store's feed is synchronous: poll its tally
    return phases.at.get((name, phase))


BOOKING = {
    "username": "alice",
    "group": "lab",
    "gpu_class": "a100",
    "gpu_count": 1,
    "start": "+0s",
    "end": "+1h",
}


async def one(
    http: httpx.AsyncClient, app: str, phases: Phases
) -> tuple[float | None, float | None]:
    """Book and cancel once: (booked → Open, cancelled → Cancelled) seconds (None: lost)."""
    asked = phases.clock.now()
    answer = await http.post(f"{app}/_sandbox/bookings", json=BOOKING)
    answer.raise_for_status()
    rid = int(answer.json()["id"])
    opened = await reached(phases, model.reference(rid), "Open")
    cancelling = phases.clock.now()
    (await http.post(f"{app}/_sandbox/bookings/{rid}/cancel")).raise_for_status()
    cancelled = await reached(phases, model.reference(rid), "Cancelled")

    def lag(since: datetime, at: datetime | None) -> float | None:
        return None if at is None else round((at - since).total_seconds(), 4)

    return lag(asked, opened), lag(cancelling, cancelled)


async def measure(state: Path) -> dict[str, Any]:
    clock = aligned_clock(1.0)
    ctx = SandboxContext(state_dir=state, scenario=load_scenario(), clock=clock)
    async with with_replica(ctx, ["kube", "app"], ENV) as box:
        store = box.kube.store
        phases = Phases(clock)
        _, subscription = store.subscribe(vocab.CRD_GROUP, vocab.CRD_PLURAL, store.resource_version)
        subscription.queue = phases
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                url = box.replica.url
                fetched = 0.0
                while not fetched:  # the startup sync's fetch has been counted
                    fetched = await metric_sum(http, url, FETCHES)
                    await asyncio.sleep(0.05)
                app = ctx.endpoints["app"]
                pairs = [await one(http, app, phases) for _ in range(BOOKINGS)]
                fetches = await metric_sum(http, url, FETCHES) - fetched
        finally:
            store.unsubscribe(subscription)
    return {
        "bookings": BOOKINGS,
        "booked_to_open_s": [p[0] for p in pairs],
        "cancelled_to_cancelled_s": [p[1] for p in pairs],
        "fetches_meanwhile": fetches,
        "load_average": os.getloadavg(),
    }


def run() -> list[str]:
    found = measured("push", measure)
    load = ", ".join(f"{x:.1f}" for x in found["load_average"])
    return [
        f"{found['bookings']} bookings of alice's, each booked then cancelled, pushed by the "
        f"app to one replica (poll an hour apart); load average {load}",
        spread("booked -> mirror Open", found["booked_to_open_s"], GIVE_UP_S),
        spread("cancelled -> mirror Cancelled", found["cancelled_to_cancelled_s"], GIVE_UP_S),
        f"full fetches meanwhile: {found['fetches_meanwhile']:.0f} (goal: every change by "
        "push, each within 2 s)",
    ]


if __name__ == "__main__":
    print("\n".join(run()))
