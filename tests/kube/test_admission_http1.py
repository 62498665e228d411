"""The emulated API server's webhook client keeps idle connections as client-go does.

kube-apiserver's webhook client sets no idle limit: a kept-alive connection is reused
however long it was idle, until the server closes it. One the server closed is not
reused.
"""

from __future__ import annotations

import asyncio

from sandbox.kube.admission.http1 import Pool, serialize
from tests.kube.scripted import OK, Scripted


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def post() -> bytes:
    return serialize("POST", "/mutate", "webhook", {}, b"{}")


def test_an_idle_connection_is_reused_after_an_hour_and_a_closed_one_is_not() -> None:
    async def scenario() -> Scripted:
        async with Scripted([OK, OK]) as server:  # closes the connection after two
            clock = Clock()
            pool = Pool("127.0.0.1", server.port, None, monotonic=clock)
            try:
                assert (await pool.request(post(), idempotent=False)).status == 200
                clock.now += 3600.0  # an hour idle: client-go would still reuse it
                assert (await pool.request(post(), idempotent=False)).status == 200
                assert server.connections == 1
                await server.ended.wait()  # the server closed it, idle
                await asyncio.sleep(0.1)  # and the pool has read that close (loopback)
                server.script.append(OK)
                assert (await pool.request(post(), idempotent=False)).status == 200
            finally:
                await pool.aclose()
        return server

    assert asyncio.run(scenario()).connections == 2
