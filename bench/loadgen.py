"""The load generator: separate processes sending AdmissionReviews over keep-alive TLS.

A benchmark that drives a server from its own process measures the client as much as
the server (one GIL, one event loop). Here each load process opens its share of the
connections (TLS handshakes done before the clock starts), waits for the common start
signal, and sends one request at a time per connection — closed-loop concurrency
``c`` = connections. The client is a few lines of HTTP/1.1 over ``asyncio`` streams
(no httpx): the request bytes are prepared once per request from a template, so the
client's own cost per request stays far below the server's.

Counted: requests *started* after the warm-up and *answered* before the end of the
measured interval; their latencies (send → whole answer read). Answers are classified
by their bytes: HTTP status, carries a patch, says "admitted under".

The *feed*: a claim load given a socket path (``Load.feed``) sends the upkeep stand-in
(``bench.standin``) the claim id of every admitted answer, warm-up included — the
pod it names is the one the apiserver would now create, so the stand-in binds only
holds a pod carries, as the reconciler does. Ids go a few per UNIX datagram
(``FEED_BATCH``, or after ``FEED_WAIT_S``), non-blocking: a load process shares its
core with the emulator, so the feed must cost it little.

``python -m bench.loadgen`` is not a thing: ``run_load`` starts the processes itself
(multiprocessing, spawn) and merges what they report.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import math
import multiprocessing as mp
import os
import socket
import ssl
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from shared import pointer, vocab

#: Connections per load process (more processes for more connections).
CONNECTIONS_PER_PROCESS = 25
#: Seconds a load process may take to start and connect before the run gives up.
START_TIMEOUT_S = 30.0
#: Claim ids per datagram of the feed, and the longest an id waits for its datagram.
#: Small: an id late for the stand-in's pass leaves its hold unbound a pass longer, and
#: at ≈ 4000 claims/s 16 ids / 5 ms left the 128-GPU booking full (1320 of ≈ 10,000
#: answers queued, c = 10) where 4 / 1 ms left it with room (211), for ≈ 5 µs more of
#: a load process's CPU per answer.
FEED_BATCH = 4
FEED_WAIT_S = 0.001
#: Ids a load process keeps while the stand-in's socket is full, before it drops them.
FEED_BACKLOG = 4096
#: Seconds the last datagram of a load process may wait for room in the socket.
FEED_CLOSE_S = 2.0
#: The pointer of the claim annotation when the pod already had annotations.
CLAIM_POINTER = pointer.annotation(vocab.ADMISSION_CLAIM)


@dataclass(frozen=True)
class Target:
    host: str
    port: int


@dataclass(frozen=True)
class Load:
    """What to send: ``kind`` of pod, how many connections, for how long."""

    kind: str  # "claim" | "named" | "nomatch" | "nongpu"
    connections: int
    warmup_s: float
    measure_s: float
    #: Send exactly this many requests per connection, then stop (a burst); the
    #: interval is then "until done" and warm-up is skipped.
    per_connection: int | None = None
    #: Namespace (= owner) of the pods of a claim or non-GPU load.
    owner: str = "alice"
    #: The upkeep stand-in's UNIX datagram socket to feed admitted claim ids to.
    feed: str | None = None


@dataclass
class Outcome:
    """What the load processes saw, merged."""

    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    patched: int = 0
    admitted: int = 0
    errors: int = 0
    #: Wall seconds of the measured interval (the burst's own duration for a burst).
    seconds: float = 0.0
    #: The load processes' own CPU seconds from the start signal to their last answer,
    #: and the answers they read meanwhile (warm-up included): the client's cost.
    cpu_s: float = 0.0
    answers: int = 0
    #: Admitted answers whose claim id did not reach the feed (none found in the
    #: patch, or the socket absent or full past ``FEED_BACKLOG`` / ``FEED_CLOSE_S``).
    unfed: int = 0

    @property
    def cpu_us_per_answer(self) -> float:
        return self.cpu_s * 1e6 / self.answers if self.answers else float("nan")

    def merge(self, other: dict[str, Any]) -> None:
        self.latencies += other["latencies"]
        self.statuses.update({int(k): v for k, v in other["statuses"].items()})
        self.patched += other["patched"]
        self.admitted += other["admitted"]
        self.errors += other["errors"]
        self.seconds = max(self.seconds, other["seconds"])
        self.cpu_s += other["cpu_s"]
        self.answers += other["answers"]
        self.unfed += other["unfed"]


def pod(kind: str, owner: str) -> dict[str, Any]:
    """The pod of a review: ``claim`` (GPU pod of the booking's owner), ``named`` (the
    same with a name of its own), ``nomatch`` (GPU pod of a namespace without any
    booking), ``nongpu`` (no label, no GPU). All but ``named`` come as a controller's
    pods do (a Job's, a ReplicaSet's): ``generateName``, no name yet at admission."""
    labels = {} if kind == "nongpu" else {vocab.GPU_CLASS_LABEL: "h100"}
    limits = {} if kind == "nongpu" else {vocab.GPU_RESOURCE: "1"}
    namespace = "nobody" if kind == "nomatch" else owner
    naming = {"name": "@NAME@"} if kind == "named" else {"generateName": "bench-"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**naming, "namespace": namespace, "labels": labels},
        "spec": {
            "containers": [
                {"name": "main", "image": "registry.local/train:1", "resources": {"limits": limits}}
            ],
            "restartPolicy": "Never",
        },
    }


def template(kind: str, owner: str) -> bytes:
    """An AdmissionReview (CREATE) with ``@NAME@`` and ``@UID@`` to fill in."""
    obj = pod(kind, owner)
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "@UID@",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": obj["metadata"]["namespace"],
            "name": obj["metadata"].get("name", ""),
            "operation": "CREATE",
            "userInfo": {"username": f"system:serviceaccount:{owner}:default"},
            "object": obj,
            "dryRun": False,
        },
    }
    return json.dumps(review).encode()


def request_bytes(body_template: bytes, name: str) -> bytes:
    body = body_template.replace(b"@NAME@", name.encode()).replace(
        b"@UID@", str(uuid.uuid4()).encode()
    )
    head = (
        f"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


def admission_claim(body: bytes) -> str | None:
    """The claim id an AdmissionReview answer (``body``) gives its pod: the value of
    annotation ``vocab.ADMISSION_CLAIM`` in the answer's JSON Patch, added (or
    replaced) on its own or inside an added annotations map. None when the answer
    carries no such patch or is malformed. No side effects."""
    try:
        ops = json.loads(base64.b64decode(json.loads(body)["response"]["patch"]))
    except (ValueError, KeyError, TypeError):
        return None
    for op in ops if isinstance(ops, list) else ():
        if not isinstance(op, dict) or op.get("op") not in ("add", "replace"):
            continue
        value = op.get("value")
        if op.get("path") == pointer.ANNOTATIONS and isinstance(value, dict):
            value = value.get(vocab.ADMISSION_CLAIM)
        elif op.get("path") != CLAIM_POINTER:
            continue
        if isinstance(value, str) and value:
            return value
    return None


class Feed:
    """The sending end of the feed: claim ids, ``FEED_BATCH`` per datagram (or fewer
    after ``FEED_WAIT_S``), newline-separated. Sends never block the load: while the
    socket is full the ids wait for the next send; with no socket (no stand-in
    listening) they are dropped and counted in ``lost``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        self.pending: list[str] = []
        self.since = 0.0
        self.lost = 0

    def add(self, claim: str, now: float) -> None:
        """Queue ``claim`` (``now``: ``time.perf_counter``); send when due."""
        if not self.pending:
            self.since = now
        self.pending.append(claim)
        if len(self.pending) >= FEED_BATCH or now - self.since >= FEED_WAIT_S:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        try:
            self.sock.sendto("\n".join(self.pending).encode(), self.path)
        except (BlockingIOError, TimeoutError):
            if len(self.pending) < FEED_BACKLOG:
                return  # the stand-in is behind: these go with the next send
            self.lost += len(self.pending)
        except OSError:  # no stand-in listening
            self.lost += len(self.pending)
        self.pending = []

    def close(self) -> None:
        """Send what is left, waiting up to ``FEED_CLOSE_S`` for room."""
        self.sock.settimeout(FEED_CLOSE_S)
        self.flush()
        self.lost += len(self.pending)
        self.pending = []
        self.sock.close()


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
) -> tuple[int, bytes]:
    """Send ``data``; the answer's status and body (Content-Length or chunked: the
    webhook answers with one, the emulated API server with either)."""
    writer.write(data)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while size := int((await reader.readuntil(b"\r\n")).strip() or b"0", 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")
        return status, body
    return status, await reader.readexactly(int(headers.get("content-length", "0")))


class _Process:
    """One load process: its connections, the shared start signal, its counts."""

    def __init__(self, target: Target, load: Load, index: int, connections: int) -> None:
        self.target, self.load = target, load
        self.index, self.connections = index, connections
        self.body = template(load.kind, load.owner)
        self.feed = Feed(load.feed) if load.feed else None
        self.found: dict[str, Any] = {
            "latencies": [],
            "statuses": Counter(),
            "patched": 0,
            "admitted": 0,
            "errors": 0,
            "seconds": 0.0,
            "cpu_s": 0.0,
            "answers": 0,
            "unfed": 0,
        }

    async def run(self, ready: Any, go: Any) -> dict[str, Any]:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the server's identity is not what we measure
        streams = [
            await asyncio.open_connection(self.target.host, self.target.port, ssl=context)
            for _ in range(self.connections)
        ]
        ready.put(self.index)
        await asyncio.to_thread(go.wait, START_TIMEOUT_S)
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        load = self.load
        begin = t0 + (0.0 if load.per_connection else load.warmup_s)
        end = begin + (math.inf if load.per_connection else load.measure_s)
        await asyncio.gather(
            *(self._connection(i, r, w, begin, end) for i, (r, w) in enumerate(streams))
        )
        self.found["seconds"] = (
            (time.perf_counter() - begin) if load.per_connection else load.measure_s
        )
        if self.feed is not None:
            self.feed.close()
            self.found["unfed"] += self.feed.lost
        self.found["cpu_s"] = time.process_time() - cpu0
        for _, w in streams:
            w.close()
        return self.found

    async def _connection(
        self,
        conn: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        begin: float,
        end: float,
    ) -> None:
        sent = 0
        limit = self.load.per_connection
        while (limit is None or sent < limit) and time.perf_counter() < end:
            data = request_bytes(self.body, f"bench-{self.index}-{conn}-{sent}-{os.getpid()}")
            started = time.perf_counter()
            try:
                status, body = await exchange(reader, writer, data)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                self.found["errors"] += 1
                return
            done = time.perf_counter()
            sent += 1
            self.found["answers"] += 1
            if self.feed is not None and b"admitted under" in body:
                self._feed(body, done)
            if started >= begin and done <= end:
                self._count(status, body, done - started)

    def _feed(self, body: bytes, now: float) -> None:
        assert self.feed is not None
        claim = admission_claim(body)
        if claim is None:
            self.found["unfed"] += 1
        else:
            self.feed.add(claim, now)

    def _count(self, status: int, body: bytes, latency: float) -> None:
        found = self.found
        found["latencies"].append(latency)
        found["statuses"][status] += 1
        found["patched"] += b'"patch"' in body
        found["admitted"] += b"admitted under" in body


def _main(
    target: Target, load: Load, index: int, connections: int, ready: Any, go: Any, out: Any
) -> None:
    found = asyncio.run(_Process(target, load, index, connections).run(ready, go))
    found["statuses"] = dict(found["statuses"])
    out.put(found)


def run_load(target: Target, load: Load) -> Outcome:
    """Run ``load`` against ``target`` from separate processes; their merged outcome."""
    spawn = mp.get_context("spawn")
    ready, out, go = spawn.Queue(), spawn.Queue(), spawn.Event()
    shares = _shares(load.connections)
    procs = [
        spawn.Process(target=_main, args=(target, load, i, n, ready, go, out), daemon=True)
        for i, n in enumerate(shares)
    ]
    for proc in procs:
        proc.start()
        pin(proc.pid, server=False)
    try:
        for _ in procs:
            ready.get(timeout=START_TIMEOUT_S)
        go.set()
        outcome = Outcome()
        wait = START_TIMEOUT_S + load.warmup_s + load.measure_s
        for _ in procs:
            outcome.merge(out.get(timeout=wait))
        return outcome
    finally:
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _shares(connections: int) -> list[int]:
    count = max(1, math.ceil(connections / CONNECTIONS_PER_PROCESS))
    base, extra = divmod(connections, count)
    return [base + (i < extra) for i in range(count)]


# --- placement: server and load on separate cores where the machine allows ----------


@functools.cache
def placement() -> tuple[frozenset[int], frozenset[int]] | None:
    """(server cores, load cores) from the cores this process may use at first call:
    the first core for the measured server, the others for the load processes and the
    emulated API server. None on a single core (nothing is pinned then)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return (frozenset(cpus[:1]), frozenset(cpus[1:])) if len(cpus) >= 2 else None


def pin(pid: int | None, server: bool) -> None:
    """Pin ``pid`` to the server's or the load's cores (a no-op where impossible)."""
    cores = placement()
    if pid is None or cores is None:
        return
    with contextlib.suppress(OSError):
        os.sched_setaffinity(pid, cores[0] if server else cores[1])


def describe_placement() -> str:
    cores = placement()
    if cores is None:
        return "not pinned (one core)"
    return f"server on cpu {sorted(cores[0])}, load and API emulator on cpu {sorted(cores[1])}"
