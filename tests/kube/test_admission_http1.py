"""The emulated API server's webhook client keeps idle connections as client-go does.

kube-apiserver's webhook client sets no idle limit: a kept-alive connection is reused
however long it was idle, until the server closes it. One the server closed is not
reused.
"""

from __future__ import annotations

import asyncio

from sandbox.kube.admission.http1 import Pool, serialize


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Server:
    """Answers every request ``200 ok`` on a kept-alive connection; counts connections."""

    def __init__(self) -> None:
        self.connections = 0
        self.writers: list[asyncio.StreamWriter] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def post() -> bytes:
    return serialize("POST", "/mutate", "webhook", {}, b"{}")


def test_an_idle_connection_is_reused_after_an_hour_and_a_closed_one_is_not() -> None:
    async def scenario() -> Server:
        served = Server()
        listener = await asyncio.start_server(served.serve, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        clock = Clock()
        pool = Pool("127.0.0.1", port, None, monotonic=clock)
        try:
            assert (await pool.request(post(), idempotent=False)).status == 200
            clock.now += 3600.0  # an hour idle: client-go would still reuse it
            assert (await pool.request(post(), idempotent=False)).status == 200
            assert served.connections == 1
            served.writers[0].close()  # the server closes it while idle
            await asyncio.sleep(0.1)
            assert (await pool.request(post(), idempotent=False)).status == 200
        finally:
            await pool.aclose()
            listener.close()
            await listener.wait_closed()
        return served

    assert asyncio.run(scenario()).connections == 2
