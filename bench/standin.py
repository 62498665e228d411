"""The reconciler's upkeep of one booking, as a process of its own (webhook benchmark).

``python -m bench.standin KUBECONFIG NAMESPACE NAME FEED`` passes over the booking's
ledger back to back (``PAUSE_S`` apart), each pass a ``ledger.amend`` applying
``upkeep_pass`` through the thread-pool gateway the reconciler uses. It binds a hold
only once its pod exists, as the reconciler does (``shared.ledger.rebuild``: a hold is
bound to the live pod carrying its claim id). There are no pods here: the load
processes (``bench.loadgen``) send the claim id of every admitted answer to the UNIX
datagram socket ``FEED`` (which the stand-in binds), and a *fed* claim stands for a
pod created with it. The newest ``KEEP_HOLDS`` bound holds stay, older bound ones are
dropped (those pods finished), and a hold never fed stays unbound until it is older
than the claim TTL (a create that never happened) — so the booking never fills while
every admission becomes a pod, and its writes are the reconciler's contention.

The real reconciler is a process of its own beside the API server, so the stand-in is
one too: inside the benchmark's process its client threads would share the emulator's
interpreter lock. It prints ``ready`` once its gateway is built and its socket bound,
runs until its standard input closes, reads what is left in the socket and makes a
last pass (the load processes have sent everything by then), then prints the number
of ledger writes it made.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import time
from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from shared import ledger, model
from shared.clock import SystemClock
from shared.gateway import Gateway

#: Bound holds left after each pass (the older pods have finished).
KEEP_HOLDS = 32
#: Pause between two passes: the reconciler's pass follows the pod events at once
#: (``reconciler.base.upkeep.Keeper``: woken by each pod event, no debounce); this stands for
#: the watch delivering the new pods and the pass's own work.
PAUSE_S = 0.01
#: The reconciler's default ``LEDGER_CLAIM_TTL_SECONDS`` (``reconciler.base.settings``): an
#: unbound hold older than this is dropped.
CLAIM_TTL_S = 120.0
#: Receive buffer of the feed socket (the load processes must rarely find it full).
FEED_BUFFER = 1 << 20


def upkeep_pass(
    res: model.GPUReservation, fed: Collection[str], now: datetime, ttl_s: float = CLAIM_TTL_S
) -> model.GPUReservation:
    """What one reconciler upkeep pass does to the booking's ledger while pods stream in
    (pure; no side effects). An unbound hold whose claim id was ``fed`` (its pod
    exists; the hold keeps the id's key) is bound to a made-up pod named after the
    id; of the bound holds, the newest ``KEEP_HOLDS`` (last in the ledger, which
    appends claims) stay and the older are dropped; an unbound hold not fed stays
    while it is not older than ``ttl_s`` at ``now`` (its pod may still be being
    created). Fed ids that name no hold change nothing; order is kept."""
    ids = fed_keys(fed)
    holds = [
        replace(h, pod=h.pod or ids[h.claim], pod_uid=f"uid-{ids[h.claim]}")
        if not h.bound and h.claim in ids
        else h
        for h in res.holds
    ]
    bound = [i for i, h in enumerate(holds) if h.bound]
    newest = set(bound[-KEEP_HOLDS:]) if KEEP_HOLDS else set()
    cutoff = now - timedelta(seconds=ttl_s)
    kept = tuple(h for i, h in enumerate(holds) if (i in newest if h.bound else h.at >= cutoff))
    return replace(res, holds=kept)


def fed_keys(fed: Collection[str]) -> dict[str, str]:
    """The ledger key of each fed claim id → that id (holds keep keys, pods carry ids)."""
    return {model.claim_key(c): c for c in fed}


def claims(datagram: bytes) -> list[str]:
    """The claim ids of one feed datagram (newline-separated; empty lines skipped,
    undecodable bytes replaced: such an id matches no hold). No side effects."""
    text = datagram.decode("utf-8", "replace")
    return [c for c in (line.strip() for line in text.split("\n")) if c]


def forget(
    fed: Mapping[str, float], seen: Collection[str], now: float, ttl_s: float = CLAIM_TTL_S
) -> dict[str, float]:
    """The fed ids (→ when they arrived, monotonic seconds) still worth keeping: not
    ``seen`` in the ledger a pass applied to (bound by it, or already bound), and not
    older than ``ttl_s`` (an id naming no hold: another booking's, or malformed). No
    side effects."""
    return {c: at for c, at in fed.items() if c not in seen and now - at <= ttl_s}


class FeedSocket:
    """The receiving end of the feed: a UNIX datagram socket bound at ``path``, read
    by the event loop as datagrams arrive (so a long pass does not leave the load
    processes a full socket)."""

    def __init__(self, path: str) -> None:
        self.path = path
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, FEED_BUFFER)
        self.sock.bind(path)
        self.sock.setblocking(False)
        #: Fed claim ids not yet seen in the ledger → monotonic arrival.
        self.fed: dict[str, float] = {}

    def drain(self) -> None:
        """Read every datagram waiting."""
        now = time.monotonic()
        while True:
            try:
                datagram = self.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                return
            self.fed.update(dict.fromkeys(claims(datagram), now))

    def close(self) -> None:
        self.sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


async def passes(gateway: ledger.LedgerGateway, namespace: str, name: str, feed: FeedSocket) -> int:
    """Passes until standard input closes, then a last one; the ledger writes made."""
    loop = asyncio.get_running_loop()
    closed = loop.run_in_executor(None, sys.stdin.read)
    loop.add_reader(feed.sock.fileno(), feed.drain)
    writes = 0
    try:
        while not closed.done():
            await asyncio.sleep(PAUSE_S)
            writes += await one_pass(gateway, namespace, name, feed)
        feed.drain()
        writes += await one_pass(gateway, namespace, name, feed)
    finally:
        loop.remove_reader(feed.sock.fileno())
    return writes


async def one_pass(
    gateway: ledger.LedgerGateway, namespace: str, name: str, feed: FeedSocket
) -> int:
    """One ``ledger.amend`` of ``upkeep_pass`` with the ids fed so far; 1 when it wrote.
    Fed ids the ledger it applied to holds are consumed once the amend returns."""
    now = SystemClock().now()
    fed = frozenset(feed.fed)
    seen: set[str] = set()
    changed = False

    def change(res: model.GPUReservation) -> model.GPUReservation:
        nonlocal changed, seen
        updated = upkeep_pass(res, fed, now)
        changed = updated.holds != res.holds
        ids = fed_keys(fed)
        seen = {ids[h.claim] for h in res.holds if h.claim in ids}
        return updated

    deadline = time.monotonic() + 2
    got = await ledger.amend(gateway, namespace, name, change, now=now, deadline=deadline)
    if got is None:
        return 0
    feed.fed = forget(feed.fed, seen, time.monotonic())
    return int(changed)


def main(argv: list[str]) -> int:
    kubeconfig, namespace, name, path = argv
    gateway = Gateway.from_kubeconfig(kubeconfig)
    feed = FeedSocket(path)
    try:
        print("ready", flush=True)
        print(asyncio.run(passes(gateway, namespace, name, feed)), flush=True)
    finally:
        feed.close()
        gateway.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
