"""The emulator's corked transport: the writes of one loop pass leave as one write, in
order; ``close`` sends what is gathered first, ``abort`` drops it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sandbox.kube.corked import CorkedTransport

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Recording:
    """A transport that records what reaches it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False
        self.events: list[str] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.events.append("close")
        self.closing = True

    def abort(self) -> None:
        self.events.append("abort")
        self.closing = True

    def get_extra_info(self, name: str) -> Any:
        return {"peername": ("127.0.0.1", 1)}.get(name)


async def next_pass() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_the_writes_of_one_pass_leave_together_in_order() -> None:
    real = Recording()
    corked = CorkedTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    corked.write(b"HTTP/1.1 200 OK\r\n\r\n")
    corked.write(memoryview(b"body"))
    assert real.writes == []
    await next_pass()
    assert real.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    corked.write(b"next")
    await next_pass()
    assert real.writes[1:] == [b"next"]


async def test_close_sends_what_is_gathered_first() -> None:
    real = Recording()
    corked = CorkedTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    corked.write(b"last answer")
    corked.close()
    assert real.writes == [b"last answer"]
    assert real.events == ["close"]
    await next_pass()
    assert real.writes == [b"last answer"]


async def test_abort_drops_it_and_a_closing_transport_gets_nothing() -> None:
    real = Recording()
    corked = CorkedTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    corked.write(b"never sent")
    corked.abort()
    await next_pass()
    assert real.writes == []
    corked.write(b"after the end")
    await next_pass()
    assert real.writes == []
    assert corked.is_closing()


async def test_other_attributes_are_the_transports() -> None:
    real = Recording()
    corked = CorkedTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    assert corked.get_extra_info("peername") == ("127.0.0.1", 1)
