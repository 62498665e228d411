"""The process kubelet's ``httpGet`` probe, as the kubelet's prober sends it: a connection
of its own, ``Connection: close``, the ``kube-probe`` User-Agent, HTTPS unverified; a
status in [200, 400) passes; every failure is a result with the kubelet's wording."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pytest
import trustme

from sandbox.cluster.probes import PROBE_USER_AGENT, Probe, check
from tests.kube.scripted import OK, Scripted, answer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def probe(port: int, **get: Any) -> Probe:
    return Probe.of({"httpGet": {"path": "/healthz", "port": port, **get}, "timeoutSeconds": 1})


async def run(p: Probe) -> tuple[bool, str]:
    return await check(p, {"name": "c"}, "127.0.0.1", {}, "/")


async def test_a_probe_is_sent_as_the_kubelet_sends_it() -> None:
    headers = [{"name": "X-Probe", "value": "ready"}, {"name": "host", "value": "svc.local"}]
    async with Scripted([OK, OK]) as server:
        assert await run(probe(server.port, httpHeaders=headers)) == (True, "")
        mine = [{"name": "user-agent", "value": "mine/1"}, {"name": "Connection", "value": "x"}]
        assert await run(probe(server.port, path="plain", httpHeaders=mine)) == (True, "")
    method, target, sent, _ = server.requests[0]
    assert (method, target) == ("GET", "/healthz")
    assert sent["user-agent"] == PROBE_USER_AGENT
    assert (sent["connection"], sent["accept"]) == ("close", "*/*")
    assert (sent["x-probe"], sent["host"]) == ("ready", "svc.local")
    assert server.requests[1][1] == "/plain"  # a path without its slash gets one
    again = server.requests[1][2]
    assert (again["user-agent"], again["connection"]) == ("mine/1", "close")  # close stays
    for lines in server.header_lines:  # a header the probe names replaces the default
        names = [line.split(":", 1)[0].lower() for line in lines]
        assert len(names) == len(set(names)), lines
    assert server.connections == 2  # a connection per probe, none kept


async def test_a_redirect_passes_and_an_error_status_fails_with_its_code() -> None:
    async with Scripted(
        [answer(b"{}", "302 Found"), answer(b"{}", "503 Service Unavailable")]
    ) as server:
        assert await run(probe(server.port)) == (True, "")
        assert await run(probe(server.port)) == (
            False,
            "HTTP probe failed with statuscode: 503",
        )


async def test_the_status_line_decides_whatever_frames_the_body() -> None:
    """An HTTP/1.0 server (Python's ``http.server``) ends its body by closing; a
    malformed answer fails with what it was."""
    script: list[bytes | None] = [
        b"HTTP/1.0 200 OK\r\nServer: BaseHTTP\r\n\r\nready",
        b"garbage\r\n",
        b"HTTP/1.1 200 " + b"x" * 70_000,
    ]
    async with Scripted(script[:1]) as old, Scripted(script[1:2]) as bad:
        assert await run(probe(old.port)) == (True, "")
        ok, why = await run(probe(bad.port))
        async with Scripted(script[2:]) as endless:
            url = f"http://127.0.0.1:{endless.port}/healthz"
            assert await run(probe(endless.port)) == (
                False,
                f'Get "{url}": malformed HTTP response: no status line',
            )
    assert (ok, why) == (
        False,
        f"Get \"http://127.0.0.1:{bad.port}/healthz\": malformed HTTP response b'garbage\\r\\n'",
    )


async def test_an_unreachable_silent_or_closing_server_fails_with_the_url() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # read nothing, answer nothing

    listener = await asyncio.start_server(hold, "127.0.0.1", 0)
    silent = listener.sockets[0].getsockname()[1]
    async with Scripted([None]) as closing:  # reads the request, closes without an answer
        url = f"http://127.0.0.1:{closing.port}/healthz"
        assert await run(probe(closing.port)) == (False, f'Get "{url}": EOF')
    ok, why = await check(
        Probe.of({"httpGet": {"port": silent}, "timeoutSeconds": 1}),
        {},
        "127.0.0.1",
        {},
        "/",
    )
    assert (ok, why) == (
        False,
        f'Get "http://127.0.0.1:{silent}/": context deadline exceeded (Client.Timeout exceeded)',
    )
    for writer in accepted:
        writer.close()
    listener.close()
    await listener.wait_closed()
    ok, why = await run(probe(closing.port))  # the scripted server is gone: refused
    assert not ok
    assert why.startswith(f'Get "{url}": dial tcp 127.0.0.1:{closing.port}: ')


async def test_https_is_not_verified_and_other_schemes_fail() -> None:
    ca = trustme.CA()
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("elsewhere.example").configure_cert(tls)
    async with Scripted([OK], tls=tls) as server:
        assert await run(probe(server.port, scheme="HTTPS")) == (True, "")
    ok, why = await run(probe(server.port, scheme="FTP"))
    assert (ok, why) == (
        False,
        f'Get "ftp://127.0.0.1:{server.port}/healthz": unsupported protocol scheme "ftp"',
    )
