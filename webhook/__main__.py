"""``python -m webhook``: the admission webhook process.

Runs, until SIGTERM/SIGINT: uvicorn serving ``POST /mutate`` over TLS (the context
reloads renewed certificate files without a restart), a second uvicorn on plain HTTP
for ``/healthz``, ``/readyz`` and ``/metrics``, the GPUReservation watch cache, and the
certificate-file poller. Exits 2 when the configuration is invalid.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Coroutine, Generator
from typing import Any

import uvicorn
import uvloop

from certs.tls import ReloadingTLS
from shared import logs
from shared.gateway.loop import LoopGateway
from shared.logs import log
from shared.settings import SettingsError
from webhook import settings as settings_module
from webhook.app import health_app, mutate_app
from webhook.cache import ReservationCache
from webhook.handler import ADMISSION_LINE, Admission
from webhook.metrics import Metrics
from webhook.nodes import NodeCache
from webhook.settings import WebhookSettings

_log = logging.getLogger("webhook")

#: Seconds an idle kept-alive connection stays open. kube-apiserver's webhook client
#: (client-go's TLS transport) sets no idle limit and reuses a connection until the
#: server closes it; a review written as the server closes fails, and ``failurePolicy:
#: Ignore`` lets that pod in unadmitted (with uvicorn's default of 5 s, once in 1,500
#: creates of ``bench webhook``). An hour leaves that race to the rare connection idle
#: for a whole hour, and still reaps the sockets of API servers that vanished unseen.
KEEP_ALIVE_S = 3600


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to us (two servers, one process)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def server(app: object, host: str, port: int, tls: ReloadingTLS | None) -> _Server:
    """The uvicorn server for ``app`` (also the benchmark baseline's: one construction).

    HTTP/1.1 is parsed by httptools (C), not h11 (pure Python); the event loop is the
    caller's — ``main`` runs on uvloop (docs/developer/performance.md has the figures)."""
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        http="httptools",
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_keep_alive=KEEP_ALIVE_S,
        ssl_context_factory=tls.uvicorn_factory if tls else None,
        timeout_graceful_shutdown=5,
    )
    return _Server(config)


async def serve(settings: WebhookSettings) -> None:
    """Run every part until a signal asks to stop."""
    # The ledger's reads and writes and the cache's list and watch on this loop, not on
    # worker threads: docs/developer/architecture.md, "The Kubernetes gateway".
    gateway = LoopGateway.for_process(settings.common, timeout_s=5.0)
    cache = ReservationCache(gateway, settings.policy.namespace, settings.clock)
    nodes = NodeCache(gateway, settings.clock)
    serving = settings.serving
    tls = ReloadingTLS(
        serving.cert_file,
        serving.key_file,
        settings.clock,
        interval_s=serving.tls_reload_s,
        client_ca_file=serving.client_ca_file,
    )
    admission = Admission(
        settings.policy,
        cache,
        gateway,
        settings.clock,
        Metrics(),
        ledger_deadline_s=settings.ledger_deadline_s,
        zone=settings.common.display_timezone,
        nodes=nodes,
    )
    servers = [
        server(mutate_app(admission, serving.max_body_bytes), serving.host, serving.port, tls),
        server(health_app(admission, lambda: tls.loaded), serving.host, serving.health_port, None),
    ]
    try:
        await _run(servers, [cache.run(), nodes.run(), tls.watch()])
    finally:
        await gateway.aclose()


async def _run(servers: list[_Server], loops: list[Coroutine[Any, Any, None]]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.ensure_future(c) for c in loops]
    serving = [asyncio.ensure_future(s.serve()) for s in servers]
    log(_log, logging.INFO, "webhook.started", ports=[s.config.port for s in servers])
    await _until_stopped(stop, serving + tasks)
    for server in servers:
        server.should_exit = True
    await asyncio.gather(*serving, return_exceptions=True)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    log(_log, logging.INFO, "webhook.stopped")


async def _until_stopped(stop: asyncio.Event, tasks: list[asyncio.Task[None]]) -> None:
    """Wait for the signal, or for any part to end (a crash ends the process)."""
    waiter = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    for task in tasks:
        if task in done and not task.cancelled():
            log(_log, logging.ERROR, "webhook.part_ended", error=repr(task.exception()))


def main() -> int:
    try:
        settings, reader = settings_module.load()
    except SettingsError as exc:
        print(f"webhook: {exc}", file=sys.stderr)
        return 2
    logs.configure(
        settings.common.log_level,
        settings.common.library_log_level,
        batched=frozenset({ADMISSION_LINE}),
    )
    for notice in reader.notices:
        log(_log, logging.WARNING, "config.invalid", variable=notice.variable, reason=notice.reason)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
