"""A throwaway mutating webhook served over TLS by the test (uvicorn on a loopback IP).

The serving certificate comes from a ``trustme`` CA and names whatever DNS names the
test asks for, so a test can serve a certificate that does or does not match the
Service name. ``answer`` decides each response; every review received is kept, with
the client's ``(ip, port)`` it came from (one per TCP connection: how many connections
the caller opened). ``delays`` holds seconds to wait before answering, one per
request, taken first to last (none left: answer at once).
"""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

Answer = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class ThrowawayWebhook:
    """A running webhook: its port, its CA (for caBundle), what it received."""

    port: int
    ca: trustme.CA
    answer: Answer
    host: str = "127.0.0.1"
    reviews: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    peers: list[tuple[str, int]] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)

    @property
    def connections(self) -> int:
        """How many TCP connections the requests came over."""
        return len(set(self.peers))

    @property
    def ca_bundle(self) -> str:
        """``clientConfig.caBundle``: the CA certificate, base64 PEM."""
        return base64.b64encode(self.ca.cert_pem.bytes()).decode()


@contextmanager
def serve_webhook(
    tmp_path: Path,
    dns_names: list[str],
    answer: Answer,
    ca: trustme.CA | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
) -> Iterator[ThrowawayWebhook]:
    """Serve on ``host`` (a loopback IP) and ``port`` (ephemeral when 0) until the block
    ends (a new CA unless given)."""
    ca = ca or trustme.CA()
    cert = ca.issue_cert(*dns_names)
    sock = socket.socket()
    sock.bind((host, port))
    port = sock.getsockname()[1]
    stem = f"hook-{host}-{port}"
    certfile, keyfile = tmp_path / f"{stem}.crt", tmp_path / f"{stem}.key"
    cert.private_key_and_cert_chain_pem.write_to_path(str(certfile))
    cert.private_key_pem.write_to_path(str(keyfile))
    hook = ThrowawayWebhook(port, ca, answer, host)

    async def mutate(request: Request) -> JSONResponse:
        review = await request.json()
        hook.reviews.append(review)
        hook.paths.append(f"{request.url.path}?{request.url.query}")
        assert request.client is not None
        hook.peers.append((request.client.host, request.client.port))
        if hook.delays:
            await asyncio.sleep(hook.delays.pop(0))
        return JSONResponse(hook.answer(review))

    app = Starlette(routes=[Route("/mutate", mutate, methods=["POST"])])
    config = uvicorn.Config(
        app, ssl_certfile=str(certfile), ssl_keyfile=str(keyfile), log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=asyncio.run, args=(server.serve(sockets=[sock]),), daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.01)
    try:
        yield hook
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()
