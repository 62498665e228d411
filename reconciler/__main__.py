"""``python -m reconciler``: read settings, run on uvloop until SIGTERM/SIGINT, exit
cleanly.

Exit codes: 0 after a clean shutdown, 2 on invalid configuration.
``python -m reconciler explain <ns>/<pod>`` and ``… list`` are the user's commands
(``reconciler.cli``); they need no settings, only a kubeconfig.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import uvloop

from reconciler import cli
from reconciler.base import settings as settings_module
from reconciler.base.settings import ReconcilerSettings
from reconciler.process import Reconciler
from shared import logs
from shared.appclient import AppClient
from shared.gateway.loop import LoopGateway
from shared.settings import EnvReader, SettingsError

_log = logging.getLogger("reconciler")
#: Calls to the API server at once (window open patches many pods of a booking at once).
RECONCILER_CONNECTIONS = 16


def main() -> int:
    """Entry point."""
    if len(sys.argv) > 1 and (sys.argv[1] in cli.COMMANDS or sys.argv[1].startswith("-")):
        return cli.main(sys.argv[1:])
    try:
        settings, reader = settings_module.load()
    except SettingsError as exc:
        print(f"reconciler: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.common.log_level, settings.common.library_log_level)
    _log_notices(reader)
    # uvloop, as the webhook: the calls' and watches' TLS runs in its C transports, where
    # asyncio's Python SSL protocol was about a tenth of the replica's CPU
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run(settings))
    return 0


async def run(settings: ReconcilerSettings) -> None:
    """Start the replica, wait for a stop signal, stop it."""
    clock = settings.clock.build()
    # Calls and watches on this loop through aiohttp, as the webhook's: every admitted
    # pod costs the reconciler an Event and a ledger write, and a worker thread per call
    # cost more CPU than the call (docs/developer/architecture.md, "The Kubernetes
    # gateway"). As many calls at once as the thread pool had workers.
    gateway = LoopGateway.for_process(settings.common, connections=RECONCILER_CONNECTIONS)
    client = AppClient(settings.api_url, settings.api_key.value, clock=clock)
    reconciler = Reconciler(settings, gateway, client, clock, leases=client, victims=client)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await reconciler.start()
        await stop.wait()
    finally:
        await reconciler.stop()
        await client.aclose()
        await gateway.aclose()


def _log_notices(reader: EnvReader) -> None:
    for notice in reader.notices:
        logs.log(
            _log,
            logging.WARNING,
            "config.invalid",
            variable=notice.variable,
            reason=notice.reason,
            value=notice.value,
        )


if __name__ == "__main__":
    raise SystemExit(main())
