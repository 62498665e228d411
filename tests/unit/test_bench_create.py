"""The pod-creation benchmark's own parts: the answer reader of its load processes and
how a cell's figures are drawn from what they saw."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from bench import bench_create, createload, loadgen
from sandbox.kube.admission.dispatcher import DispatchTimes
from shared import vocab

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Sink:
    def __init__(self) -> None:
        self.sent = b""

    def write(self, data: bytes) -> None:
        self.sent += data


async def read(answer: bytes) -> tuple[int, bytes, bytes]:
    reader = asyncio.StreamReader()
    reader.feed_data(answer + b"NEXT")
    sink = _Sink()
    status, body = await loadgen.exchange(reader, sink, b"request")  # type: ignore[arg-type]
    return status, body, await reader.read(4)


async def test_an_answer_with_a_length_is_read_to_its_end() -> None:
    answer = b'HTTP/1.1 201 Created\r\nContent-Length: 5\r\nWarning: 299 - "x"\r\n\r\nhello'
    assert await read(answer) == (201, b"hello", b"NEXT")


async def test_a_chunked_answer_is_read_to_its_last_chunk() -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n"
    )
    assert await read(answer) == (200, b"hello", b"NEXT")


def test_named_and_generated_pods_ask_for_one_gpu_of_the_class() -> None:
    named = json.loads(createload.pod_body("a100", "p-1"))
    generated = json.loads(createload.pod_body("a100", None))
    assert named["metadata"]["name"] == "p-1"
    assert "name" not in generated["metadata"]
    assert generated["metadata"]["generateName"] == "bench-"
    for pod in (named, generated):
        assert pod["metadata"]["labels"] == {vocab.GPU_CLASS_LABEL: "a100"}
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {vocab.GPU_RESOURCE: "1"}


def test_a_cells_figures_pool_its_rounds() -> None:
    first = createload.CreateOutcome([0.001, 0.002, 0.003], Counter({201: 3}), admitted=3)
    second = createload.CreateOutcome([0.004], Counter({201: 1, 500: 1}), admitted=0)
    spent = [DispatchTimes(4, 0.08, 4, 0.04)]
    found = bench_create.figures([first, second], spent)
    assert found["n"] == 4
    assert found["p50_ms"] == pytest.approx(2.0)
    assert found["p99_ms"] == pytest.approx(4.0)
    assert found["round_p50_ms"] == [pytest.approx(2.0), pytest.approx(4.0)]
    assert found["admitted_share"] == pytest.approx(0.75)
    assert found["statuses"] == {201: 4, 500: 1}
    assert (found["matching_ms"], found["calls_ms"]) == (pytest.approx(20.0), pytest.approx(10.0))


def test_a_cell_without_answers_says_so() -> None:
    found = bench_create.figures([createload.CreateOutcome()], [])
    assert bench_create.ms(found["p50_ms"]) == "none in time"
