"""Window open at scale: the pods of one reservation claim with one ledger write, then
are patched concurrently; the budget holds whatever else writes the ledger meanwhile."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from shared import ledger, model, vocab
from shared.errors import Invalid
from shared.resources import GPU_RESERVATIONS, PODS
from tests.reconciler.builders import NS, START
from tests.reconciler.test_admit import World, facts, gpu_pod, run


def opened(*budgets: int, pods: int) -> tuple[World, list[str]]:
    """A minute into the window of reservations res-1, res-2, … with these GPU budgets,
    and ``pods`` queued 1-GPU pods p0, p1, … of their owner."""
    w = World(now=START + timedelta(minutes=1))
    for rid, gpus in enumerate(budgets, start=1):
        w.book(facts(rid=rid, gpus=gpus))
    names = [f"p{i}" for i in range(pods)]
    for name in names:
        w.kube.add(PODS, gpu_pod(name))
    return w, names


def admitted(w: World, names: list[str]) -> list[str]:
    return [
        n
        for n in names
        if vocab.BOOKING_REFERENCE in (w.pod(n)["metadata"].get("annotations") or {})
    ]


def status_writes(w: World) -> list[int]:
    """Hold counts of every GPUReservation write, in order."""
    seen: list[int] = []

    def note(obj: dict[str, Any]) -> None:
        if obj.get("kind") == vocab.CRD_KIND or "holds" in (obj.get("status") or {}):
            seen.append(len((obj.get("status") or {}).get("holds") or []))

    w.kube.on_write = note
    return seen


def test_the_pods_of_a_reservation_are_claimed_in_one_write_and_all_patched() -> None:
    async def scenario() -> None:
        w, names = opened(8, pods=10)
        writes = status_writes(w)
        await w.step()
        assert writes[0] == 8  # the first ledger write holds every pod that fits
        assert len(admitted(w, names)) == 8
        assert ledger.used(w.ledger_of()) == 8
        holds = {h.pod for h in w.ledger_of().holds}
        assert holds == set(admitted(w, names))

    run(scenario())


def test_a_write_by_someone_else_is_counted_before_the_group_is_admitted() -> None:
    """Another replica takes 3 of the 8 GPUs between the pass's read and its write: the
    group's write meets a 409, re-reads and admits only the 5 that still fit."""

    async def scenario() -> None:
        w, names = opened(8, pods=8)
        await w.sync()

        def other_replica() -> None:
            key = (GPU_RESERVATIONS.plural, NS, "res-1")
            res = model.from_object(w.kube.objects[key])
            taken = ledger.add_hold(res, model.Hold("elsewhere", 3, w.clock.now()))
            w.kube.add(GPU_RESERVATIONS, model.to_object(taken, NS, w.clock.now()), NS)

        w.kube.before["patch"] = other_replica  # the ledger write comes first
        await w.admitter.once()
        await w.sync()
        assert len(admitted(w, names)) == 5
        assert ledger.used(w.ledger_of()) == 8
        assert model.claim_key("elsewhere") in {h.claim for h in w.ledger_of().holds}

    run(scenario())


def test_pods_the_first_reservation_cannot_take_go_to_the_next() -> None:
    async def scenario() -> None:
        w, names = opened(2, 2, pods=4)
        await w.step()
        refs = [w.pod(n)["metadata"]["annotations"][vocab.BOOKING_REFERENCE] for n in names]
        assert sorted(refs) == ["res-1", "res-1", "res-2", "res-2"]
        assert ledger.used(w.ledger_of(1)) == ledger.used(w.ledger_of(2)) == 2

    run(scenario())


def test_a_refused_patch_drops_only_that_pods_hold() -> None:
    async def scenario() -> None:
        w, names = opened(4, pods=3)
        original = w.kube.patch

        async def refuse_p1(res, name, *args, **kwargs):
            if res is PODS and name == "p1":
                raise Invalid(422, "refused", "Invalid")
            return await original(res, name, *args, **kwargs)

        w.kube.patch = refuse_p1  # type: ignore[method-assign]
        await w.step()
        assert admitted(w, names) == ["p0", "p2"]
        assert {h.pod for h in w.ledger_of().holds} == {"p0", "p2"}

    run(scenario())
