"""``shared.gateway.loop.LoopGateway``: the gateway's calls on the caller's event loop.

Against the emulator over real TLS (its kubeconfig: CA, bearer token): the verbs, every
error class, throttling, token rotation, a CA mismatch, concurrent calls on the pool.
Against small scripted servers on loopback: malformed and truncated answers, a
kept-alive connection the server closes, a server that never answers, a client
certificate the server requires.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import trustme
import uvloop

from shared import errors
from shared.gateway import AUTH_REUSE_S, THROTTLE_RETRIES, Configuration, load_configuration
from shared.gateway import loop as loop_module
from shared.gateway.loop import LoopGateway
from shared.resources import CONFIGMAPS, PODS
from tests.kube.conftest import Running, pod
from tests.kube.scripted import OK, Scripted, answer
from tests.kube.test_gateway import Naps, _throttle


def _tls_gateway(kube: Running, tmp_path: Path, **kwargs: Any) -> LoopGateway:
    """A loop gateway from the emulator's kubeconfig: HTTPS, its CA, the admin token."""
    path = tmp_path / "kubeconfig"
    path.write_text(kube.server.kubeconfig())
    return LoopGateway(load_configuration(str(path)), **kwargs)


def _run(kube: Running, tmp_path: Path, body: Callable[[LoopGateway], Awaitable[None]]) -> None:
    async def scenario() -> None:
        gw = _tls_gateway(kube, tmp_path)
        try:
            await body(gw)
        finally:
            await gw.aclose()

    asyncio.run(scenario())


def test_verbs_and_error_mapping_over_tls(kube: Running, ns: str, tmp_path: Path) -> None:
    """get/list_all/create/replace/patch/delete and NotFound/Conflict/Invalid, as the
    thread-pool gateway maps them."""

    async def body(gw: LoopGateway) -> None:
        created = (
            await gw.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"a": "1"}}, ns)
        ).body
        await gw.create(CONFIGMAPS, {"metadata": {"name": "d"}}, ns)
        assert len((await gw.list_all(CONFIGMAPS, ns)).items) == 2
        fetched = await gw.get(CONFIGMAPS, "c", ns)
        fetched["data"]["a"] = "2"
        await gw.replace(CONFIGMAPS, "c", fetched, ns)
        with pytest.raises(errors.Conflict):
            await gw.replace(CONFIGMAPS, "c", created, ns)
        patched = await gw.patch(
            CONFIGMAPS, "c", [{"op": "add", "path": "/data/b", "value": "3"}], ns
        )
        assert patched["data"] == {"a": "2", "b": "3"}
        with pytest.raises(errors.Invalid):
            await gw.patch(CONFIGMAPS, "c", [{"op": "test", "path": "/data/a", "value": "9"}], ns)
        await gw.create(PODS, pod(), ns)
        with pytest.raises(errors.Invalid):
            await gw.patch(
                PODS,
                "p",
                {"spec": {"schedulingGates": [{"name": "example.com/g"}]}},
                ns,
                "strategic",
            )
        await gw.delete(CONFIGMAPS, "c", ns)
        with pytest.raises(errors.NotFound):
            await gw.get(CONFIGMAPS, "c", ns)

    _run(kube, tmp_path, body)


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, errors.BadRequest),
        (401, errors.Unauthorized),
        (403, errors.Forbidden),
        (404, errors.NotFound),
        (409, errors.Conflict),
        (410, errors.Gone),
        (422, errors.Invalid),
        (500, errors.ServerError),
        (503, errors.ServerError),
    ],
)
def test_every_status_maps_to_its_error_class_with_the_status_message(
    kube: Running, ns: str, tmp_path: Path, status: int, error: type[errors.KubeError]
) -> None:
    status_body = {"kind": "Status", "code": status, "reason": "Injected", "message": "said so"}
    kube.server.faults.add(
        method="GET", path=f"/api/v1/namespaces/{ns}/configmaps/x", status=status, body=status_body
    )

    async def body(gw: LoopGateway) -> None:
        with pytest.raises(error) as caught:
            await gw.get(CONFIGMAPS, "x", ns)
        assert (caught.value.code, caught.value.reason, caught.value.message) == (
            status,
            "Injected",
            "said so",
        )

    _run(kube, tmp_path, body)


def test_a_throttled_call_is_sent_again_and_lasting_throttling_gives_up(
    kube: Running, ns: str, tmp_path: Path
) -> None:
    """The gateway's throttling rule holds on the loop too (its ``request`` is shared)."""
    naps = Naps()

    async def scenario() -> None:
        gw = _tls_gateway(kube, tmp_path, sleep=naps)
        try:
            await gw.create(CONFIGMAPS, {"metadata": {"name": "c"}}, ns)
            fault = _throttle(kube, f"/api/v1/namespaces/{ns}/configmaps/c", "1", 2)
            assert (await gw.get(CONFIGMAPS, "c", ns))["metadata"]["name"] == "c"
            assert (fault.fired, naps.waits) == (2, [1.0, 1.0])
            fault = _throttle(kube, f"/api/v1/namespaces/{ns}/configmaps/c", "2", None)
            with pytest.raises(errors.TooManyRequests) as caught:
                await gw.get(CONFIGMAPS, "c", ns)
            assert caught.value.retry_after_s == 2.0
            assert fault.fired == THROTTLE_RETRIES + 1
        finally:
            await gw.aclose()

    asyncio.run(scenario())


def test_a_rotated_token_is_used_within_the_reuse_interval(
    kube: Running, ns: str, tmp_path: Path
) -> None:
    """Authentication comes from the gateway's ``root_and_auth``: a token changed in the
    configuration is sent from the first call ``AUTH_REUSE_S`` later, not before."""
    now = [100.0]
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(kube.server.ca_pem)
    cfg = _plain(0, ssl_ca_cert=str(ca_file), host=kube.server.secure_url)
    cfg.api_key = {"authorization": f"Bearer {kube.server.admin_token}"}

    async def scenario() -> None:
        gw = LoopGateway(cfg, monotonic=lambda: now[0])
        try:
            await gw.create(CONFIGMAPS, {"metadata": {"name": "c"}}, ns)
            gw._api.configuration.api_key = {"authorization": "Bearer not-a-token"}
            now[0] += AUTH_REUSE_S - 0.01
            assert (await gw.get(CONFIGMAPS, "c", ns))["metadata"]["name"] == "c"
            now[0] += 0.01
            with pytest.raises(errors.Unauthorized):
                await gw.get(CONFIGMAPS, "c", ns)
        finally:
            await gw.aclose()

    asyncio.run(scenario())


def test_a_server_with_a_certificate_from_another_ca_is_refused(
    kube: Running, ns: str, tmp_path: Path
) -> None:
    cfg = load_configuration(str(_kubeconfig(kube, tmp_path)))
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    cfg.ssl_ca_cert = str(other)

    async def scenario() -> None:
        gw = LoopGateway(cfg)
        try:
            with pytest.raises(errors.ServerError) as caught:
                await gw.get(CONFIGMAPS, "c", ns)
            assert caught.value.code == 0
            assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message
        finally:
            await gw.aclose()

    asyncio.run(scenario())


def test_concurrent_calls_share_a_bounded_pool(kube: Running, ns: str, tmp_path: Path) -> None:
    """40 concurrent GETs on 3 connections: every one answered, at most 3 kept."""

    async def scenario() -> None:
        gw = _tls_gateway(kube, tmp_path, connections=3)
        try:
            await gw.create(CONFIGMAPS, {"metadata": {"name": "c"}}, ns)
            got = await asyncio.gather(*(gw.get(CONFIGMAPS, "c", ns) for _ in range(40)))
            assert {g["metadata"]["name"] for g in got} == {"c"}
            assert gw._origin is not None
            assert gw._origin.calls._value == 3  # every call let its place go
        finally:
            await gw.aclose()

    asyncio.run(scenario())


def test_a_body_cut_off_mid_answer_is_a_server_error(
    kube: Running, ns: str, tmp_path: Path
) -> None:
    """The emulator's ``drop`` and ``malformed`` faults: truncated, then not JSON."""
    path = f"/api/v1/namespaces/{ns}/configmaps/c"
    kube.server.faults.add(method="GET", path=path, drop=True)
    kube.server.faults.add(method="GET", path=path, malformed=True)

    async def body(gw: LoopGateway) -> None:
        with pytest.raises(errors.ServerError, match="truncated answer"):
            await gw.get(CONFIGMAPS, "c", ns)
        with pytest.raises(errors.ServerError, match="not JSON"):
            await gw.get(CONFIGMAPS, "c", ns)

    _run(kube, tmp_path, body)


def _kubeconfig(kube: Running, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(kube.server.kubeconfig())
    return path


# --- scripted servers -------------------------------------------------------------------


def _plain(port: int, scheme: str = "http", **settings: Any) -> Configuration:
    cfg = kubernetes.client.Configuration()
    cfg.host = f"{scheme}://127.0.0.1:{port}"
    cfg.api_key = {"authorization": "Bearer t0ken"}
    for name, value in settings.items():
        setattr(cfg, name, value)
    return cfg


def _against(
    script: list[bytes | None],
    check: Callable[[LoopGateway, Scripted], Awaitable[None]],
    **kwargs: Any,
) -> Scripted:
    async def scenario() -> Scripted:
        async with Scripted(script) as server:
            gw = LoopGateway(_plain(server.port), **kwargs)
            try:
                await check(gw, server)
            finally:
                await gw.aclose()
        return server

    return asyncio.run(scenario())


def test_the_request_carries_the_token_accept_and_json_body() -> None:
    async def check(gw: LoopGateway, server: Scripted) -> None:
        await gw.patch(CONFIGMAPS, "c", [{"op": "add", "path": "/data", "value": {}}], "ns")

    server = _against([OK], check)
    [(method, target, headers, body)] = server.requests
    assert (method, target) == ("PATCH", "/api/v1/namespaces/ns/configmaps/c")
    assert headers["authorization"] == "Bearer t0ken"
    assert headers["content-type"] == "application/json-patch+json"
    assert headers["accept"] == "application/json"
    assert headers["host"] == f"127.0.0.1:{server.port}"
    # answers are read as sent (no decompression): an API server gzips a large answer
    # (a LIST) for a client that accepts it, so none is offered
    assert "accept-encoding" not in headers
    assert body == b'[{"op":"add","path":"/data","value":{}}]'


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"HTTP/1.1 two hundred OK\r\nContent-Length: 2\r\n\r\n{}", "malformed answer"),
        (b"NOTHTTP\r\n\r\n", "malformed answer"),
        (b"HTTP/1.1 200 OK\r\nBad Header\r\nContent-Length: 2\r\n\r\n{}", "malformed answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n{}", "malformed answer"),
        (answer(b"<html>oops</html>"), "not JSON"),
        (answer(b"[1, 2]"), "not a JSON object"),
        (answer(b"\xff\xfe"), "not JSON"),
        (b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"a": 1', "truncated answer"),
        (b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"a":', "truncated answer"),
        (b"HTTP/1.1 200 OK\r\n\r\n{}", "truncated answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Le", "connection failed"),
    ],
    ids=[
        "status-not-a-number",
        "not-http",
        "header-without-colon",
        "content-length-not-a-number",
        "html-body",
        "json-array",
        "not-utf8",
        "short-body",
        "short-chunked-body",
        "body-until-close",
        "headers-cut-off",
    ],
)
def test_a_malformed_or_truncated_answer_is_a_server_error(answer: bytes, message: str) -> None:
    async def check(gw: LoopGateway, server: Scripted) -> None:
        with pytest.raises(errors.ServerError, match=message) as caught:
            await gw.get(CONFIGMAPS, "c", "ns")
        assert caught.value.code in (0, 200)

    # The server closes after the scripted bytes (the script ends).
    _against([answer], check)


def test_a_chunked_answer_with_warnings_is_decoded() -> None:
    chunked = (
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n"
        b'Warning: 299 - "first \\"quoted\\" warning"\r\nWarning: 299 - "second"\r\n\r\n'
        b'7\r\n{"kind"\r\n16\r\n: "ConfigMap", "a": 1}\r\n0\r\n\r\n'
    )

    async def check(gw: LoopGateway, server: Scripted) -> None:
        got = await gw.create(CONFIGMAPS, {"metadata": {"name": "c"}}, "ns")
        assert got.body == {"kind": "ConfigMap", "a": 1}
        assert got.warnings == ['first "quoted" warning', "second"]
        assert (await gw.get(CONFIGMAPS, "c", "ns"))["kind"] == "ConfigMap"

    server = _against([chunked, OK], check)
    assert server.connections == 1  # the connection was kept alive for the second call


def test_a_429_on_the_loop_carries_its_retry_after() -> None:
    throttled = answer(b"{}", "429 Too Many Requests", "Retry-After: 7\r\n")

    async def check(gw: LoopGateway, server: Scripted) -> None:
        with pytest.raises(errors.TooManyRequests) as caught:
            await gw.get(CONFIGMAPS, "c", "ns")
        assert caught.value.retry_after_s == 7.0

    _against([throttled] * (THROTTLE_RETRIES + 1), check, sleep=Naps())


def test_a_get_is_sent_again_when_a_kept_alive_connection_closes_unanswered() -> None:
    """The server answers once, then closes the kept-alive connection on the next
    request without a byte: a GET is safe to resend, once, on a new connection."""

    async def check(gw: LoopGateway, server: Scripted) -> None:
        await gw.get(CONFIGMAPS, "c", "ns")
        assert (await gw.get(CONFIGMAPS, "c", "ns"))["kind"] == "ConfigMap"

    server = _against([OK, None, OK], check)
    assert [r[0] for r in server.requests] == ["GET", "GET", "GET"]
    assert server.connections == 2


def test_a_write_is_not_sent_again_when_its_connection_closes_unanswered() -> None:
    """The server may have applied the PATCH before closing: it is reported as failed
    (the ledger reads again), never sent twice."""

    async def check(gw: LoopGateway, server: Scripted) -> None:
        await gw.get(CONFIGMAPS, "c", "ns")
        with pytest.raises(errors.ServerError, match="ServerDisconnectedError") as caught:
            await gw.patch(CONFIGMAPS, "c", [{"op": "test", "path": "/a", "value": 1}], "ns")
        assert caught.value.code == 0
        assert (await gw.get(CONFIGMAPS, "c", "ns"))["kind"] == "ConfigMap"

    server = _against([OK, None, OK], check)
    assert [r[0] for r in server.requests] == ["GET", "PATCH", "GET"]


def test_a_connection_closed_while_idle_is_not_reused() -> None:
    """``Connection: close`` on the answer: the next call opens a new connection."""
    closing = answer(b"{}", extra="Connection: close\r\n")

    async def check(gw: LoopGateway, server: Scripted) -> None:
        await gw.get(CONFIGMAPS, "c", "ns")
        await gw.patch(CONFIGMAPS, "c", [], "ns")

    server = _against([closing, OK], check)
    assert server.connections == 2


def test_a_server_that_never_answers_times_out() -> None:
    async def scenario() -> None:
        silent = asyncio.Event()

        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            await silent.wait()
            writer.close()

        server = await asyncio.start_server(hold, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        gw = LoopGateway(_plain(port), timeout_s=0.2)
        try:
            with pytest.raises(errors.ServerError, match="no answer within") as caught:
                await gw.get(CONFIGMAPS, "c", "ns")
            assert caught.value.code == 0
        finally:
            silent.set()
            await gw.aclose()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_nothing_listening_is_a_server_error() -> None:
    async def scenario() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        gw = LoopGateway(_plain(port))
        try:
            with pytest.raises(errors.ServerError, match="cannot connect"):
                await gw.get(CONFIGMAPS, "c", "ns")
        finally:
            await gw.aclose()

    asyncio.run(scenario())


def test_an_answer_over_the_size_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_module, "MAX_ANSWER_BYTES", 64)

    async def check(gw: LoopGateway, server: Scripted) -> None:
        with pytest.raises(errors.ServerError, match="larger than 64 bytes"):
            await gw.get(CONFIGMAPS, "c", "ns")

    _against([answer(b'{"a": "' + b"x" * 100 + b'"}')], check)


@pytest.mark.parametrize(
    "token",
    ["Bearer a\r\nX-Evil: 1", "Bearer a\nb", "Bearer \u2603"],
    ids=["crlf", "lf", "non-latin1"],
)
def test_a_header_that_would_split_the_request_is_refused(token: str) -> None:
    async def scenario() -> None:
        async with Scripted([OK]) as server:
            cfg = _plain(server.port)
            cfg.api_key = {"authorization": token}
            gw = LoopGateway(cfg)
            try:
                with pytest.raises(errors.ServerError, match="cannot be sent"):
                    await gw.get(CONFIGMAPS, "c", "ns")
            finally:
                await gw.aclose()
            assert server.requests == []

    asyncio.run(scenario())


def test_a_client_certificate_from_the_configuration_is_presented(tmp_path: Path) -> None:
    """A server that requires a client certificate: the configuration's cert and key
    are presented; without them the handshake fails."""
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1")
    client_cert = ca.issue_cert("webhook@example.com")
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_cert.configure_cert(serving)
    ca.configure_trust(serving)
    serving.verify_mode = ssl.CERT_REQUIRED
    ca_file, cert_file, key_file = (tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    ca.cert_pem.write_to_path(str(ca_file))
    client_cert.cert_chain_pems[0].write_to_path(str(cert_file))
    client_cert.private_key_pem.write_to_path(str(key_file))

    async def scenario() -> None:
        async with Scripted([OK], tls=serving) as server:
            bare = LoopGateway(_plain(server.port, "https", ssl_ca_cert=str(ca_file)))
            try:
                with pytest.raises(errors.ServerError):
                    await bare.get(CONFIGMAPS, "c", "ns")
            finally:
                await bare.aclose()
            cfg = _plain(
                server.port,
                "https",
                ssl_ca_cert=str(ca_file),
                cert_file=str(cert_file),
                key_file=str(key_file),
            )
            gw = LoopGateway(cfg)
            try:
                assert (await gw.get(CONFIGMAPS, "c", "ns"))["kind"] == "ConfigMap"
            finally:
                await gw.aclose()

    asyncio.run(scenario())


def test_through_a_proxy_the_calls_stay_on_the_worker_threads() -> None:
    cfg = _plain(1, proxy="http://proxy.example:3128")
    gw = LoopGateway(cfg)
    try:
        assert gw._origin is None
    finally:
        gw.close()


def test_an_api_url_that_is_not_http_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="not http"):
        LoopGateway(_plain(1, host="ftp://example.com"))


def test_on_uvloop_the_webhooks_loop(kube: Running, ns: str, tmp_path: Path) -> None:
    """The webhook runs on uvloop, whose TLS transports are its own classes: the calls,
    a concurrent burst and a resent GET work there too."""

    async def scenario() -> None:
        gw = _tls_gateway(kube, tmp_path, connections=2)
        try:
            await gw.create(CONFIGMAPS, {"metadata": {"name": "u"}}, ns)
            got = await asyncio.gather(*(gw.get(CONFIGMAPS, "u", ns) for _ in range(10)))
            assert {g["metadata"]["name"] for g in got} == {"u"}
            with pytest.raises(errors.NotFound):
                await gw.get(CONFIGMAPS, "absent", ns)
        finally:
            await gw.aclose()

        async def check(gw: LoopGateway, server: Scripted) -> None:
            await gw.get(CONFIGMAPS, "c", "ns")
            assert (await gw.get(CONFIGMAPS, "c", "ns"))["kind"] == "ConfigMap"

        async with Scripted([OK, None, OK]) as server:
            gw = LoopGateway(_plain(server.port))
            try:
                await check(gw, server)
            finally:
                await gw.aclose()
        assert server.connections == 2

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())


# --- watches on the loop ------------------------------------------------------------------


def test_a_watch_streams_events_over_tls_and_raises_gone(
    kube: Running, ns: str, tmp_path: Path
) -> None:
    """As ``Gateway.watch``: events from a version until the server ends the watch;
    a compacted version raises Gone. No thread is started for it."""

    async def body(gw: LoopGateway) -> None:
        start = (await gw.list_all(CONFIGMAPS, ns)).resource_version
        await gw.create(CONFIGMAPS, {"metadata": {"name": "w"}}, ns)
        await gw.delete(CONFIGMAPS, "w", ns)
        threads = threading.active_count()
        seen = [e async for e in gw.watch(CONFIGMAPS, start, ns, timeout_s=1)]
        assert threading.active_count() == threads
        assert [(e.type, e.object["metadata"]["name"]) for e in seen] == [
            ("ADDED", "w"),
            ("DELETED", "w"),
        ]
        kube.call(kube.server.compact_history)
        with pytest.raises(errors.Gone):
            async for _ in gw.watch(CONFIGMAPS, start, ns, timeout_s=1):
                pass

    _run(kube, tmp_path, body)


def test_a_watch_refused_by_rbac_raises_forbidden(kube: Running, ns: str, tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(kube.server.kubeconfig(token=kube.server.mint_token("nobody")))

    async def scenario() -> None:
        gw = LoopGateway(load_configuration(str(path)))
        try:
            with pytest.raises(errors.Forbidden):
                async for _ in gw.watch(CONFIGMAPS, "", ns, timeout_s=1):
                    pass
        finally:
            await gw.aclose()

    asyncio.run(scenario())


def _chunked(*pieces: bytes, end: bool = True) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return head + body + (b"0\r\n\r\n" if end else b"")


def _event(kind: str, name: str) -> bytes:
    return json.dumps({"type": kind, "object": {"metadata": {"name": name}}}).encode() + b"\n"


def _watched(script: list[bytes | None]) -> tuple[list[tuple[str, str]], BaseException | None]:
    seen: list[tuple[str, str]] = []
    failed: list[BaseException] = []

    async def check(gw: LoopGateway, server: Scripted) -> None:
        try:
            async for event in gw.watch(CONFIGMAPS, "1", "ns", timeout_s=5):
                seen.append((event.type, event.object["metadata"]["name"]))
        except errors.KubeError as exc:
            failed.append(exc)

    _against(script, check)
    return seen, (failed[0] if failed else None)


def test_a_watch_line_split_across_chunks_is_joined() -> None:
    one, two = _event("ADDED", "a"), _event("MODIFIED", "b")
    seen, failed = _watched([_chunked(one[:7], one[7:] + two[:3], two[3:], b"\n")])
    assert (seen, failed) == ([("ADDED", "a"), ("MODIFIED", "b")], None)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (_chunked(_event("ADDED", "a"), b"not json\n"), "not JSON"),
        (_chunked(_event("ADDED", "a"), b"[1, 2]\n"), "not a JSON object"),
        (_chunked(_event("ADDED", "a"), end=False), "truncated answer"),
        (_chunked(_event("ADDED", "a"))[:-9], "truncated answer"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed answer"),
    ],
    ids=["line-not-json", "line-an-array", "cut-between-chunks", "cut-mid-chunk", "bad-chunk-size"],
)
def test_a_broken_watch_stream_is_a_server_error_after_the_good_events(
    answer: bytes, message: str
) -> None:
    seen, failed = _watched([answer])
    assert isinstance(failed, errors.ServerError)
    assert message in failed.message
    assert seen in ([("ADDED", "a")], [])


def test_a_watch_the_server_does_not_end_in_time_fails_after_its_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A watch still open ``WATCH_GRACE_S`` after its ``timeoutSeconds``: the events it
    sent arrive, then a ServerError (one timer for the whole watch)."""
    monkeypatch.setattr(loop_module, "WATCH_GRACE_S", 0.3)
    seen: list[str] = []
    failed: list[BaseException] = []

    async def check(gw: LoopGateway, server: Scripted) -> None:
        try:
            async for event in gw.watch(CONFIGMAPS, "1", "ns", timeout_s=0):
                seen.append(event.object["metadata"]["name"])
        except errors.KubeError as exc:
            failed.append(exc)

    open_ended = _chunked(_event("ADDED", "a"), _event("ADDED", "b"), end=False)
    _against([open_ended, OK], check)  # a second entry: the connection stays open
    assert seen == ["a", "b"]
    [error] = failed
    assert isinstance(error, errors.ServerError)
    assert "did not end in time" in error.message


def test_an_error_event_raises_its_error_after_the_events_before_it() -> None:
    gone = json.dumps(
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    ).encode()
    seen, failed = _watched([_chunked(_event("ADDED", "a") + gone + b"\n")])
    assert seen == [("ADDED", "a")]
    assert isinstance(failed, errors.Gone)


def test_a_consumer_that_falls_behind_pauses_the_stream_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More chunks than the stream buffers: reading pauses, resumes, every event
    arrives in order."""
    events = [_event("ADDED", f"o{i}") for i in range(300)]
    seen: list[str] = []

    async def check(gw: LoopGateway, server: Scripted) -> None:
        async for event in gw.watch(CONFIGMAPS, "1", "ns", timeout_s=5):
            seen.append(event.object["metadata"]["name"])
            if len(seen) % 50 == 0:
                await asyncio.sleep(0.01)  # behind: the server's chunks pile up

    _against([_chunked(*events)], check)
    assert seen == [f"o{i}" for i in range(300)]


def test_leaving_a_watch_early_closes_its_connection() -> None:
    async def scenario() -> None:
        closed = asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(_chunked(_event("ADDED", "a"), end=False))
            await reader.read()  # until the client closes
            closed.set()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        gw = LoopGateway(_plain(server.sockets[0].getsockname()[1]))
        try:
            stream: Any = gw.watch(CONFIGMAPS, "1", "ns", timeout_s=60)  # an async generator
            async for _ in stream:
                break
            await stream.aclose()
            await asyncio.wait_for(closed.wait(), 10)
        finally:
            await gw.aclose()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_a_connection_idle_too_long_is_closed_instead_of_reused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reused at once; replaced once idle longer than ``IDLE_KEEP_S``."""
    monkeypatch.setattr(loop_module, "IDLE_KEEP_S", 0.05)

    async def scenario() -> Scripted:
        async with Scripted([OK, OK, OK]) as server:
            gw = LoopGateway(_plain(server.port))
            try:
                await gw.get(CONFIGMAPS, "c", "ns")
                await gw.get(CONFIGMAPS, "c", "ns")
                assert server.connections == 1
                await asyncio.sleep(0.2)  # idle past the keep-alive time
                await gw.get(CONFIGMAPS, "c", "ns")
            finally:
                await gw.aclose()
        return server

    assert asyncio.run(scenario()).connections == 2


def test_closing_the_gateway_closes_its_idle_connections() -> None:
    """The webhook closes its gateway on the way out: the server sees each kept-alive
    connection end, and one a call was using when the gateway closed ends with it."""

    async def scenario() -> None:
        async with Scripted([OK] * 5) as server:  # the server would keep them open
            gw = LoopGateway(_plain(server.port))
            await asyncio.gather(*(gw.get(CONFIGMAPS, "c", "ns") for _ in range(2)))
            assert (server.connections, server.ends) == (2, 0)
            late = asyncio.ensure_future(gw.get(CONFIGMAPS, "c", "ns"))  # in flight
            await asyncio.sleep(0)
            gw.close()
            # the call in flight ends with its connection, or answers first
            with contextlib.suppress(errors.ServerError):
                assert (await late)["kind"] == "ConfigMap"
            while server.ends < 2:
                server.ended.clear()
                await asyncio.wait_for(server.ended.wait(), 10)
            await gw.aclose()

    asyncio.run(scenario())


def test_aclose_waits_until_every_tls_connection_is_gone_on_uvloop(
    kube: Running, ns: str, tmp_path: Path
) -> None:
    """The webhook's shutdown: idle connections and a watch's, over TLS on uvloop, are
    all gone when ``aclose`` returns (a TLS close is a shutdown exchange; a loop closed
    before it ends fails with EBUSY), and the loop then closes cleanly."""

    async def scenario(name: str) -> None:
        gw = _tls_gateway(kube, tmp_path, connections=2)
        await gw.create(CONFIGMAPS, {"metadata": {"name": name}}, ns)
        await asyncio.gather(*(gw.get(CONFIGMAPS, name, ns) for _ in range(4)))
        started = asyncio.Event()

        async def watching() -> None:
            async for _ in gw.watch(CONFIGMAPS, "", ns, timeout_s=60):
                started.set()

        watch = asyncio.ensure_future(watching())
        await asyncio.wait_for(started.wait(), 10)  # the watch sends the object as ADDED
        assert gw._origin is not None
        assert gw._origin.session is not None
        await asyncio.wait_for(gw.aclose(), 5)
        assert gw._origin.session.closed
        with pytest.raises(errors.ServerError):
            await asyncio.wait_for(watch, 5)  # its connection went away under it

    for name in ("s1", "s2", "s3"):
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(scenario(name))
