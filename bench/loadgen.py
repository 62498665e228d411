"""The load generator: separate processes sending requests over keep-alive HTTP/1.1.

A benchmark that drives a server from its own process measures the client as much as
the server (one GIL, one event loop). ``generate`` runs the load in processes of at
most ``CONNECTIONS_PER_PROCESS`` connections each (TLS handshakes done before the
clock starts), started together by one signal. What is sent and what an answer means
is a *request maker*'s (``Maker``): the AdmissionReviews of the webhook's direct cells
(``ReviewMaker`` here), the pod creates of the API server's (``bench.createload``).
How requests arrive is a ``Shape``: closed loop (``c`` connections, each sending its
next request once its answer is read) or open loop (requests released by a token
bucket at a rate, as a controller's client-go rate limiter releases them, each on a
free connection of a pool). The client is a few lines of HTTP/1.1 over ``asyncio``
streams (``exchange``, no httpx): request bytes are prepared by the maker, so the
client's own cost per request stays far below the server's.

Counted: requests *started* (closed loop) or *released* (open loop) after the warm-up
and answered before the end of the measured interval; their latencies (send or release
→ whole answer read). The review maker classifies answers by their bytes: HTTP status,
carries a patch, says "admitted under".

The *feed*: a review load given a socket path (``Load.feed``) sends the upkeep stand-in
(``bench.standin``) the claim id of every admitted answer, warm-up included — the
pod it names is the one the apiserver would now create, so the stand-in binds only
holds a pod carries, as the reconciler does. Ids go a few per UNIX datagram
(``FEED_BATCH``, or after ``FEED_WAIT_S``), non-blocking: a load process shares its
core with the emulator, so the feed must cost it little.
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
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from sandbox.cluster.ratelimit import TokenBucket
from shared import pointer, vocab

#: Connections per load process (more processes for more connections).
CONNECTIONS_PER_PROCESS = 25
#: Seconds a load process may take to start and connect before the run gives up.
START_TIMEOUT_S = 30.0
#: Seconds a run without a measured interval's end (until its makers run out) may take.
RUN_GIVE_UP_S = 600.0
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


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


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


# --- the generator: processes, keep-alive connections, closed or rate-limited open loop --


class Maker(Protocol):
    """What one load process sends and what it makes of the answers. A copy goes to
    every process (pickled: spawn), which calls ``setup`` first. ``request(seq)`` gives
    the bytes of the process's ``seq``-th request (0, 1, 2, … in the order sent) or None
    when it has no more; ``answered`` sees every answer, ``counted`` when it was sent
    after the warm-up and read before the end of the measured interval; ``report``
    gives what it found (picklable), merged by the caller; ``finish`` comes between the
    last answer and ``report``. ``setup`` is told the process's index, how many there
    are and the process's connections."""

    def setup(self, index: int, processes: int, connections: int) -> None: ...

    def request(self, seq: int) -> bytes | None: ...

    def answered(
        self, seq: int, status: int, body: bytes, latency: float, counted: bool
    ) -> None: ...

    def finish(self) -> None: ...

    def report(self) -> dict[str, Any]: ...


class Bucket(Protocol):
    """A rate limiter: ``take`` returns once a request may be released."""

    async def take(self) -> None: ...


@dataclass(frozen=True)
class Shape:
    """How requests arrive. Closed loop (``rate`` None): each of ``connections`` sends
    its next request when its answer is read. Open loop: requests are released by a
    token bucket (``rate`` a second after ``burst`` at once, as client-go's rate
    limiter releases a controller's calls, ``sandbox.cluster.ratelimit.TokenBucket``),
    each sent on a free connection of a pool of ``connections``; its latency runs from
    its release, so time spent waiting for a connection counts. Both end when the
    makers have no more requests or after ``warmup_s + measure_s``."""

    connections: int
    warmup_s: float = 0.0
    measure_s: float = math.inf
    rate: float | None = None
    burst: int = 1
    tls: bool = True

    def shares(self) -> list[int]:
        """Connections of each load process."""
        count = max(1, math.ceil(self.connections / CONNECTIONS_PER_PROCESS))
        base, extra = divmod(self.connections, count)
        return [base + (i < extra) for i in range(count)]

    def of_process(self, connections: int) -> Shape:
        """This shape for one process of ``connections``: its part of the rate."""
        if self.rate is None:
            return replace(self, connections=connections)
        part = connections / self.connections
        return replace(
            self,
            connections=connections,
            rate=self.rate * part,
            burst=max(1, round(self.burst * part)),
        )


@dataclass
class Counts:
    """What the generator itself counts in a process: latencies of the counted
    answers, statuses, errors (a connection lost: it sends no more), the interval's
    wall seconds, the process's CPU seconds from the start signal to its last answer
    and the answers read meanwhile (warm-up included)."""

    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    answers: int = 0
    sent: int = 0


class _Clock:
    """The interval of one process: warm-up from the start signal, then measured."""

    def __init__(self, shape: Shape) -> None:
        self.started = time.perf_counter()
        self.begin = self.started + shape.warmup_s
        self.end = self.begin + shape.measure_s


class _Runner:
    """One load process: its connections, the start signal, the loop, its counts."""

    def __init__(
        self, target: Target, shape: Shape, maker: Maker, bucket: Bucket | None = None
    ) -> None:
        self.target, self.shape, self.maker = target, shape, maker
        #: The open loop's rate limiter (a ``TokenBucket`` of the shape's rate by default).
        self.bucket = bucket
        self.counts = Counts()
        self._next = 0

    def _take(self) -> tuple[int, bytes] | None:
        seq = self._next
        data = self.maker.request(seq)
        if data is None:
            return None
        self._next += 1
        return seq, data

    async def stream(self) -> Stream:
        """A new connection to the target."""
        context = None
        if self.shape.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE  # the server's identity is not measured
        return await asyncio.open_connection(self.target.host, self.target.port, ssl=context)

    async def connect(self) -> list[Stream]:
        return [await self.stream() for _ in range(self.shape.connections)]

    async def run(self, streams: list[Stream]) -> Counts:
        """Send until the maker runs out or the interval ends (the start signal given)."""
        cpu0 = time.process_time()
        clock = _Clock(self.shape)
        if self.shape.rate is None:
            await asyncio.gather(*(self._closed(r, w, clock) for r, w in streams))
        else:
            await self._open(streams, clock)
        last = time.perf_counter()
        finite = math.isfinite(self.shape.measure_s)
        self.counts.seconds = self.shape.measure_s if finite else last - clock.begin
        self.counts.cpu_s = time.process_time() - cpu0
        self.maker.finish()
        for _, writer in streams:
            writer.close()
        return self.counts

    async def _closed(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, clock: _Clock
    ) -> None:
        while time.perf_counter() < clock.end and (taken := self._take()) is not None:
            if not await self._send(reader, writer, *taken, time.perf_counter(), clock):
                return

    async def _open(self, streams: list[Stream], clock: _Clock) -> None:
        assert self.shape.rate is not None
        bucket = self.bucket or TokenBucket(self.shape.rate, self.shape.burst, time.perf_counter)
        free: asyncio.Queue[Stream] = asyncio.Queue()
        for stream in streams:
            free.put_nowait(stream)
        flying: set[asyncio.Task[None]] = set()

        async def one(seq: int, data: bytes, released: float) -> None:
            reader, writer = await free.get()
            if await self._send(reader, writer, seq, data, released, clock):
                free.put_nowait((reader, writer))
                return
            writer.close()
            try:  # a lost connection is replaced: the pool never runs dry
                free.put_nowait(await self.stream())
            except OSError:
                free.put_nowait((reader, writer))  # dead: its next send fails at once

        while (taken := self._take()) is not None:
            await bucket.take()
            released = time.perf_counter()
            if released >= clock.end:
                break
            task = asyncio.create_task(one(*taken, released))
            flying.add(task)
            task.add_done_callback(flying.discard)
        if flying:
            await asyncio.gather(*flying)

    async def _send(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        seq: int,
        data: bytes,
        started: float,
        clock: _Clock,
    ) -> bool:
        """One exchange; False when the connection is lost (counted as an error)."""
        self.counts.sent += 1
        try:
            status, body = await exchange(reader, writer, data)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            self.counts.errors += 1
            return False
        done = time.perf_counter()
        self.counts.answers += 1
        counted = started >= clock.begin and done <= clock.end
        if counted:
            self.counts.latencies.append(done - started)
            self.counts.statuses[status] += 1
        self.maker.answered(seq, status, body, done - started, counted)
        return True


def _process_main(
    target: Target,
    shape: Shape,
    maker: Maker,
    index: int,
    processes: int,
    ready: Any,
    go: Any,
    out: Any,
) -> None:
    maker.setup(index, processes, shape.connections)
    runner = _Runner(target, shape, maker)

    async def main() -> dict[str, Any]:
        streams = await runner.connect()
        ready.put(index)
        await asyncio.to_thread(go.wait, START_TIMEOUT_S)
        counts = await runner.run(streams)
        return {**asdict(counts), "statuses": dict(counts.statuses), **maker.report()}

    out.put(asyncio.run(main()))


def generate(
    target: Target, shape: Shape, maker: Maker, pin_load: bool = False
) -> list[dict[str, Any]]:
    """Run ``maker``'s requests against ``target`` from separate processes (spawned; at
    most ``CONNECTIONS_PER_PROCESS`` connections each), started together once every
    one has connected; each process's report: ``Counts``'s fields and the maker's.
    ``pin_load``: the processes go to the load's cores (``pin``)."""
    spawn = mp.get_context("spawn")
    ready, out, go = spawn.Queue(), spawn.Queue(), spawn.Event()
    shares = shape.shares()
    procs = [
        spawn.Process(
            target=_process_main,
            args=(target, shape.of_process(n), maker, i, len(shares), ready, go, out),
            daemon=True,
        )
        for i, n in enumerate(shares)
    ]
    for proc in procs:
        proc.start()
        if pin_load:
            pin(proc.pid, server=False)
    try:
        for _ in procs:
            ready.get(timeout=START_TIMEOUT_S)
        go.set()
        wait = START_TIMEOUT_S + shape.warmup_s + min(shape.measure_s, RUN_GIVE_UP_S)
        return [out.get(timeout=wait) for _ in procs]
    finally:
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()


class ReviewMaker:
    """The AdmissionReviews of a ``Load``: a pod of its kind, a fresh name and uid each;
    answers classified (patched, admitted), admitted claim ids fed when ``load.feed``."""

    def __init__(self, load: Load) -> None:
        self.load = load
        self.index = 0
        self.limit: int | None = None
        self.body = b""
        self.feed: Feed | None = None
        self.found = {"patched": 0, "admitted": 0, "unfed": 0}

    def setup(self, index: int, processes: int, connections: int) -> None:
        self.index = index
        self.body = template(self.load.kind, self.load.owner)
        if self.load.per_connection is not None:
            self.limit = self.load.per_connection * connections
        self.feed = Feed(self.load.feed) if self.load.feed else None

    def request(self, seq: int) -> bytes | None:
        if self.limit is not None and seq >= self.limit:
            return None
        return request_bytes(self.body, f"bench-{self.index}-{seq}-{os.getpid()}")

    def answered(self, seq: int, status: int, body: bytes, latency: float, counted: bool) -> None:
        admitted = b"admitted under" in body
        if self.feed is not None and admitted:
            claim = admission_claim(body)
            if claim is None:
                self.found["unfed"] += 1
            else:
                self.feed.add(claim, time.perf_counter())
        if counted:
            self.found["patched"] += b'"patch"' in body
            self.found["admitted"] += admitted

    def finish(self) -> None:
        if self.feed is not None:
            self.feed.close()
            self.found["unfed"] += self.feed.lost

    def report(self) -> dict[str, Any]:
        return dict(self.found)


def run_load(target: Target, load: Load) -> Outcome:
    """Run ``load`` against ``target`` from separate processes on the load's cores;
    their merged outcome. A burst (``per_connection``) has no warm-up and lasts until
    every connection has sent its requests."""
    if load.per_connection is None:
        shape = Shape(load.connections, load.warmup_s, load.measure_s)
    else:
        shape = Shape(load.connections)
    outcome = Outcome()
    for found in generate(target, shape, ReviewMaker(load), pin_load=True):
        outcome.merge(found)
    return outcome


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
