"""Issue 14 acceptance 2: the fault matrix. Every fault × every scenario; per cell:

- nothing lost or changed on bad data: while the fault lasts, every GPUReservation that
  exists before it and after the baseline still exists, and each spec is either what it
  was or what the baseline (the same scenario without the fault) makes it;
- no pod evicted on unknown state: a pod gone while the fault lasts is one the
  baseline evicts too;
- no duplicate Event: never two of one reason on one pod, and none the baseline does
  not send;
- convergence within one poll after the fault clears: the state equals the baseline's.

The table (fault × scenario → outcome) is printed: ``held`` (nothing moved while the
fault lasted), ``absorbed`` (the change went through regardless), ``partial`` (some of
it), each followed by ``→ converged``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared import model
from shared.resources import GPU_RESERVATIONS
from tests.faults.harness import FAULTS, SLOW, Fault, FaultWorld, State, fault_world

pytest.importorskip("sandbox.kube.component")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

Step = Callable[[FaultWorld], Awaitable[None]]


@dataclass(frozen=True)
class Scenario:
    name: str
    #: Builds the starting state (healthy; polls as it needs).
    setup: Step
    #: The change the reconciler must process while the fault lasts.
    change: Step


async def one_admitted(w: FaultWorld) -> None:
    rid = await w.book()
    await w.poll()
    await w.pod("job", model.reference(rid))
    await w.poll()


async def nothing(w: FaultWorld) -> None:
    await w.poll()


async def new_booking(w: FaultWorld) -> None:
    await w.book(gpus=4)


async def cancel_first(w: FaultWorld) -> None:
    await w.control(f"bookings/{w.booked[0]}/cancel")


async def reassign_first(w: FaultWorld) -> None:
    await w.control(f"bookings/{w.booked[0]}/reassign", {"username": "bob"})


async def declared_pod(w: FaultWorld) -> None:
    await w.pod("sneak", None)


async def two_admitted(w: FaultWorld) -> None:
    rid = await w.book()
    await w.poll()
    for i in range(2):
        await w.pod(f"job-{i}", model.reference(rid))
    await w.poll()


async def wipe_ledgers(w: FaultWorld) -> None:
    for obj in (await w.gateway.list_all(GPU_RESERVATIONS, w.ctx.namespace)).items:
        obj["status"] = {"holds": []}
        name = obj["metadata"]["name"]
        await w.gateway.replace(GPU_RESERVATIONS, name, obj, w.ctx.namespace, "status")


async def ending_windows(w: FaultWorld) -> None:
    await w.book(start="-50m", end="+10m")  # no pod: deleted once ended
    kept = await w.book(start="-50m", end="+10m")
    await w.poll()
    await w.pod("late", model.reference(kept))
    await w.poll()


async def windows_end(w: FaultWorld) -> None:
    await w.advance(15 * 60)


SCENARIOS = (
    Scenario("new booking", nothing, new_booking),
    Scenario("cancel mid-window", one_admitted, cancel_first),
    Scenario("reassigned", one_admitted, reassign_first),
    Scenario("declared pod", one_admitted, declared_pod),
    Scenario("wiped ledger", two_admitted, wipe_ledgers),
    Scenario("window ends", ending_windows, windows_end),
)
#: Polls run while a fault lasts.
POLLS_UNDER_FAULT = 1


@dataclass
class Cell:
    before: State
    during: State
    after: State


async def run_cell(w: FaultWorld, scenario: Scenario, fault: Fault | None) -> Cell:
    """One cell on ``w`` (reset first)."""
    await w.reset()
    await scenario.setup(w)
    await scenario.change(w)
    before = await w.observe()
    if fault is not None:
        await w.inject(fault)
        for _ in range(POLLS_UNDER_FAULT):
            await w.poll()
        await w.clear()  # (clearing changes nothing; the API must answer to observe)
        during = await w.observe()
    else:
        during = before
    await w.poll()
    return Cell(before, during, await w.observe())


def violations(cell: Cell, final: State) -> list[str]:
    """Every invariant ``cell`` breaks, in words (empty: none)."""
    found = []
    before, during = cell.before, cell.during
    for name in before.specs.keys() & final.specs.keys():
        if name not in during.specs:
            found.append(f"{name} lost under the fault")
    for name, spec in during.specs.items():
        if spec not in (before.specs.get(name), final.specs.get(name)):
            found.append(f"{name} changed to a spec neither before nor after: {spec}")
    if not (before.pods - during.pods) <= (before.pods - final.pods):
        found.append(f"evicted on unknown state: {sorted(before.pods - during.pods)}")
    for key, count in (cell.after.events + during.events).items():
        if cell.after.events[key] > 1 or during.events[key] > final.events[key]:
            found.append(f"event {key} sent {cell.after.events[key]}x (baseline {count})")
    if cell.after.comparable() != final.comparable():
        found.append(f"not converged one poll after: {cell.after} != {final}")
    return found


def outcome(cell: Cell, final: State) -> str:
    moved = cell.during.comparable() != cell.before.comparable()
    done = cell.during.comparable() == final.comparable()
    how = "absorbed" if done else ("partial" if moved else "held")
    return f"{how} → converged"


TABLE: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_fault_for_one_scenario(scenario: Scenario, tmp_path: Path) -> None:
    async def run() -> dict[str, list[str]]:
        async with fault_world(tmp_path) as w:
            baseline = await run_cell(w, scenario, None)
            final = baseline.after
            assert final.comparable() != baseline.before.comparable(), "the change is a no-op"
            broken: dict[str, list[str]] = {}
            for fault in (*FAULTS, *SLOW):
                cell = await run_cell(w, scenario, fault)
                problems = violations(cell, final)
                TABLE[(fault.name, scenario.name)] = "; ".join(problems) or outcome(cell, final)
                if problems:
                    broken[fault.name] = problems
            return broken

    assert asyncio.run(run()) == {}


def test_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """Print the matrix (after the scenario tests filled it) and count its cells."""
    faults = [f.name for f in (*FAULTS, *SLOW)]
    scenarios = [s.name for s in SCENARIOS]
    width = max(len(f) for f in faults)
    lines = [f"{'fault':<{width}} | " + " | ".join(scenarios)]
    for fault in faults:
        cells = [TABLE.get((fault, s), "not run") for s in scenarios]
        lines.append(f"{fault:<{width}} | " + " | ".join(cells))
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert len(faults) * len(scenarios) >= 40
