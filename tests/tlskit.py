"""TLS helpers shared by the tests that watch a server's certificate change."""

from __future__ import annotations

import socket
import ssl


def presented(port: int, host: str = "127.0.0.1") -> bytes:
    """The DER certificate a new TLS handshake with ``host``:``port`` presents
    (unverified: the tests compare it with the certificate they expect)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection((host, port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        cert = tls.getpeercert(binary_form=True)
    assert cert is not None
    return cert
