"""Review: an admission patch whose answer is lost (a timeout) may have been applied."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from shared import vocab
from shared.errors import Forbidden, ServerError
from shared.model import claim_key
from shared.resources import GPU_RESERVATIONS, PODS, Resource
from tests.reconciler.builders import START
from tests.reconciler.test_admit import Kube, World, facts, gpu_pod, run


class LosingKube(Kube):
    """Applies the next pod patch, or not, and then loses the answer."""

    def __init__(self) -> None:
        super().__init__()
        self.lose: str | None = None  # "applied" | "dropped"

    async def patch(self, res: Resource, name: str, patch: Any, *args: Any, **kw: Any) -> Any:
        if res is not PODS:  # the ledger's claim is a patch too: left alone
            return await super().patch(res, name, patch, *args, **kw)
        how, self.lose = self.lose, None
        if res is PODS and how == "dropped":
            raise ServerError(0, f"PATCH {name}: no answer within 10.0s")
        got = await super().patch(res, name, patch, *args, **kw)
        if res is PODS and how == "applied":
            raise ServerError(0, f"PATCH {name}: no answer within 10.0s")
        return got


def world(lose: str) -> World:
    kube = LosingKube()
    kube.lose = lose
    w = World(now=START + timedelta(minutes=1), kube=kube)
    w.book(facts(gpus=1))
    w.kube.add(PODS, gpu_pod("a"))
    return w


def test_a_patch_that_landed_keeps_its_hold_and_is_announced() -> None:
    async def scenario() -> None:
        w = world("applied")
        await w.step()
        notes = w.pod("a")["metadata"]["annotations"]
        claim = notes[vocab.ADMISSION_CLAIM]
        assert [h.claim for h in w.ledger_of().holds] == [claim_key(claim)]
        await w.step()
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 1

    run(scenario())


def test_a_patch_that_did_not_land_keeps_the_hold_until_the_ttl() -> None:
    async def scenario() -> None:
        w = world("dropped")
        await w.step()
        assert vocab.BOOKING_REFERENCE not in (w.pod("a")["metadata"].get("annotations") or {})
        # Unknown outcome: the hold stays (unbound); upkeep expires it after the TTL.
        [hold] = w.ledger_of().holds
        assert not hold.bound

    run(scenario())


def test_the_announcer_forgets_admissions_once_the_ledger_says_announced() -> None:
    """Three pods of one booking admitted by one pass: three Events, then one ledger
    write binding and marking all three holds (not three writes racing on one object);
    the first pass a claim TTL later forgets them (a wiped status rebuilds the holds of
    pods admitted within the TTL unannounced: until then they are remembered)."""

    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        w.book(facts(gpus=4))
        for name in ("a", "b", "c"):
            w.kube.add(PODS, gpu_pod(name))
        await w.step()
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 3
        ledger_writes = {("replace", GPU_RESERVATIONS.plural), ("patch", GPU_RESERVATIONS.plural)}
        writes = [c for c in w.kube.calls if c in ledger_writes]
        # the group claim (a JSON Patch of /status), then the announcement marks (a PUT)
        assert len(writes) == 2
        holds = w.ledger_of().holds
        assert sorted(str(h.pod_uid) for h in holds) == ["uid-a", "uid-b", "uid-c"]
        assert all(h.announced for h in holds)
        await w.step()  # the pass after: the cache shows every hold announced
        announcer = w.admitter.step.announcer
        assert len(announcer.announced) == 3
        await w.clock.advance(w.settings.ledger_claim_ttl_s + 1)
        await w.step()
        assert announcer.announced == {}  # memory does not grow with every admission
        assert len(w.kube.events(vocab.REASON_RUNTIME_GUARANTEED)) == 3

    run(scenario())


def test_pods_that_left_unseen_are_forgotten() -> None:
    async def scenario() -> None:
        w = World(now=START - timedelta(minutes=5))
        w.book(facts())
        w.kube.add(PODS, gpu_pod("waits"))
        await w.step()
        assert w.admitter.step.teller._recalled == {"uid-waits"}
        assert set(w.admitter.step.waited_open) == {"uid-waits"}
        # The pod is deleted while this replica does not watch (a new leader term
        # starts from an empty cache, so no deletion is ever seen).
        del w.kube.objects[(PODS.plural, "alice", "waits")]
        w.caches.reset()
        await w.step()
        assert w.admitter.step.teller._recalled == set()
        assert w.admitter.step.waited_open == {}

    run(scenario())


def test_a_pod_whose_admission_patch_is_refused_is_not_retried_in_a_hot_loop() -> None:
    async def scenario() -> None:
        w = World(now=START + timedelta(minutes=1))
        w.book(facts())
        w.kube.add(PODS, gpu_pod("a"))
        await w.sync()
        w.kube.faults["patch pods"] = Forbidden(403, "denied by policy", "Forbidden")
        writes: list[str] = []

        def watched(obj: dict[str, Any]) -> None:  # the reservation watch, at once
            if obj.get("kind") == vocab.CRD_KIND:
                writes.append(obj["metadata"]["resourceVersion"])
                w.caches.reservations.upsert(obj)

        w.kube.on_write = watched
        task = asyncio.create_task(w.admitter.run(300.0))
        for _ in range(500):
            await asyncio.sleep(0)
        assert len(writes) <= 2  # one claim, one release: then it waits for a change
        w.kube.faults.clear()
        await w.clock.advance(300)  # the backstop tick retries
        for _ in range(50):
            await asyncio.sleep(0)
        assert vocab.BOOKING_REFERENCE in w.pod("a")["metadata"]["annotations"]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(scenario())
