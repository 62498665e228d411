"""The pod-creation load: separate processes creating pods through an API server.

Requests are ``POST /api/v1/namespaces/<owner>/pods`` over keep-alive HTTPS, each as
the pod's owner (their bearer token, the ``edit`` role in their namespace), as kubectl
or a controller would; the processes, connections and arrivals are the generator's
(``bench.loadgen.generate``). Two request makers:

- ``CreateMaker`` (``run_creates``, ``bench create``): closed loop at ``c``
  connections for an interval; requests alternate between a pod with a name of its
  own and one with ``generateName``, and rotate over the owners, so every owner gets
  its share. The pod: a 1-GPU pod of the booking's class, ``restartPolicy: Never``.
- ``PlanMaker`` (``run_plan``, ``bench webhook``): a fixed list of pods (``Planned``:
  owner, class, GPUs, named or not), closed loop or rate-limited open loop, each
  answer recorded with its pod's place in the list.

Counted: requests sent after the warm-up and answered before the end of the measured
interval; their latency, their HTTP status, and whether the created pod came back
admitted (it carries ``vocab.BOOKING_REFERENCE``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.loadgen import Shape, Target, generate
from shared import vocab

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


def pod_body(gpu_class: str, name: str | None, gpus: int = 1, gate: str | None = None) -> bytes:
    """A pod of ``gpu_class`` asking ``gpus`` GPUs (none: a CPU pod without the class
    label): named ``name``, or ``generateName`` when None; held by scheduling gate
    ``gate`` when given."""
    naming = {"name": name} if name else {"generateName": "bench-"}
    labels = {vocab.GPU_CLASS_LABEL: gpu_class} if gpus else {}
    limits = {vocab.GPU_RESOURCE: str(gpus)} if gpus else {}
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "registry.local/train:1", "resources": {"limits": limits}}
        ],
        "restartPolicy": "Never",
    }
    if gate:
        spec["schedulingGates"] = [{"name": gate}]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**naming, "labels": labels},
        "spec": spec,
    }
    return json.dumps(pod).encode()


def request_bytes(owner: str, token: str, body: bytes) -> bytes:
    head = (
        f"POST /api/v1/namespaces/{owner}/pods HTTP/1.1\r\nHost: kubernetes\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


def admitted(status: int, body: bytes) -> bool:
    """The create succeeded and the pod it answers carries a booking reference."""
    return status == 201 and ADMITTED_MARK in body


class CreateMaker:
    """``CreateLoad``'s requests: owners in turn, named and ``generateName`` alternating."""

    def __init__(self, load: CreateLoad) -> None:
        self.load = load
        self.owners = sorted(load.tokens)
        self.index = 0
        self.found = {"admitted": 0}

    def setup(self, index: int, processes: int, connections: int) -> None:
        self.index = index

    def request(self, seq: int) -> bytes | None:
        owner = self.owners[(self.index + seq) % len(self.owners)]
        name = None if seq % 2 else f"b{self.load.tag}-{self.index}-{seq}"
        body = pod_body(self.load.gpu_class, name)
        return request_bytes(owner, self.load.tokens[owner], body)

    def answered(self, seq: int, status: int, body: bytes, latency: float, counted: bool) -> None:
        if counted:
            self.found["admitted"] += admitted(status, body)

    def finish(self) -> None:
        pass

    def report(self) -> dict[str, Any]:
        return dict(self.found)


def run_creates(load: CreateLoad) -> CreateOutcome:
    """Run ``load`` from separate processes (spawned), closed loop; their merged outcome."""
    shape = Shape(load.connections, load.warmup_s, load.measure_s)
    outcome = CreateOutcome()
    for found in generate(Target("127.0.0.1", load.port), shape, CreateMaker(load)):
        outcome.merge(found)
    return outcome


# --- a planned list of pods ------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    """One pod of a plan: its owner (namespace), class, GPUs (0: a CPU pod), and whether
    it has a name of its own (else ``generateName``, as a controller's pods)."""

    owner: str
    gpu_class: str
    gpus: int
    named: bool


@dataclass(frozen=True)
class Answer:
    """What a planned pod's create got: its place in the plan, latency (s), HTTP status,
    admitted at creation, counted (inside the measured interval)."""

    item: int
    latency: float
    status: int
    admitted: bool
    counted: bool


class PlanMaker:
    """The creates of a plan: process ``i`` of ``n`` sends items ``i``, ``i + n``, …;
    every pod carries scheduling gate ``gate`` when given; named pods are called
    ``<tag>-<item>``."""

    def __init__(
        self, plan: Sequence[Planned], tokens: dict[str, str], tag: str, gate: str | None
    ) -> None:
        self.plan, self.tokens, self.tag, self.gate = list(plan), tokens, tag, gate
        self.items: list[int] = []
        self.answers: list[Answer] = []

    def setup(self, index: int, processes: int, connections: int) -> None:
        self.items = list(range(index, len(self.plan), processes))

    def request(self, seq: int) -> bytes | None:
        if seq >= len(self.items):
            return None
        item = self.items[seq]
        pod = self.plan[item]
        name = f"{self.tag}-{item}" if pod.named else None
        body = pod_body(pod.gpu_class, name, pod.gpus, self.gate)
        return request_bytes(pod.owner, self.tokens[pod.owner], body)

    def answered(self, seq: int, status: int, body: bytes, latency: float, counted: bool) -> None:
        item = self.items[seq]
        self.answers.append(Answer(item, latency, status, admitted(status, body), counted))

    def finish(self) -> None:
        pass

    def report(self) -> dict[str, Any]:
        return {"replies": [vars(a) for a in self.answers]}


@dataclass
class PlanOutcome:
    """A plan's answers (in the order they came) and the generator's counts, merged."""

    answers: list[Answer] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    sent: int = 0

    def merge(self, other: dict[str, Any]) -> None:
        self.answers += [Answer(**a) for a in other["replies"]]
        self.errors += other["errors"]
        self.seconds = max(self.seconds, other["seconds"])
        self.cpu_s += other["cpu_s"]
        self.sent += other["sent"]


def run_plan(port: int, maker: PlanMaker, shape: Shape) -> PlanOutcome:
    """Create ``maker``'s pods through the API server at ``port`` as ``shape`` says."""
    outcome = PlanOutcome()
    for found in generate(Target("127.0.0.1", port), shape, maker):
        outcome.merge(found)
    return outcome
