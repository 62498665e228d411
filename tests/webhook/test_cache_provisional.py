"""The cache's view after a claim's write whose answer is not read (``webhook.cache``).

The entry is provisional — the server's state last met with our writes applied on
top — until the watch shows each write; the event of our own write is recognised in
its bytes and never decoded. Each test drives a real ``Admission`` over the ledger's
fake store, whose every stored state is recorded as the watch would deliver it, and
checks the entry against the store: it never hides our holds behind another writer's
event, and once the watch has caught up it equals the store exactly.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import ledger, model
from shared.gateway import WatchEvent
from tests.policy.builders import NOW, gpu_pod, reservation
from tests.webhook.helpers import call, review, wired
from webhook.cache import metadata_of, token_in
from webhook.claims import journal as journal_module
from webhook.claims.entries import Entry, applied, decided
from webhook.handler import Admission

pytestmark = pytest.mark.anyio
NAME = "res-1"


def line(obj: dict[str, Any], kind: str = "MODIFIED") -> bytes:
    """A watch line as the apiserver and the emulator encode it."""
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode()


class Watch:
    """The store's states in order, handed to the cache as its watch would."""

    def __init__(self, admission: Admission, store: Any) -> None:
        self.admission = admission
        self.states: list[dict[str, Any]] = []
        self.decoded = 0
        store.on_write = self.states.append

    def deliver(self) -> None:
        """Every state stored since the last delivery, in order."""
        cache = self.admission.cache
        for state in self.states:
            raw = line(state)
            event = cache.peek(raw)
            if event is None:
                self.decoded += 1
                event = WatchEvent("MODIFIED", json.loads(raw)["object"])
            cache.watched.apply(event)
        self.states.clear()


async def claim(admission: Admission, name: str) -> None:
    doc = await call(admission, review(gpu_pod(1).build() | {"metadata": meta(name)}))
    assert doc["response"].get("patch"), doc


def meta(name: str) -> dict[str, Any]:
    return {"name": name, "namespace": "alice", "labels": gpu_pod(1).build()["metadata"]["labels"]}


def entry(admission: Admission) -> Entry:
    found = admission.cache.entry(NAME)
    assert found is not None
    return found


def assert_is_the_store(admission: Admission, store: Any) -> None:
    got, stored = entry(admission), store.stored(NAME)
    assert admission.cache.journal.pending(NAME) == ()
    assert got.raw["status"] == stored["status"]
    assert got.raw["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert got.reservation == model.from_object(stored)


def pods_held(admission: Admission) -> list[str | None]:
    return [h.pod for h in entry(admission).reservation.holds]


async def write(
    admission: Admission, store: Any, pod: str, raw: dict[str, Any] | None, **more: Any
) -> ledger.ClaimResult:
    """One quiet claim write of ``pod`` decided on ``raw``; ``sending`` tells the
    cache as the group commit does (``sending=None``: it does not hear of it)."""
    sending = more.pop("sending", admission.cache.journal.sent)
    plan = ledger.ClaimPlan(
        namespace=store.namespace,
        name=NAME,
        asks=[ledger.Ask(1, pod, NOW)],
        deadline=1e12,
        base=raw,
        echo=False,
        **more,
    )
    [result] = await ledger.write_claims(store, plan, Sending(sending))
    return result


class Sending:
    """A ``WriteLog`` telling ``sending`` of each quiet write, as the group commit does
    (``sending=None``: nobody hears of it)."""

    def __init__(self, sending: Callable[[ledger.Write], None] | None) -> None:
        self.sending = sending

    def sent(self, write: ledger.Write) -> None:
        if self.sending is not None and write.quiet:
            self.sending(write)


def answered(admission: Admission, *results: ledger.ClaimResult) -> None:
    """The answers of ``results`` reach the cache, in that order."""
    for result in results:
        assert result.raw is not None
        assert result.reservation is not None
        assert result.landed is not None
        admission.cache.landed(result)


async def test_a_write_is_provisional_until_its_own_event_which_is_not_decoded() -> None:
    admission, store = await wired(reservation(1, gpus=8))
    watch = Watch(admission, store)
    await claim(admission, "p-1")
    provisional = entry(admission)
    assert len(admission.cache.journal.pending(NAME)) == 1
    assert pods_held(admission) == ["p-1"]  # our hold shows at once
    assert provisional.reservation.holds == store.reservation(NAME).holds
    watch.deliver()
    assert watch.decoded == 0  # the event of our own write
    assert_is_the_store(admission, store)


async def test_a_drop_landing_before_our_write_does_not_hide_our_holds() -> None:
    """The reconciler's drop keeps the token, so our claim lands after it without a
    re-read; its event (before ours) is joined to our pending write."""
    admission, store = await wired(reservation(1, gpus=8))
    watch = Watch(admission, store)
    await claim(admission, "p-1")
    watch.deliver()
    first = entry(admission).reservation.holds[0].claim

    def drop(res: model.GPUReservation) -> model.GPUReservation:
        return ledger.drop(res, {first})

    await ledger.amend(store, store.namespace, NAME, drop, now=NOW, deadline=1e12)
    await claim(admission, "p-2")  # decided on the cache, which still shows p-1
    assert pods_held(admission) == ["p-1", "p-2"]
    watch.deliver()  # the drop (decoded, joined), then our write (not decoded)
    assert watch.decoded == 1
    assert pods_held(admission) == ["p-2"]
    assert_is_the_store(admission, store)


async def test_each_event_between_is_joined_and_our_hold_never_hidden() -> None:
    admission, store = await wired(reservation(1, gpus=8))
    watch = Watch(admission, store)
    await claim(admission, "p-1")
    watch.deliver()

    def bind_all(res: model.GPUReservation) -> model.GPUReservation:
        for hold in res.holds:
            res = ledger.bind(res, hold.claim, hold.pod or "", f"uid-{hold.pod}")
        return res

    await ledger.amend(store, store.namespace, NAME, bind_all, now=NOW, deadline=1e12)
    await claim(admission, "p-2")
    cache = admission.cache
    for state in watch.states:
        event = cache.peek(line(state)) or WatchEvent("MODIFIED", copy.deepcopy(state))
        cache.watched.apply(event)
        assert "p-2" in pods_held(admission)
    watch.states.clear()
    assert entry(admission).reservation.holds[0].pod_uid == "uid-p-1"
    assert_is_the_store(admission, store)


async def test_a_room_taking_write_after_ours_replaces_the_entry() -> None:
    admission, store = await wired(reservation(1, gpus=8))
    watch = Watch(admission, store)
    await claim(admission, "p-1")

    def add(res: model.GPUReservation) -> model.GPUReservation:
        return ledger.add_hold(res, model.Hold("other", 2, NOW, "q"))

    await ledger.amend(store, store.namespace, NAME, add, now=NOW, deadline=1e12)
    watch.deliver()  # ours (not decoded), then the other writer's (a new token)
    assert watch.decoded == 1
    assert pods_held(admission) == ["p-1", "q"]
    assert_is_the_store(admission, store)


async def test_pipelined_writes_are_shown_one_event_at_a_time() -> None:
    admission, store = await wired(reservation(1, gpus=8))
    watch = Watch(admission, store)
    cache = admission.cache
    first = entry(admission)
    one = await write(admission, store, "a", first.raw, parsed=first.reservation)
    two = await write(admission, store, "b", one.raw, parsed=one.reservation, pipelined=True)
    assert (one.conflicts, two.conflicts) == (0, 0)
    answered(admission, one, two)
    assert len(admission.cache.journal.pending(NAME)) == 2
    assert pods_held(admission) == ["a", "b"]
    first_state, second_state = watch.states
    assert cache.peek(line(second_state)) is None  # not the first pending write's
    shown = cache.peek(line(first_state))
    assert shown is not None
    cache.watched.apply(shown)
    assert len(admission.cache.journal.pending(NAME)) == 1
    version = shown.object["metadata"]["resourceVersion"]
    assert entry(admission).reservation.resource_version == version
    assert pods_held(admission) == ["a", "b"]
    watch.states = [second_state]
    watch.deliver()
    assert watch.decoded == 0
    assert_is_the_store(admission, store)


async def test_an_answer_after_the_watch_showed_its_write_changes_nothing() -> None:
    admission, store = await wired(reservation(1, gpus=8))
    watch = Watch(admission, store)
    first = entry(admission)
    result = await write(admission, store, "a", first.raw, parsed=first.reservation)
    watch.deliver()  # the event before the answer: known from the send, not decoded
    assert watch.decoded == 0
    assert_is_the_store(admission, store)
    before = entry(admission)
    answered(admission, result)
    assert entry(admission) is before


async def test_a_list_from_before_our_write_keeps_our_hold_until_its_event() -> None:
    admission, store = await wired(reservation(1, gpus=8))
    watch = Watch(admission, store)
    listed = copy.deepcopy(store.stored(NAME))
    await claim(admission, "p-1")
    provisional = entry(admission)
    old = model.from_object(listed)
    assert (
        admission.cache.journal.join(provisional, Entry(old, listed)).reservation.holds
        == provisional.reservation.holds
    )
    watch.deliver()
    assert_is_the_store(admission, store)


async def test_a_state_with_a_token_no_pending_write_knows_is_taken_as_it_is() -> None:
    """A token none of our writes tested or set: a room-taking write since them all.
    The state is taken as it is, and our writes are seen (it shows them)."""
    admission, _ = await wired(reservation(1, gpus=8))
    await claim(admission, "p-1")
    journal, provisional = admission.cache.journal, entry(admission)
    assert len(journal.pending(NAME)) == 1
    res = provisional.reservation
    other = Entry(replace(res, token="t9", resource_version="9"), {"other": True})
    assert journal.join(provisional, other) is other
    assert journal.pending(NAME) == ()
    assert journal.join(None, other) is other
    assert journal.join(Entry(res, {}), other) is other


async def test_peek_leaves_every_other_line_to_the_decoder() -> None:
    admission, store = await wired(reservation(1, gpus=8))
    watch = Watch(admission, store)
    await claim(admission, "p-1")
    [state] = watch.states
    cache = admission.cache
    other = copy.deepcopy(state)
    other["metadata"]["name"] = "res-2"
    old = copy.deepcopy(state)
    old["metadata"]["resourceVersion"] = "1"
    assert cache.peek(line(state, "DELETED")) is None
    assert cache.peek(line(other)) is None
    assert cache.peek(line(old)) is None
    assert cache.peek(b'{"type":"MODIFIED","object":{"status":{}}}') is None
    assert cache.peek(line({**state, "metadata": "not an object"})) is None
    assert len(admission.cache.journal.pending(NAME)) == 1
    assert cache.peek(line(state)) is not None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"7"}}}', "7"),
        (b'{"type":"MODIFIED","object":{"metadata":{"name":"a"', None),
        (b'{"type":"MODIFIED","object":{"metadata":[1]}}', None),
        (b'{"type":"MODIFIED","object":{"spec":{}}}', None),
        (b'{"type":"MODIFIED","object":{"metadata":\xff}}', None),
        (
            b'{"object":{"metadata":{"annotations":{"a":"' + b"x" * 5000 + b'"},'
            b'"resourceVersion":"9"},"spec":{}}}',
            "9",
        ),
    ],
    ids=["whole", "cut-off", "not-an-object", "absent", "not-utf8", "longer-than-the-window"],
)
def test_metadata_is_read_alone_or_not_at_all(raw: bytes, expected: str | None) -> None:
    meta = metadata_of(raw)
    assert (None if meta is None else meta.get("resourceVersion")) == expected


async def test_pending_writes_are_bounded_when_the_watch_delivers_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(journal_module, "MAX_PENDING", 3)
    admission, store = await wired(reservation(1, gpus=100))
    for i in range(6):
        await claim(admission, f"p-{i}")
    assert len(admission.cache.journal.pending(NAME)) == 3
    assert pods_held(admission) == [f"p-{i}" for i in range(6)]  # every hold still shown
    assert admission.metrics.ledger_conflicts._value.get() == 0  # nor a race lost for it
    await admission.cache.relist()
    assert_is_the_store(admission, store)


async def test_writes_whose_events_come_before_their_answers_are_not_decoded() -> None:
    """Two pipelined writes and a third that lost its race on a stale copy first (its
    first attempt, sent and refused, never shows): every event is known from the send."""
    admission, store = await wired(reservation(1, gpus=8))
    watch = Watch(admission, store)
    first = entry(admission)
    one = await write(admission, store, "a", first.raw, parsed=first.reservation)
    two = await write(admission, store, "b", one.raw, parsed=one.reservation, pipelined=True)
    three = await write(admission, store, "c", first.raw)
    assert (one.conflicts, two.conflicts, three.conflicts) == (0, 0, 1)
    watch.deliver()  # no answer in yet
    assert watch.decoded == 0
    assert_is_the_store(admission, store)
    assert pods_held(admission) == ["a", "b", "c"]
    shown = entry(admission)
    answered(admission, one, two, three)
    assert entry(admission) is shown  # the answers after their events change nothing


async def test_a_pipelined_write_answered_before_the_one_it_follows_shows_both() -> None:
    admission, store = await wired(reservation(1, gpus=8))
    watch = Watch(admission, store)
    first = entry(admission)
    one = await write(admission, store, "a", first.raw, parsed=first.reservation)
    two = await write(admission, store, "b", one.raw, parsed=one.reservation, pipelined=True)
    answered(admission, two)  # the second's answer first: the first landed before it
    assert pods_held(admission) == ["a", "b"]
    assert entry(admission).reservation.token == store.reservation(NAME).token
    answered(admission, one)
    assert pods_held(admission) == ["a", "b"]
    watch.deliver()
    assert watch.decoded == 0
    assert_is_the_store(admission, store)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"object":{"status":{"ledgerToken":"abc","usedGpus":1}}}', b"abc"),
        (b'{"object":{"status":{"x":{"ledgerToken":"old"},"ledgerToken":"new"}}}', b"new"),
        (b'{"object":{"status":{"ledgerToken":""}}}', None),
        (b'{"object":{"status":{"ledgerToken":"cut', None),
        (b'{"object":{"status":{"ledgerToken":7}}}', None),
        (b'{"object":{"status":{}}}', None),
    ],
    ids=["one", "the-last", "empty", "cut-off", "not-a-string", "absent"],
)
def test_the_token_is_read_from_the_line_or_not_at_all(raw: bytes, expected: bytes | None) -> None:
    assert token_in(raw) == expected


async def test_a_refusal_decided_on_a_provisional_entry_leaves_it_provisional() -> None:
    """A group refused whole hands back the object it was judged on — here the cache's
    own provisional one (the second claim waited for the first's write, then found the
    booking full), which is not a state of the server to put back."""
    admission, store = await wired(reservation(1, gpus=1))
    store.yields = lambda: 3  # the first write is still on its way when the second asks
    watch = Watch(admission, store)
    patching = asyncio.Event()
    store.before["patch"] = patching.set
    first = asyncio.create_task(
        call(admission, review(gpu_pod(1).build() | {"metadata": meta("p-1")}))
    )
    await patching.wait()
    second = await call(admission, review(gpu_pod(1).build() | {"metadata": meta("p-2")}))
    assert (await first)["response"].get("patch")
    assert not second["response"].get("patch")  # queued: the booking is full
    assert admission.engine.writes == 2  # the second group wrote nothing
    assert len(admission.cache.journal.pending(NAME)) == 1
    watch.deliver()
    assert watch.decoded == 0
    assert_is_the_store(admission, store)


async def test_an_event_before_its_answer_takes_the_write_as_the_ledger_decided_it() -> None:
    """A write decided on the confirmed entry: its event (before the answer) puts in
    the object and ledger the write carries (``QuietWrite.after``, ``result``) — not
    ``ops`` applied again — which are what applying them gives."""
    admission, store = await wired(reservation(1, gpus=8, holds=(1, 2)))
    watch = Watch(admission, store)
    first = entry(admission)
    one = await write(admission, store, "a", first.raw, parsed=first.reservation)
    landed = one.landed
    assert landed is not None
    assert landed.after is not None
    assert landed.result is not None
    assert decided(first, landed) == applied(first, [landed])
    watch.deliver()
    assert watch.decoded == 0
    assert entry(admission).raw["status"] is landed.after["status"]  # taken, not rebuilt
    assert_is_the_store(admission, store)


async def test_a_write_not_decided_on_the_entry_is_applied_on_top() -> None:
    """``decided`` takes only the very state a write was decided on: not a pipelined
    write's (decided on an expectation), not an entry with writes pending, not another
    resourceVersion."""
    admission, store = await wired(reservation(1, gpus=8))
    first = entry(admission)
    one = await write(admission, store, "a", first.raw, parsed=first.reservation)
    two = await write(admission, store, "b", one.raw, parsed=one.reservation, pipelined=True)
    assert one.landed is not None
    assert two.landed is not None
    assert two.landed.base_version == ""
    assert decided(first, two.landed) is None
    pending = applied(first, [one.landed])
    assert pending is not None
    assert decided(pending, one.landed) is None
    moved = Entry(replace(first.reservation, resource_version="999"), first.raw)
    assert decided(moved, one.landed) is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    held=st.lists(st.integers(1, 3), max_size=6),
    asks=st.lists(st.integers(1, 4), min_size=1, max_size=6),
    gpus=st.integers(1, 24),
)
def test_the_ledger_decided_is_the_write_applied_on_the_state_it_was_decided_on(
    held: list[int], asks: list[int], gpus: int
) -> None:
    """Property: for any ledger and group, the object and ledger a quiet write carries
    equal ``applied`` of its ops to the entry it was decided on (what ``decided``
    saves recomputing)."""

    async def run() -> None:
        admission, store = await wired(reservation(1, gpus=max(gpus, sum(held)), holds=tuple(held)))
        first = entry(admission)
        plan = ledger.ClaimPlan(
            namespace=store.namespace,
            name=NAME,
            asks=[ledger.Ask(n, f"p-{i}", NOW) for i, n in enumerate(asks)],
            deadline=1e12,
            base=first.raw,
            parsed=first.reservation,
            echo=False,
        )
        results = await ledger.write_claims(store, plan)
        landed = next((r.landed for r in results if r.landed is not None), None)
        if landed is None:  # nothing fitted: nothing written
            assert not any(r.admitted for r in results)
            return
        assert decided(first, landed) == applied(first, [landed])

    asyncio.run(run())
