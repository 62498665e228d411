"""``WebhookComponent``: N replicas of the real webhook behind one Service.

Retiring: the sandbox, its tests and benchmarks run the webhook from the chart's
release (``sandbox.release_component``). Only ``bench/bench_webhook.py`` and
``bench/bench_create.py`` still start this component; it goes when they move to the
release.

What it sets up in the Kubernetes emulator — from the chart (``sandbox.chart`` renders
it, ``sandbox.install`` puts it in), as ``helm install`` would:

- the namespace, the CRD and every component's RBAC (``install_base``, idempotent);
- the chart's webhook Service and MutatingWebhookConfiguration, verbatim;
- the certificates exactly as the chart's self-signed hook Job makes them:
  ``certs.apply.ensure`` with the Job's environment under the ``certs`` service
  account — the serving Secret, the CA Secret, the ``caBundle``;
- the Secret "mounted" like the kubelet does: ``<state-dir>/webhook-tls/tls.crt`` and
  ``tls.key`` follow the Secret, and every replica reads and reloads them;
- N ``python -m webhook`` replicas under the chart's webhook service account (its own
  kubeconfig, exactly the chart's RBAC), with the sandbox's scheduling gate
  (``SandboxContext.scheduling_gate``, the reconciler's too);
- an Endpoints object with one subset per replica on 127.0.0.1 (the sandbox's stand-in
  for the endpoints controller) — the dispatch resolves the Service to them round-robin.

``ctx.handles["webhook"]`` is this component: tests stop and start replicas and
renew the certificate through it (``rotate``/``renew``). ``ctx.handles["webhook.replicas"]``
(set by ``--webhook-replicas``) chooses how many replicas start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO

import httpx

from certs.apply import Outcome
from certs.pem import KeyPair, load_pair
from certs.plan import TLS_CRT, TLS_KEY
from sandbox import chart
from sandbox.install import (
    MountedSecret,
    account_kubeconfig,
    ensure_certificates,
    install_base,
    install_webhook,
    put_endpoints,
    renewal_overrides,
    secret_data,
    write_private,
)
from sandbox.kube.admission.install import install as install_dispatch
from sandbox.paths import ROOT
from sandbox.ports import free_port
from sandbox.runner import SandboxContext, clock_env, gate_env
from shared.clock import SystemClock
from shared.gateway import Gateway
from webhook.configuration import CONFIGURATION_NAME

START_TIMEOUT_S = 20.0


class WebhookReplica:
    """One ``python -m webhook`` process on fixed loopback ports."""

    def __init__(self, name: str, env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.port = free_port()
        self.health_port = free_port()
        self.health_url = f"http://127.0.0.1:{self.health_port}"
        self.env = {
            **env,
            "WEBHOOK_PORT": str(self.port),
            "WEBHOOK_HEALTH_PORT": str(self.health_port),
        }
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self, wait_ready: bool = True) -> None:
        """Spawn; wait until ``/readyz`` says ready (certificate loaded, cache synced)."""
        self._log = self.log_path.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "webhook",
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        if wait_ready:
            await self.wait_ready()

    async def ready(self) -> bool:
        """Whether ``/readyz`` answers 200 now."""
        async with httpx.AsyncClient(timeout=1.0) as client:
            with contextlib.suppress(httpx.HTTPError):
                return (await client.get(f"{self.health_url}/readyz")).status_code == 200
        return False

    async def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        for _ in range(int(timeout_s / 0.05)):
            if self.proc is None or self.proc.returncode is not None:
                raise RuntimeError(f"{self.name} exited; see {self.log_path}")
            if await self.ready():
                return
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{self.name} did not become ready; see {self.log_path}")

    async def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it will not go."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(timeout_s):  # not wait_for: can swallow a cancel
                    await self.proc.wait()
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


class WebhookComponent:
    """The sandbox's admission webhook: N replicas behind one Service."""

    name = "webhook"

    def __init__(self, replicas: int = 1, extra_env: dict[str, str] | None = None) -> None:
        self.count = replicas
        self.extra_env = dict(extra_env or {})
        self.replicas: list[WebhookReplica] = []
        self.objects: chart.ChartObjects | None = None
        #: The serving Secret as the replicas see it (``tls.crt``/``tls.key`` files).
        self.mount: MountedSecret | None = None
        self._ctx: SandboxContext | None = None
        self._gateway: Gateway | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self, ctx: SandboxContext) -> None:
        if ctx.kubeconfig is None or "kube" not in ctx.handles:
            raise RuntimeError("the webhook needs the kube component")
        self._ctx, self._loop = ctx, asyncio.get_running_loop()
        count = int(ctx.handles.get("webhook.replicas", self.count))
        install_dispatch(ctx.handles["kube"])  # idempotent: the kube component may have
        admin = ctx.state_dir / "webhook-admin.kubeconfig"
        write_private(admin, ctx.kubeconfig.encode())
        self._gateway = Gateway.from_kubeconfig(str(admin))
        self.objects = chart.objects(ctx.namespace)
        await install_base(self._gateway, self.objects)  # namespace, CRD, RBAC (idempotent)
        await install_webhook(self._gateway, self.objects)  # Service, configuration
        await self.ensure_certificates()  # the hook Job: Secrets and caBundle
        self.mount = MountedSecret(
            ctx.handles["kube"], ctx.namespace, self.objects.webhook_secret, self._tls_dir(ctx)
        )
        self.mount.sync()
        self.mount.start()
        env = self._environment(ctx, self._account_kubeconfig(ctx))
        self.replicas = [
            WebhookReplica(f"webhook-{i}", env, ctx.state_dir / f"webhook-{i}.log")
            for i in range(count)
        ]
        await asyncio.gather(*(r.start() for r in self.replicas))
        await put_endpoints(self._gateway, self.objects, [r.port for r in self.replicas])
        ctx.endpoints[self.name] = self.replicas[0].health_url
        ctx.handles[self.name] = self

    async def stop(self) -> None:
        await asyncio.gather(*(r.stop() for r in self.replicas))
        if self.mount is not None:
            await self.mount.stop()
        if self._gateway is not None:
            self._gateway.close()
            self._gateway = None

    # --- what tests use -------------------------------------------------------------

    async def stop_replicas(self) -> None:
        await asyncio.gather(*(r.stop() for r in self.replicas))

    async def start_replicas(self, wait_ready: bool = True) -> None:
        await asyncio.gather(*(r.start(wait_ready) for r in self.replicas if not r.running))

    async def ensure_certificates(self, overrides: Mapping[str, str] | None = None) -> Outcome:
        """Run the chart's hook Job (``certs.apply.ensure``) against the sandbox."""
        assert self._ctx is not None
        assert self.objects is not None
        server = self._ctx.handles["kube"]
        return await ensure_certificates(server, self.objects, self._ctx.state_dir, overrides)

    async def renew(self) -> KeyPair:
        """Renew the serving certificate as a near-expiry run would; the mount and the
        replicas pick it up. Returns the new pair (from the Secret)."""
        current = self.serving_pair()
        overrides = renewal_overrides(current.not_after, SystemClock().now())
        await self.ensure_certificates(overrides)
        assert self.mount is not None
        self.mount.sync()
        return self.serving_pair()

    def rotate(self) -> KeyPair:
        """``renew`` from another thread than the sandbox's loop (blocking)."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(self.renew(), self._loop).result(30)

    def serving_pair(self) -> KeyPair:
        """The serving certificate and key the Secret holds now."""
        assert self._ctx is not None
        assert self.objects is not None
        server, namespace = self._ctx.handles["kube"], self._ctx.namespace
        data = secret_data(server, namespace, self.objects.webhook_secret)
        return load_pair(data[TLS_CRT], data[TLS_KEY], "serving certificate")

    # --- setup ----------------------------------------------------------------------

    @staticmethod
    def _tls_dir(ctx: SandboxContext) -> Path:
        return ctx.state_dir / "webhook-tls"

    def _environment(self, ctx: SandboxContext, kubeconfig: Path) -> dict[str, str]:
        assert self.mount is not None
        return {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(ROOT),
            "KUBECONFIG": str(kubeconfig),
            "POD_NAMESPACE": ctx.namespace,
            "WEBHOOK_HOST": "127.0.0.1",
            "TLS_CERT_FILE": str(self.mount.cert_file),
            "TLS_KEY_FILE": str(self.mount.key_file),
            "TLS_RELOAD_SECONDS": "0.2",
            **gate_env(ctx),
            **self.extra_env,
            **clock_env(ctx.clock),
        }

    def _account_kubeconfig(self, ctx: SandboxContext) -> Path:
        assert self.objects is not None
        account = self.objects.service_accounts["webhook"]
        path = ctx.state_dir / "webhook.kubeconfig"
        return account_kubeconfig(ctx.handles["kube"], ctx.namespace, account, path)


#: ``CONFIGURATION_NAME`` is what the dispatch reads; re-exported for tests.
__all__ = ["CONFIGURATION_NAME", "WebhookComponent", "WebhookReplica"]
