"""The pod-creation load: separate processes creating pods through an API server.

Each load process opens its share of ``c`` keep-alive HTTPS connections to the API
server (TLS handshakes done before the clock starts), waits for the common start signal
and sends, per connection, one ``POST /api/v1/namespaces/<owner>/pods`` at a time —
closed-loop concurrency ``c`` — as the owner (their bearer token, the ``edit`` role in
their namespace), as kubectl would. Requests alternate per connection between a pod
with a name of its own and a pod with ``generateName`` (a controller's), and rotate
over the owners, so every owner gets its share. The pod: a 1-GPU pod of the booking's
class, ``restartPolicy: Never``.

Counted: requests *started* after the warm-up and *answered* before the end of the
measured interval; their latency (send → whole answer read), their HTTP status, and
whether the created pod came back admitted (it carries ``vocab.BOOKING_REFERENCE``).
"""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing as mp
import ssl
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.loadgen import exchange
from shared import vocab

#: Connections per load process.
CONNECTIONS_PER_PROCESS = 25
#: Seconds a load process may take to start and connect before the run gives up.
START_TIMEOUT_S = 30.0
ADMITTED_MARK = json.dumps(vocab.BOOKING_REFERENCE).encode()


@dataclass(frozen=True)
class CreateLoad:
    """Where and what: the API server's HTTPS port, the owners and their tokens, the
    pod's class, ``c`` connections, the intervals, and a tag making names unique."""

    port: int
    tokens: dict[str, str]
    gpu_class: str
    connections: int
    warmup_s: float
    measure_s: float
    tag: str


@dataclass
class CreateOutcome:
    """What the load processes saw, merged."""

    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    admitted: int = 0
    errors: int = 0

    def merge(self, other: dict[str, Any]) -> None:
        self.latencies += other["latencies"]
        self.statuses.update({int(k): v for k, v in other["statuses"].items()})
        self.admitted += other["admitted"]
        self.errors += other["errors"]


def pod_body(gpu_class: str, name: str | None) -> bytes:
    """A 1-GPU pod of ``gpu_class``: named ``name``, or ``generateName`` when None."""
    naming = {"name": name} if name else {"generateName": "bench-"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**naming, "labels": {vocab.GPU_CLASS_LABEL: gpu_class}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.local/train:1",
                    "resources": {"limits": {vocab.GPU_RESOURCE: "1"}},
                }
            ],
            "restartPolicy": "Never",
        },
    }
    return json.dumps(pod).encode()


def request_bytes(owner: str, token: str, body: bytes) -> bytes:
    head = (
        f"POST /api/v1/namespaces/{owner}/pods HTTP/1.1\r\nHost: kubernetes\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


class _Process:
    """One load process: its connections, the shared start signal, its counts."""

    def __init__(self, load: CreateLoad, index: int, connections: int) -> None:
        self.load, self.index, self.connections = load, index, connections
        self.owners = sorted(load.tokens)
        self.found: dict[str, Any] = {
            "latencies": [],
            "statuses": Counter(),
            "admitted": 0,
            "errors": 0,
        }

    async def run(self, ready: Any, go: Any) -> dict[str, Any]:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the server's identity is not what we measure
        streams = [
            await asyncio.open_connection("127.0.0.1", self.load.port, ssl=context)
            for _ in range(self.connections)
        ]
        ready.put(self.index)
        await asyncio.to_thread(go.wait, START_TIMEOUT_S)
        begin = time.perf_counter() + self.load.warmup_s
        end = begin + self.load.measure_s
        await asyncio.gather(
            *(self._connection(i, r, w, begin, end) for i, (r, w) in enumerate(streams))
        )
        for _, writer in streams:
            writer.close()
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
        slot = self.index * CONNECTIONS_PER_PROCESS + conn
        while time.perf_counter() < end:
            owner = self.owners[(slot + sent) % len(self.owners)]
            name = None if sent % 2 else f"b{self.load.tag}-{self.index}-{conn}-{sent}"
            data = request_bytes(
                owner, self.load.tokens[owner], pod_body(self.load.gpu_class, name)
            )
            started = time.perf_counter()
            try:
                status, body = await exchange(reader, writer, data)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                self.found["errors"] += 1
                return
            done = time.perf_counter()
            sent += 1
            if started >= begin and done <= end:
                self.found["latencies"].append(done - started)
                self.found["statuses"][status] += 1
                self.found["admitted"] += status == 201 and ADMITTED_MARK in body


def _main(load: CreateLoad, index: int, connections: int, ready: Any, go: Any, out: Any) -> None:
    found = asyncio.run(_Process(load, index, connections).run(ready, go))
    found["statuses"] = dict(found["statuses"])
    out.put(found)


def run_creates(load: CreateLoad) -> CreateOutcome:
    """Run ``load`` from separate processes (spawned); their merged outcome."""
    spawn = mp.get_context("spawn")
    ready, out, go = spawn.Queue(), spawn.Queue(), spawn.Event()
    count = max(1, math.ceil(load.connections / CONNECTIONS_PER_PROCESS))
    base, extra = divmod(load.connections, count)
    procs = [
        spawn.Process(target=_main, args=(load, i, base + (i < extra), ready, go, out), daemon=True)
        for i in range(count)
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            ready.get(timeout=START_TIMEOUT_S)
        go.set()
        outcome = CreateOutcome()
        for _ in procs:
            outcome.merge(out.get(timeout=START_TIMEOUT_S + load.warmup_s + load.measure_s))
        return outcome
    finally:
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
