"""The reloading TLS context under a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from cryptography.hazmat.primitives import serialization

from certs.material import Material
from certs.pem import KeyPair, fingerprint
from certs.tls import ReloadingTLS
from shared.clock import ManualClock, SystemClock

from .helpers import NAMES, material

POLL_S = 0.02


def der(pair: KeyPair) -> bytes:
    return pair.certificate.public_bytes(serialization.Encoding.DER)


def install(directory: Path, pair: KeyPair, key: bool = True, cert: bool = True) -> None:
    if key:
        (directory / "tls.key").write_bytes(pair.key_pem)
    if cert:
        (directory / "tls.crt").write_bytes(pair.cert_pem)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@dataclass
class Served:
    port: int
    tls: ReloadingTLS
    first: Material
    directory: Path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """uvicorn with the reloading context, its watcher polling every 20 ms."""
    first = material()
    install(tmp_path, first.serving)
    tls = ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", SystemClock(), POLL_S)
    config = uvicorn.Config(app, ssl_context_factory=tls.uvicorn_factory, log_level="warning")
    server = uvicorn.Server(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))

    async def main() -> None:
        watcher = asyncio.create_task(tls.watch())
        try:
            await server.serve(sockets=[sock])
        finally:
            watcher.cancel()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.01)
    try:
        yield Served(sock.getsockname()[1], tls, first, tmp_path)
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


def client(ca: Material, **versions: ssl.TLSVersion) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.ca.cert_pem.decode())
    for name, version in versions.items():
        setattr(context, name, version)
    return context


def handshake(port: int, context: ssl.SSLContext, name: str = NAMES[2]) -> bytes:
    """Connect, verify against ``context`` for ``name``, send one request; the peer DER."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=name) as conn,
    ):
        peer = conn.getpeercert(binary_form=True)
        conn.sendall(f"GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
        answer = conn.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert conn.version() in ("TLSv1.2", "TLSv1.3")
        assert peer is not None
        return peer


def presented(tls: ReloadingTLS) -> str | None:
    """Fingerprint of the certificate new handshakes get."""
    return tls.certificate.fingerprint if tls.certificate else None


def wait_for(condition: Any, timeout_s: float = 30.0) -> None:
    """Poll ``condition`` until it holds (a liveness bound: a loaded machine is slow)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(POLL_S)


def test_uvicorn_serves_the_loaded_certificate_for_the_apiserver_name(served: Served) -> None:
    assert served.tls.loaded
    assert handshake(served.port, client(served.first)) == der(served.first.serving)


def test_rotated_files_reach_new_handshakes_without_a_restart(served: Served) -> None:
    second = material(ca=served.first.ca)
    install(served.directory, second.serving)
    wait_for(lambda: presented(served.tls) == fingerprint(second.serving.certificate))
    assert handshake(served.port, client(second)) == der(second.serving)


def test_a_new_ca_is_served_too(served: Served) -> None:
    other = material()
    install(served.directory, other.serving)
    wait_for(lambda: presented(served.tls) == fingerprint(other.serving.certificate))
    assert handshake(served.port, client(other)) == der(other.serving)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(served.port, client(served.first))


def test_tls_1_1_is_refused_and_1_2_accepted(served: Served) -> None:
    with warnings.catch_warnings():  # offering TLS 1.1 is deprecated, and that is the point
        warnings.simplefilter("ignore", DeprecationWarning)
        old = client(
            served.first,
            minimum_version=ssl.TLSVersion.TLSv1,
            maximum_version=ssl.TLSVersion.TLSv1_1,
        )
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    with pytest.raises(ssl.SSLError) as refused:
        handshake(served.port, old)
    # The client did offer TLS 1.1 (no local "no protocols available"): the server refused.
    assert "NO_PROTOCOLS_AVAILABLE" not in str(refused.value)
    assert served.tls.context.minimum_version is ssl.TLSVersion.TLSv1_2
    tls12 = client(served.first, maximum_version=ssl.TLSVersion.TLSv1_2)
    assert handshake(served.port, tls12) == der(served.first.serving)


def test_a_half_written_pair_is_ignored_until_consistent(tmp_path: Path) -> None:
    first, second = material(), material()
    install(tmp_path, first.serving)
    tls = ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", SystemClock())
    install(tmp_path, second.serving, key=False)
    assert not tls.reload()
    assert presented(tls) == fingerprint(first.serving.certificate)
    install(tmp_path, second.serving, cert=False)
    assert tls.reload()
    assert presented(tls) == fingerprint(second.serving.certificate)
    assert not tls.reload()  # unchanged content: nothing to do


def test_not_loaded_until_the_files_appear(tmp_path: Path) -> None:
    tls = ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", SystemClock())
    assert [tls.loaded] == [False]  # (a list: mypy would otherwise narrow the property)
    assert presented(tls) is None
    (tmp_path / "tls.crt").write_bytes(b"garbage")
    (tmp_path / "tls.key").write_bytes(b"garbage")
    assert not tls.reload()
    pair = material()
    install(tmp_path, pair.serving)
    assert tls.reload()
    assert tls.loaded
    info = tls.certificate
    assert info is not None
    assert info.not_after == pair.serving.not_after
    assert info.serial == pair.serving.certificate.serial_number
    assert info.dns_names == frozenset(NAMES)


def test_the_watcher_polls_on_the_injected_clock(tmp_path: Path) -> None:
    first, second = material(), material()
    install(tmp_path, first.serving)
    clock = ManualClock()
    tls = ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", clock, interval_s=10)

    async def scenario() -> None:
        watcher = asyncio.create_task(tls.watch())
        await asyncio.sleep(0)
        install(tmp_path, second.serving)
        await clock.advance(9)
        assert presented(tls) == fingerprint(first.serving.certificate)
        await clock.advance(1)
        assert presented(tls) == fingerprint(second.serving.certificate)
        watcher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watcher

    asyncio.run(scenario())
