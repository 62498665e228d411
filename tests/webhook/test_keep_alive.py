"""The webhook's server keeps an idle connection open as long as the API server may.

kube-apiserver's webhook client (client-go's TLS transport) sets no idle limit: it keeps
a connection until the server closes it, and reuses it whenever a review comes. A
review written on a connection the server is closing fails (Go resends a POST only
when nothing of it was written), and ``failurePolicy: Ignore`` lets the pod in
unadmitted. uvicorn's default keep-alive is 5 s, so every quiet spell of 5 s armed that
race; this test idles past it.
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.types import Receive, Scope, Send

from sandbox.ports import free_port
from webhook.__main__ import server

#: Longer than uvicorn's default keep-alive (5 s).
IDLE_S = 6.0


async def ok(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"GET / HTTP/1.1\r\nHost: webhook\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
    await asyncio.wait_for(reader.readexactly(2), 5.0)
    return head.split(b"\r\n", 1)[0]


def test_a_connection_idle_past_uvicorns_default_still_answers() -> None:
    async def scenario() -> None:
        port = free_port()
        srv = server(ok, "127.0.0.1", port, None)
        serving = asyncio.ensure_future(srv.serve())
        try:
            while not srv.started:  # noqa: ASYNC110 - uvicorn sets a flag, no event
                await asyncio.sleep(0.01)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert await exchange(reader, writer) == b"HTTP/1.1 200 OK"
            await asyncio.sleep(IDLE_S)
            assert await exchange(reader, writer) == b"HTTP/1.1 200 OK"
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        finally:
            srv.should_exit = True
            await serving

    asyncio.run(scenario())
