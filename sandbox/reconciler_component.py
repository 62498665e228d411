"""``ReconcilerComponent``: the real reconciler, run as ``python -m reconciler``.

Retiring: the sandbox, its tests and benchmarks run the reconciler from the chart's
release (``sandbox.release_component``, ``sandbox.release_replicas``). Only
``bench/bench_webhook.py`` and ``bench/bench_create.py`` still start this component;
it goes when they move to the release. ``ROOT`` is ``sandbox.paths.ROOT``.

Installs the controller namespace, the chart's CRD and every component's RBAC into the
Kubernetes emulator (``sandbox.install.install_base``, from the chart's render), then
starts the reconciler as a subprocess wired to the app emulator:
``RESERVATION_API_URL`` = ``ctx.endpoints["app"]``, the ``read_write`` key,
``INBOUND_API_TOKEN`` = ``ctx.inbound_token``, a kubeconfig holding a token of the
chart's reconciler service account (so it runs with exactly the chart's RBAC: a
missing permission is a 403 here), loopback HTTP on a free port, short intervals and the
sandbox's scheduling gate (``SandboxContext.scheduling_gate``). It publishes
``ctx.endpoints["reconciler"]``, which the app emulator pushes to.

Why a subprocess and not in-process: it is exactly what production runs (settings
from the environment, signal handling, exit codes), its blocking Kubernetes client
threads cannot stall the emulators' event loop, and a test can kill it — SIGKILL for
a crashed leader, SIGTERM for a clean shutdown. ``ReconcilerProcess`` is public so
tests can start more replicas against the same sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import httpx

from sandbox import chart
from sandbox.install import account_kubeconfig, install_base
from sandbox.paths import ROOT as ROOT  # re-exported for bench/bench_webhook.py
from sandbox.ports import free_port
from sandbox.runner import SandboxContext, clock_env, gate_env
from shared.gateway import Gateway

#: Short sandbox intervals (seconds of the sandbox clock).
SANDBOX_ENV = {
    "RESERVATION_FETCH_INTERVAL": "5",
    "LEADER_ELECTION_LEASE_SECONDS": "4",
    "LEADER_ELECTION_RENEW_SECONDS": "1",
    "LEDGER_CLAIM_TTL_SECONDS": "60",
    "CAPACITY_CHECK_INTERVAL": "30",
    "HTTP_HOST": "127.0.0.1",
}
START_TIMEOUT_S = 20.0


async def install(kubeconfig: Path, namespace: str) -> None:
    """Install the chart's namespace, CRD and RBAC with the admin ``kubeconfig``
    (existing objects are kept or replaced); wait until GPUReservations are served."""
    gateway = Gateway.from_kubeconfig(str(kubeconfig))
    try:
        await install_base(gateway, chart.objects(namespace))
    finally:
        gateway.close()


def environment(ctx: SandboxContext, kubeconfig: Path, port: int, name: str) -> dict[str, str]:
    """The reconciler's environment in the sandbox."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "RESERVATION_API_URL": ctx.endpoints["app"],
        "RESERVATION_API_KEY": ctx.app_keys["read_write"],
        "INBOUND_API_TOKEN": ctx.inbound_token,
        "KUBECONFIG": str(kubeconfig),
        "POD_NAMESPACE": ctx.namespace,
        "POD_NAME": name,
        "HTTP_PORT": str(port),
        **SANDBOX_ENV,
        **gate_env(ctx),
        **clock_env(ctx.clock),
    }


def account(ctx: SandboxContext, path: Path) -> Path:
    """A kubeconfig for the chart's reconciler service account (``install`` made its RBAC)."""
    account_name = chart.objects(ctx.namespace).service_accounts["reconciler"]
    return account_kubeconfig(ctx.handles["kube"], ctx.namespace, account_name, path)


class ReconcilerProcess:
    """One ``python -m reconciler`` replica; logs go to ``<state-dir>/<name>.log``."""

    def __init__(self, ctx: SandboxContext, name: str, extra_env: dict[str, str] | None = None):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = ctx.state_dir / f"{name}.log"
        kubeconfig = account(ctx, ctx.state_dir / f"{name}.kubeconfig")
        self.env = {**environment(ctx, kubeconfig, self.port, name), **(extra_env or {})}
        self.proc: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None

    async def start(self) -> None:
        """Spawn and wait until ``/health`` answers."""
        self._log = self.log_path.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "reconciler",
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        await self._wait_healthy()

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` (SIGKILL: a crash; SIGTERM: a clean shutdown)."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(sig)

    async def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM, wait, SIGKILL if it will not go; returns the exit code."""
        if self.proc is None:
            return None
        self.signal(signal.SIGTERM)
        code = await self._wait(timeout_s)
        if code is None:
            self.proc.kill()
            code = await self._wait(5.0)
        if self._log is not None:
            self._log.close()
        return code

    def logs(self) -> list[dict[str, Any]]:
        """Every JSON log line written so far."""
        import json

        lines = []
        for line in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))
        return [entry for entry in lines if isinstance(entry, dict)]

    async def _wait(self, timeout_s: float) -> int | None:
        assert self.proc is not None
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: can swallow a cancel
                return await self.proc.wait()
        except TimeoutError:
            return None

    async def _wait_healthy(self) -> None:
        async with httpx.AsyncClient(timeout=1.0) as client:
            for _ in range(int(START_TIMEOUT_S / 0.05)):
                assert self.proc is not None
                if self.proc.returncode is not None:
                    raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{self.url}/health")).status_code == 200:
                        return
                await asyncio.sleep(0.05)
        await self.stop()
        raise RuntimeError(f"{self.name} did not become healthy; see {self.log_path}")


class ReconcilerComponent:
    """The sandbox's reconciler (one replica)."""

    name = "reconciler"

    def __init__(self) -> None:
        self.process: ReconcilerProcess | None = None

    async def start(self, ctx: SandboxContext) -> None:
        if ctx.kubeconfig is None:
            raise RuntimeError("the reconciler needs the kube component (no kubeconfig)")
        admin = ctx.state_dir / "reconciler-admin.kubeconfig"
        admin.write_text(ctx.kubeconfig, encoding="utf-8")
        admin.chmod(0o600)
        await install(admin, ctx.namespace)
        self.process = ReconcilerProcess(ctx, "reconciler-0")
        await self.process.start()
        ctx.endpoints[self.name] = self.process.url
        ctx.handles[self.name] = self.process

    async def stop(self) -> None:
        if self.process is not None:
            await self.process.stop()
            self.process = None
