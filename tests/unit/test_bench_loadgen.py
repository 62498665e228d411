"""The benchmarks' one load generator: closed and rate-limited open loops over keep-alive
connections, request makers, the split of a plan over load processes."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from bench import createload, loadgen
from bench.createload import PlanMaker, Planned
from bench.loadgen import Shape, Target
from shared import vocab


class Server:
    """A plain HTTP/1.1 server on its own loop and thread: answers every request with
    201 and the request's body, admitting (``BOOKING_REFERENCE`` in the answer) the
    pods named in ``admit``; records each request's body and the most requests it
    had in flight at once."""

    def __init__(self, admit: frozenset[str] = frozenset(), delay_s: float = 0.0) -> None:
        self.admit, self.delay_s = admit, delay_s
        self.bodies: list[dict[str, Any]] = []
        self.flying = self.most = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self.serve, "127.0.0.1", 0), self.loop
        ).result(5)
        self.port = self.server.sockets[0].getsockname()[1]

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = json.loads(await reader.readexactly(length))
                self.flying += 1
                self.most = max(self.most, self.flying)
                await asyncio.sleep(self.delay_s)
                self.flying -= 1
                self.bodies.append(body)
                if body["metadata"].get("name") in self.admit:
                    body["metadata"]["annotations"] = {vocab.BOOKING_REFERENCE: "res-1"}
                data = json.dumps(body).encode()
                writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n" % len(data))
                writer.write(data)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def _shutdown(self) -> None:
        self.server.close()
        for writer in self.writers:
            writer.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def server() -> Iterator[Server]:
    found = Server(admit=frozenset({"t-0", "t-2"}), delay_s=0.002)
    try:
        yield found
    finally:
        found.close()


def plan(count: int) -> list[Planned]:
    return [Planned(f"o{i % 3}", "h100", 1, named=True) for i in range(count)]


def in_process(server: Server, shape: Shape, maker: PlanMaker) -> dict[str, Any]:
    """One load process's run, in this process (the maker set up as process 0 of 1)."""
    maker.setup(0, 1, shape.connections)
    runner = loadgen._Runner(Target("127.0.0.1", server.port), shape, maker)

    async def main() -> dict[str, Any]:
        counts = await runner.run(await runner.connect())
        return {**vars(counts), **maker.report()}

    return asyncio.run(main())


TOKENS = {f"o{i}": f"token-{i}" for i in range(3)}


@pytest.mark.parametrize("connections", [1, 4])
def test_a_closed_loop_sends_each_request_once_never_more_than_c_at_once(
    server: Server, connections: int
) -> None:
    found = in_process(
        server, Shape(connections, tls=False), PlanMaker(plan(12), TOKENS, "t", None)
    )
    assert sorted(b["metadata"]["name"] for b in server.bodies) == sorted(
        f"t-{i}" for i in range(12)
    )
    assert server.most <= connections
    assert found["answers"] == found["sent"] == len(found["replies"]) == 12
    assert sorted(a["item"] for a in found["replies"]) == list(range(12))


def test_the_answers_say_which_pods_came_back_admitted(server: Server) -> None:
    found = in_process(server, Shape(2, tls=False), PlanMaker(plan(4), TOKENS, "t", None))
    admitted = sorted(a["item"] for a in found["replies"] if a["admitted"])
    assert admitted == [0, 2]
    assert all(a["status"] == 201 and a["counted"] for a in found["replies"])


def test_an_open_loop_sends_on_its_pool_and_every_release_is_answered(server: Server) -> None:
    shape = Shape(2, rate=1e6, burst=10, tls=False)
    found = in_process(server, shape, PlanMaker(plan(10), TOKENS, "t", "gate"))
    assert found["answers"] == 10
    assert server.most <= 2  # ten released at once, two connections
    assert all(b["spec"]["schedulingGates"] == [{"name": "gate"}] for b in server.bodies)


def test_a_process_gets_its_part_of_the_rate_and_the_burst() -> None:
    shape = Shape(50, rate=200.0, burst=30)
    assert shape.shares() == [25, 25]
    part = shape.of_process(25)
    assert (part.connections, part.rate, part.burst) == (25, 100.0, 15)
    closed = Shape(60)
    assert closed.shares() == [20, 20, 20]
    assert closed.of_process(20).rate is None


def test_a_plan_is_split_over_processes_without_overlap() -> None:
    makers = [PlanMaker(plan(7), TOKENS, "t", None) for _ in range(3)]
    for index, maker in enumerate(makers):
        maker.setup(index, 3, 1)
    items = [m.items for m in makers]
    assert items == [[0, 3, 6], [1, 4], [2, 5]]
    assert makers[1].request(2) is None


def test_a_plan_created_from_two_processes_reaches_the_server_once_each(server: Server) -> None:
    maker = PlanMaker(plan(40), TOKENS, "t", None)
    outcome = createload.run_plan(server.port, maker, Shape(30, tls=False))
    assert sorted(a.item for a in outcome.answers) == list(range(40))
    assert len(server.bodies) == 40
    assert sorted(a.item for a in outcome.answers if a.admitted) == [0, 2]


def test_a_create_request_carries_the_owners_token_and_namespace() -> None:
    maker = PlanMaker([Planned("o1", "a100", 2, named=False)], TOKENS, "t", None)
    maker.setup(0, 1, 1)
    data = maker.request(0)
    assert data is not None
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /api/v1/namespaces/o1/pods HTTP/1.1\r\n")
    assert b"Authorization: Bearer token-1" in head
    pod = json.loads(body)
    assert pod["metadata"]["generateName"] == "bench-"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {vocab.GPU_RESOURCE: "2"}


def test_the_create_maker_turns_owners_and_alternates_names() -> None:
    load = createload.CreateLoad(1, TOKENS, "a100", 1, 0.0, 1.0, "x")
    maker = createload.CreateMaker(load)
    maker.setup(0, 1, 1)
    sent = [maker.request(i) for i in range(4)]
    owners = [d.split(b"/")[4] for d in sent if d is not None]
    assert owners == [b"o0", b"o1", b"o2", b"o0"]
    named = [b'"name": "bx-0-' in d for d in sent if d is not None]
    assert named == [True, False, True, False]


class Tokens:
    """A rate limiter the test opens by hand: ``grant`` tokens, then ``take`` waits."""

    def __init__(self) -> None:
        self.left = 0
        self.more = asyncio.Event()

    def grant(self, count: int) -> None:
        self.left += count
        self.more.set()

    async def take(self) -> None:
        while self.left == 0:
            self.more.clear()
            await self.more.wait()
        self.left -= 1


def test_an_open_loop_releases_a_request_only_with_a_token(server: Server) -> None:
    shape = Shape(4, rate=1.0, tls=False)
    maker = PlanMaker(plan(6), TOKENS, "t", None)
    maker.setup(0, 1, shape.connections)
    tokens = Tokens()
    runner = loadgen._Runner(Target("127.0.0.1", server.port), shape, maker, tokens)

    async def main() -> tuple[int, int]:
        task = asyncio.create_task(runner.run(await runner.connect()))
        tokens.grant(2)
        for _ in range(20):  # the two released ones come back; nothing more is sent
            await asyncio.sleep(0.01)
        first = runner.counts.sent
        tokens.grant(4)
        await task
        return first, runner.counts.answers

    assert asyncio.run(main()) == (2, 6)
    assert [b["metadata"]["name"] for b in server.bodies] == [f"t-{i}" for i in range(6)]
