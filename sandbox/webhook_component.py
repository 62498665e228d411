"""``WebhookComponent``: N replicas of the real webhook behind one Service.

What it sets up in the Kubernetes emulator, as a cluster operator would with the chart:

- a CA and a serving certificate for ``<service>.<namespace>.svc`` (``certs.issue``),
  as files in ``<state-dir>/webhook-tls/`` that every replica reads and reloads;
- the ``gpu-reservation-webhook`` ServiceAccount with a Role allowing what the webhook
  needs (read GPUReservations, write their status) and a token minted for it; each
  replica runs ``python -m webhook`` as that account (its own kubeconfig);
- a Service with port 443 (``https``) and an Endpoints object with one subset per
  replica on 127.0.0.1 — the dispatch resolves the Service to them round-robin;
- the ``MutatingWebhookConfiguration`` from ``webhook.configuration`` (the chart's
  values) with the CA as ``caBundle``.

``ctx.handles["webhook"]`` is this component: tests stop and start replicas and
rotate the certificate through it. ``ctx.handles["webhook.replicas"]`` (set by
``--webhook-replicas``) chooses how many replicas start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import httpx

from certs import issue
from certs.pem import KeyPair
from sandbox.kube.admission.install import install as install_dispatch
from sandbox.kube.auth import service_account_user
from sandbox.reconciler_component import ROOT, free_port, install
from sandbox.runner import SandboxContext
from shared import vocab
from shared.clock import ScaledClock, format_utc
from shared.errors import Conflict, NotFound
from shared.gateway import Gateway
from shared.resources import (
    MUTATING_WEBHOOK_CONFIGURATIONS,
    SERVICEACCOUNTS,
    SERVICES,
    Resource,
)
from webhook.configuration import CONFIGURATION_NAME, SERVICE_NAME, configuration

ENDPOINTS = Resource("", "v1", "endpoints", "Endpoints")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
ACCOUNT = f"{vocab.PRODUCT_NAME}-webhook"
PORT_NAME = "https"
START_TIMEOUT_S = 20.0


def _write(path: Path, content: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` atomically (write beside it, then rename)."""
    scratch = path.with_name(f".{path.name}.tmp")
    scratch.write_bytes(content)
    scratch.chmod(mode)
    os.replace(scratch, path)


class Certificates:
    """The sandbox CA and the serving pair, as files."""

    def __init__(self, directory: Path, namespace: str) -> None:
        self.directory = directory
        self.names = issue.service_dns_names(SERVICE_NAME, namespace)
        self.ca: KeyPair = issue.issue_ca(datetime.now(UTC))
        self.cert_file = directory / "tls.crt"
        self.key_file = directory / "tls.key"
        directory.mkdir(parents=True, exist_ok=True)
        _write(directory / "ca.crt", self.ca.cert_pem, 0o644)
        self.rotate()

    def rotate(self) -> KeyPair:
        """Issue a new serving pair and write it (key first; the reloader waits for both)."""
        pair = issue.issue_serving(self.ca, self.names, datetime.now(UTC))
        _write(self.key_file, pair.key_pem)
        _write(self.cert_file, pair.cert_pem, 0o644)
        return pair


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
                await asyncio.wait_for(self.proc.wait(), timeout_s)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


def _rbac(namespace: str) -> list[tuple[Resource, dict[str, Any]]]:
    meta = {"name": ACCOUNT, "namespace": namespace}
    rules = [
        {
            "apiGroups": [vocab.CRD_GROUP],
            "resources": [vocab.CRD_PLURAL],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": [vocab.CRD_GROUP],
            "resources": [f"{vocab.CRD_PLURAL}/status"],
            "verbs": ["get", "update", "patch"],
        },
    ]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
    }
    return [
        (SERVICEACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}),
        (
            ROLES,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": meta,
                "rules": rules,
            },
        ),
        (ROLE_BINDINGS, binding),
    ]


def _service(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE_NAME, "namespace": namespace},
        "spec": {"ports": [{"name": PORT_NAME, "port": 443, "targetPort": 8443}]},
    }


def _endpoints(namespace: str, replicas: list[WebhookReplica]) -> dict[str, Any]:
    subsets = [
        {"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": PORT_NAME, "port": r.port}]}
        for r in replicas
    ]
    return {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": SERVICE_NAME, "namespace": namespace},
        "subsets": subsets,
    }


class WebhookComponent:
    """The sandbox's admission webhook: N replicas behind one Service."""

    name = "webhook"

    def __init__(self, replicas: int = 1, extra_env: dict[str, str] | None = None) -> None:
        self.count = replicas
        self.extra_env = dict(extra_env or {})
        self.replicas: list[WebhookReplica] = []
        self.certificates: Certificates | None = None
        self._gateway: Gateway | None = None

    async def start(self, ctx: SandboxContext) -> None:
        if ctx.kubeconfig is None or "kube" not in ctx.handles:
            raise RuntimeError("the webhook needs the kube component")
        count = int(ctx.handles.get("webhook.replicas", self.count))
        install_dispatch(ctx.handles["kube"])  # idempotent: the kube component may have
        admin = ctx.state_dir / "webhook-admin.kubeconfig"
        _write(admin, ctx.kubeconfig.encode())
        await install(admin, ctx.namespace)  # namespace and CRD (idempotent)
        self._gateway = Gateway.from_kubeconfig(str(admin))
        self.certificates = Certificates(ctx.state_dir / "webhook-tls", ctx.namespace)
        await self._apply_rbac(ctx.namespace)
        env = self._environment(ctx, self._account_kubeconfig(ctx))
        self.replicas = [
            WebhookReplica(f"webhook-{i}", env, ctx.state_dir / f"webhook-{i}.log")
            for i in range(count)
        ]
        await asyncio.gather(*(r.start() for r in self.replicas))
        await self._register(ctx.namespace)
        ctx.endpoints[self.name] = self.replicas[0].health_url
        ctx.handles[self.name] = self

    async def stop(self) -> None:
        await asyncio.gather(*(r.stop() for r in self.replicas))
        if self._gateway is not None:
            self._gateway.close()
            self._gateway = None

    # --- what tests use -------------------------------------------------------------

    async def stop_replicas(self) -> None:
        await asyncio.gather(*(r.stop() for r in self.replicas))

    async def start_replicas(self, wait_ready: bool = True) -> None:
        await asyncio.gather(*(r.start(wait_ready) for r in self.replicas if not r.running))

    def rotate(self) -> KeyPair:
        """Issue and write a new serving certificate (replicas reload it)."""
        assert self.certificates is not None
        return self.certificates.rotate()

    # --- setup ----------------------------------------------------------------------

    def _environment(self, ctx: SandboxContext, kubeconfig: Path) -> dict[str, str]:
        assert self.certificates is not None
        env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(ROOT),
            "KUBECONFIG": str(kubeconfig),
            "POD_NAMESPACE": ctx.namespace,
            "WEBHOOK_HOST": "127.0.0.1",
            "TLS_CERT_FILE": str(self.certificates.cert_file),
            "TLS_KEY_FILE": str(self.certificates.key_file),
            "TLS_RELOAD_SECONDS": "0.2",
            **self.extra_env,
        }
        if isinstance(ctx.clock, ScaledClock):
            env["CLOCK_FACTOR"] = repr(ctx.clock.factor)
            env["CLOCK_EPOCH"] = format_utc(ctx.clock.epoch)
            env["CLOCK_STARTED_AT"] = repr(ctx.clock.started_at)
        return env

    def _account_kubeconfig(self, ctx: SandboxContext) -> Path:
        assert ctx.kubeconfig is not None
        username, groups = service_account_user(ctx.namespace, ACCOUNT)
        kube = ctx.handles["kube"]
        token = kube.mint_token(username, groups)
        path = ctx.state_dir / "webhook.kubeconfig"
        _write(path, str(kube.kubeconfig(token=token, user=ACCOUNT)).encode())
        return path

    async def _apply_rbac(self, namespace: str) -> None:
        for res, body in _rbac(namespace):
            await self._put(res, body, namespace)

    async def _register(self, namespace: str) -> None:
        assert self.certificates is not None
        await self._put(SERVICES, _service(namespace), namespace)
        await self._put(ENDPOINTS, _endpoints(namespace, self.replicas), namespace)
        config = configuration(namespace, self.certificates.ca.cert_pem)
        await self._put(MUTATING_WEBHOOK_CONFIGURATIONS, config, None)

    async def _put(self, res: Resource, body: dict[str, Any], namespace: str | None) -> None:
        """Create, or replace what is there (keeping its resourceVersion)."""
        assert self._gateway is not None
        try:
            await self._gateway.create(res, body, namespace)
        except Conflict:
            name = body["metadata"]["name"]
            with contextlib.suppress(NotFound):
                current = await self._gateway.get(res, name, namespace)
                body = {
                    **body,
                    "metadata": {
                        **body["metadata"],
                        "resourceVersion": current["metadata"]["resourceVersion"],
                    },
                }
            await self._gateway.replace(res, name, body, namespace)


#: ``CONFIGURATION_NAME`` is what the dispatch reads; re-exported for tests.
__all__ = ["CONFIGURATION_NAME", "WebhookComponent", "WebhookReplica"]
