"""Mutual TLS on the webhook's port, over real handshakes: with a client CA file the
server requires a client certificate from that CA (the API server's); without one,
nothing changes. The CA file is reloaded on the same poll as the serving pair."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
import uvicorn

from certs.tls import ReloadingTLS
from shared.clock import SystemClock
from webhook import settings as webhook_settings

from .helpers import NAMES, material

POLL_S = 0.02
#: The name the API server dials (and the kubeconfig user it presents a certificate as).
SERVICE_NAME = NAMES[2]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@dataclass
class Server:
    port: int
    tls: ReloadingTLS
    serving_ca_pem: bytes
    client_ca_file: Path


@dataclass
class Clients:
    """Client CAs: ``trusted`` is the one the server's CA file holds."""

    trusted: trustme.CA
    other: trustme.CA


@pytest.fixture
def clients() -> Clients:
    return Clients(trustme.CA(), trustme.CA())


def serve(tmp_path: Path, client_ca_file: Path | None) -> Iterator[Server]:
    pair = material()
    (tmp_path / "tls.crt").write_bytes(pair.serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.serving.key_pem)
    tls = ReloadingTLS(
        tmp_path / "tls.crt", tmp_path / "tls.key", SystemClock(), POLL_S, client_ca_file
    )
    server = uvicorn.Server(
        uvicorn.Config(app, ssl_context_factory=tls.uvicorn_factory, log_level="critical")
    )
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
        yield Server(
            sock.getsockname()[1],
            tls,
            pair.ca.cert_pem,
            client_ca_file or tmp_path / "unused",
        )
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


@pytest.fixture
def mutual(tmp_path: Path, clients: Clients) -> Iterator[Server]:
    """A server whose client CA file holds ``clients.trusted``."""
    ca_file = tmp_path / "client-ca.crt"
    clients.trusted.cert_pem.write_to_path(str(ca_file))
    yield from serve(tmp_path, ca_file)


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[Server]:
    yield from serve(tmp_path, None)


def client(server: Server, ca: trustme.CA | None = None) -> ssl.SSLContext:
    """A client trusting the serving CA, presenting a certificate from ``ca`` if given."""
    context = ssl.create_default_context(cadata=server.serving_ca_pem.decode())
    if ca is not None:
        ca.issue_cert(SERVICE_NAME).configure_cert(context)
    return context


def answered(server: Server, context: ssl.SSLContext) -> bool:
    """Whether one request over a new connection gets the app's 200.

    With TLS 1.3 a refused client certificate may surface on the first read rather
    than in the handshake; either way no answer comes.
    """
    try:
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=SERVICE_NAME) as conn,
        ):
            conn.sendall(
                f"GET / HTTP/1.1\r\nHost: {SERVICE_NAME}\r\nConnection: close\r\n\r\n".encode()
            )
            return conn.recv(4096).startswith(b"HTTP/1.1 200")
    except (ssl.SSLError, ConnectionError):
        return False


def wait_for(condition: Any, timeout_s: float = 30.0) -> None:
    """Poll ``condition`` until it holds (a liveness bound: a loaded machine is slow)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(POLL_S)


# --- over real handshakes --------------------------------------------------------------


def test_a_client_certificate_from_the_ca_is_served(mutual: Server, clients: Clients) -> None:
    assert mutual.tls.loaded
    assert answered(mutual, client(mutual, clients.trusted))


def test_no_client_certificate_fails(mutual: Server) -> None:
    assert not answered(mutual, client(mutual))


def test_a_certificate_from_another_ca_fails(mutual: Server, clients: Clients) -> None:
    assert not answered(mutual, client(mutual, clients.other))


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_both_tls_versions_check_the_client(
    mutual: Server, clients: Clients, version: ssl.TLSVersion
) -> None:
    def pinned(ca: trustme.CA | None) -> ssl.SSLContext:
        context = client(mutual, ca)
        context.minimum_version = context.maximum_version = version
        return context

    assert answered(mutual, pinned(clients.trusted))
    assert not answered(mutual, pinned(None))
    assert not answered(mutual, pinned(clients.other))


def test_without_a_client_ca_no_certificate_is_asked_for(plain: Server, clients: Clients) -> None:
    assert plain.tls.context.verify_mode == ssl.CERT_NONE
    assert answered(plain, client(plain))
    assert answered(plain, client(plain, clients.other))


def test_a_new_ca_in_the_file_is_trusted_without_a_restart(
    mutual: Server, clients: Clients
) -> None:
    """The rotated file's CA is trusted from the next poll; the old one stays trusted
    until a restart (OpenSSL's trust store only grows; docs/operator/certificates.md)."""
    rotated = trustme.CA()
    assert not answered(mutual, client(mutual, rotated))
    rotated.cert_pem.write_to_path(str(mutual.client_ca_file))
    wait_for(lambda: answered(mutual, client(mutual, rotated)))
    assert answered(mutual, client(mutual, clients.trusted))
    assert not answered(mutual, client(mutual, clients.other))


# --- loading the CA file ----------------------------------------------------------------


def _tls(tmp_path: Path, ca_file: Path) -> ReloadingTLS:
    pair = material()
    (tmp_path / "tls.crt").write_bytes(pair.serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.serving.key_pem)
    return ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", SystemClock(), 10, ca_file)


def test_not_ready_until_the_client_ca_file_appears(tmp_path: Path, clients: Clients) -> None:
    ca_file = tmp_path / "client-ca.crt"
    tls = _tls(tmp_path, ca_file)
    assert tls.certificate is not None
    before = tls.loaded
    clients.trusted.cert_pem.write_to_path(str(ca_file))
    assert tls.reload()
    assert (before, tls.loaded) == (False, True)
    assert not tls.reload()  # unchanged content is not loaded again


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not a certificate",
        "-----BEGIN CERTIFICATE-----\nnot base64 \u00e9\n-----END CERTIFICATE-----\n".encode(),
        b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        b"-----BEGIN CERTIFICATE-----\nMIIB",
        b"\xff\xfe\x00garbage",
    ],
    ids=["empty", "text", "non-ascii", "bad-der", "truncated", "binary"],
)
def test_a_malformed_client_ca_file_is_not_loaded(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    ca_file = tmp_path / "client-ca.crt"
    ca_file.write_bytes(content)
    with caplog.at_level(logging.INFO):
        tls = _tls(tmp_path, ca_file)
    assert not tls.loaded
    assert "tls.client_ca_skipped" in caplog.text


def test_a_malformed_rewrite_keeps_the_loaded_ca(
    tmp_path: Path, clients: Clients, caplog: pytest.LogCaptureFixture
) -> None:
    ca_file = tmp_path / "client-ca.crt"
    clients.trusted.cert_pem.write_to_path(str(ca_file))
    tls = _tls(tmp_path, ca_file)
    ca_file.write_bytes(b"-----BEGIN CERTIFICATE-----\nMIIB")
    with caplog.at_level(logging.WARNING):
        assert not tls.reload()
    assert tls.loaded
    assert "tls.client_ca_skipped" in caplog.text
    ca_file.unlink()
    with caplog.at_level(logging.WARNING):
        assert not tls.reload()
    assert tls.loaded
    assert "tls.client_ca_unreadable" in caplog.text


# --- the setting -------------------------------------------------------------------------

BASE_ENV = {"TLS_CERT_FILE": "/t/tls.crt", "TLS_KEY_FILE": "/t/tls.key", "POD_NAMESPACE": "gpu"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("  ", None),
        ("/etc/webhook/client-ca/ca.crt", "/etc/webhook/client-ca/ca.crt"),
    ],
)
def test_the_client_ca_setting(value: str | None, expected: str | None) -> None:
    """Unset or blank: no mutual TLS; a path: that file."""
    env = dict(BASE_ENV)
    if value is not None:
        env["WEBHOOK_CLIENT_CA_FILE"] = value
    settings, _ = webhook_settings.load(env)
    assert settings.serving.client_ca_file == expected
