"""Issue 14 acceptance 3: kill the reconciler at every write await point of an
admission at window open, a ledger write, an eviction, a backstop eviction and a
no-show cancel — before the call (it never lands) and after it (it landed, the answer
is lost) — then start a new process: it must end exactly where an uninterrupted run
ends (no lost admission), never with more GPUs admitted under a booking than it holds
(no over-admission), and with no Event sent twice (no double eviction or
announcement) and no booking cancelled twice.

A lease grant (issue 12 acceptance 4) is the sixth operation: a just-in-time
candidate's batch is killed before the app's create, after the grant answer, after the
GPUReservation mirror write, after the ledger claim and after the pod patch (and at
every other write of it). Beyond the checks above, every lease the app granted must be
used by the pod or cancelled ``controller-revoked`` — never active and unused — and
the pod must hold at most one live lease.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared import model, vocab
from shared.appclient import CancelReason
from shared.resources import GPU_RESERVATIONS, PODS
from tests.faults.harness import USERS, FaultWorld, State, fault_world
from tests.faults.kills import Killed, KillSwitch
from tests.faults.test_matrix import declared_pod, one_admitted, two_admitted, wipe_ledgers

pytest.importorskip("sandbox.kube.component")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

Step = Callable[[FaultWorld], Awaitable[None]]


async def no_check(w: FaultWorld) -> list[str]:
    return []


@dataclass(frozen=True)
class Operation:
    name: str
    setup: Step
    change: Step
    #: Invariants of this operation beyond the common ones (each problem a line).
    check: Callable[[FaultWorld], Awaitable[list[str]]] = no_check
    #: What happens in the cluster while no reconciler runs (after the kill, and after
    #: the uninterrupted run's round). The end then depends on how far the dead process
    #: got, so only ``check`` and the common invariants judge it, not the equal end.
    down: Step | None = None


async def three_queued(w: FaultWorld) -> None:
    """A 2-GPU booking opening in 5 minutes, three 1-GPU pods waiting for it."""
    await w.book(start="+5m", end="+1h")
    await w.poll()
    for i in range(3):
        await w.pod(f"queued-{i}", None, tolerated=False)
    await w.poll()


async def window_opens(w: FaultWorld) -> None:
    await w.advance(5 * 60)


async def cancel_first(w: FaultWorld) -> None:
    await w.control(f"bookings/{w.booked[0]}/cancel")


async def upcoming_booking(w: FaultWorld) -> None:
    """A booking opening in a minute (its no-show is due NOSHOW_TIMEOUT after that)."""
    await w.book(start="+1m", end="+2h")
    await w.poll()


async def nobody_came(w: FaultWorld) -> None:
    await w.advance((w.settings.noshow_timeout.total_seconds()) + 120)


async def leases_on(w: FaultWorld) -> None:
    """The lease batch runs in every round; a first round learns the GPU classes."""
    w.leases = True
    await w.poll()


async def jit_candidate(w: FaultWorld) -> None:
    await w.candidate("jit-0")


async def lease_used_or_revoked(w: FaultWorld) -> list[str]:
    """Issue 12 acceptance 4: each of the candidate's leases (found by its idempotency
    keys in the app) is the one the pod carries or cancelled ``controller-revoked``;
    the pod carries exactly one, and it is live."""
    pod = await w.gateway.get(PODS, "jit-0", "alice")
    uid = pod["metadata"]["uid"]
    carried = (pod["metadata"].get("annotations") or {}).get(vocab.BOOKING_REFERENCE)
    state = w.emulator.state
    ids = [rid for key, rid in state.idempotency.items() if key.split(".")[0] == uid]
    problems = []
    live = []
    for rid in ids:
        row = state.reservations[rid]
        if row.is_active:
            live.append(rid)
            if carried != model.reference(rid):
                problems.append(f"lease {rid} active but unused (pod carries {carried})")
        elif row.cancel_reason != str(CancelReason.CONTROLLER_REVOKED):
            problems.append(f"lease {rid} cancelled {row.cancel_reason}")
    if len(live) != 1:
        problems.append(f"{len(live)} live leases for the pod: {ids}")
    if len(ids) != len(set(ids)):
        problems.append(f"one lease under two keys: {ids}")
    return problems


def lease_ends(w: FaultWorld) -> str:
    """The app's on-demand leases as ``id status[/cancel reason]`` (for the table)."""
    rows = sorted(w.emulator.state.reservations.items())
    ends = [
        f"{rid} {row.status}" + (f"/{row.cancel_reason}" if row.cancel_reason else "")
        for rid, row in rows
        if str(row.kind) == "on_demand"
    ]
    return f"leases: {', '.join(ends)}" if ends else "no lease"


async def candidate_leaves(w: FaultWorld) -> None:
    await w.gateway.delete(PODS, "jit-0", "alice", grace_period_s=0)


#: How a lease whose pod left may end: never used (revoked) or used, then torn down.
LEFT = frozenset({str(CancelReason.CONTROLLER_REVOKED), str(CancelReason.POD_TERMINATED)})


async def lease_not_left_behind(w: FaultWorld) -> list[str]:
    """The candidate left while no reconciler ran: no lease of it stays active, none is
    cancelled for another reason, and no ledger still holds GPUs for it."""
    state = w.emulator.state
    problems = [
        f"lease {rid} {'active' if row.is_active else row.cancel_reason} after its pod left"
        for rid, row in state.reservations.items()
        if str(row.kind) == "on_demand" and (row.is_active or row.cancel_reason not in LEFT)
    ]
    held = {n: h for n, h in (await w.observe()).holds.items() if h}
    if held:
        problems.append(f"holds left: {held}")
    return problems


OPERATIONS = (
    Operation("admission at window open", three_queued, window_opens),
    Operation("eviction (cancelled booking)", one_admitted, cancel_first),
    Operation("backstop eviction", one_admitted, declared_pod),
    Operation("ledger write (wiped ledgers)", two_admitted, wipe_ledgers),
    Operation("no-show cancel", upcoming_booking, nobody_came),
    Operation("lease grant", leases_on, jit_candidate, lease_used_or_revoked),
    Operation(
        "lease grant, pod gone at restart",
        leases_on,
        jit_candidate,
        lease_not_left_behind,
        candidate_leaves,
    ),
)


async def prepare(w: FaultWorld, op: Operation, switch: KillSwitch | None = None) -> None:
    """A clean start, the setup and the change, by a process whose gateway and app
    client go through ``switch`` (armed only afterwards: the operation is what the
    same process does next, with what it learnt in memory)."""
    if switch is None:
        await w.reset()
    else:
        switch.armed = False
        await w.reset(switch.wrap)
    await op.setup(w)
    await op.change(w)
    if switch is not None:
        switch.armed = True


def landed_cancels(switch: KillSwitch) -> Counter[str]:
    """App cancels a process sent that reached the app (a kill *before* one stops it),
    by booking."""
    return Counter(
        w
        for i, w in enumerate(switch.writes, start=1)
        if w.startswith("cancel") and not (i == switch.at and not switch.after)
    )


async def converge(w: FaultWorld, cancels: Counter[str] | None = None) -> State:
    """A new process, polling until it has nothing left to do: a round, then more once
    a dead process's claims have expired (``LEDGER_CLAIM_TTL_SECONDS``: a claim whose
    pod was never stamped may still be a patch in flight until then) and a no-show it
    had not declared yet is due again (a new leader re-arms with NOSHOW_GRACE)."""
    counting = KillSwitch()
    w.restart(counting.wrap)
    await w.poll()
    settings = w.settings
    wait = max(settings.ledger_claim_ttl_s, settings.noshow_grace.total_seconds())
    await w.advance(wait + 1)
    for _ in range(2):
        await w.poll()
    if cancels is not None:
        cancels.update(landed_cancels(counting))
    return await w.observe()


async def over_admitted(w: FaultWorld) -> list[str]:
    """Bookings whose live admitted pods request more GPUs than the booking holds."""
    budgets = {
        o["metadata"]["name"]: int(o["spec"]["gpuCount"])
        for o in (await w.gateway.list_all(GPU_RESERVATIONS, w.ctx.namespace)).items
    }
    used: Counter[str] = Counter()
    for user in USERS:
        for pod in (await w.gateway.list_all(PODS, user)).items:
            ref = (pod["metadata"].get("annotations") or {}).get(vocab.BOOKING_REFERENCE)
            if ref and not pod["metadata"].get("deletionTimestamp"):
                used[ref] += 1  # every pod here asks for one GPU
    return sorted(n for n, gpus in used.items() if gpus > budgets.get(n, 0))


#: Events telling a pod why it waits: which ones a pod saw depends on the path the
#: admissions took (a restart in the middle of them changes the path, not the result).
WAITING = frozenset(
    {
        vocab.REASON_WAITING_FOR_RESERVATION,
        vocab.REASON_RESERVATION_FULL,
        vocab.REASON_RESERVATION_TOO_SMALL,
    }
)


def settled(state: State) -> tuple[object, ...]:
    """What must be equal after convergence: everything but the waiting Events."""
    specs, holds, pods, events, app = state.comparable()
    outcome = {k: n for k, n in events.items() if k[1] not in WAITING}
    return (specs, holds, pods, outcome, app)


def difference(got: State, want: State) -> str:
    """Where two states differ, field by field (for the failure message)."""
    parts = []
    for name, a, b in zip(
        ("specs", "holds", "pods", "events", "app"),
        got.comparable(),
        want.comparable(),
        strict=True,
    ):
        if a != b:
            parts.append(f"{name}: {a} != {b}")
    return "; ".join(parts)


@pytest.mark.parametrize("op", OPERATIONS, ids=[o.name for o in OPERATIONS])
def test_kill_at_every_write_then_restart(op: Operation, tmp_path: Path) -> None:
    async def run() -> tuple[list[str], dict[str, str]]:
        async with fault_world(tmp_path) as w:
            counting = KillSwitch()
            await prepare(w, op, counting)
            await w.poll()
            points = list(counting.writes)
            assert points, "the operation wrote nothing"
            await prepare(w, op)
            await w.poll()
            if op.down is not None:
                await op.down(w)
            final = await converge(w)
            assert await op.check(w) == [], "the uninterrupted run"
            outcomes: dict[str, str] = {}
            for at in range(1, len(points) + 1):
                for after in (False, True):
                    label = f"{'after' if after else 'before'} #{at} {points[at - 1]}"
                    switch = KillSwitch(at, after=after)
                    await prepare(w, op, switch)
                    try:
                        await w.poll()
                        outcomes[label] = "not reached"
                        continue
                    except Killed:
                        pass
                    if op.down is not None:
                        await op.down(w)
                    cancels = landed_cancels(switch)
                    state = await converge(w, cancels)
                    problems = []
                    if twice := [c for c, n in cancels.items() if n > 1]:
                        problems.append(f"cancelled twice: {twice}")
                    if op.down is None and settled(state) != settled(final):
                        problems.append(f"ended elsewhere: {difference(state, final)}")
                    if any(n > 1 for k, n in state.events.items() if k[1] not in WAITING):
                        problems.append(f"an Event twice: {state.events}")
                    if over := await over_admitted(w):
                        problems.append(f"over-admitted: {over}")
                    problems += await op.check(w)
                    outcomes[label] = "; ".join(problems) or "converged"
                    if op.check is not no_check:
                        outcomes[label] += f" ({lease_ends(w)})"
            return points, outcomes

    points, outcomes = asyncio.run(run())
    print(f"\n{op.name}: {len(points)} write points")
    for label, result in outcomes.items():
        print(f"  kill {label}: {result}")
    ok = ("converged", "not reached")
    assert {k: v for k, v in outcomes.items() if v.split(" (")[0] not in ok} == {}


def test_reference_names_are_stable() -> None:
    """The scenarios name bookings by id: the app numbers them from 1 after a reset."""
    assert model.reference(1) == "res-1"
