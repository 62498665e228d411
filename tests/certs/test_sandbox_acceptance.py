"""Issue 8 acceptance 2: ``python -m certs ensure`` against the sandbox, end to end.

The chart's objects go into the Kubernetes emulator (``sandbox.install``), then the
real command runs as a subprocess exactly as the chart's hook Job runs it: the Job's
environment from the render, a token of the chart's ``certs`` service account (so its
RBAC is the chart's). It creates the Secrets and patches the ``caBundle``; the sandbox
webhook then serves the Secret's certificate (mounted kubelet-like) and the emulator's
admission dispatch verifies it with that CA — a GPU pod gets the webhook's answer. A
second run changes nothing (same resourceVersions). A run for which the certificate is
near expiry (renew-before longer than what is left) renews it, and the running webhook
presents the new one on a new TLS handshake without a restart (same pid).
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from certs.plan import CA_CRT, TLS_CRT
from shared.gateway import Gateway
from shared.resources import MUTATING_WEBHOOK_CONFIGURATIONS, PODS, SECRETS
from tests.policy.builders import PodBuilder
from tests.tlskit import presented

pytest.importorskip("sandbox.kube.component")
from sandbox import chart
from sandbox.install import (
    account_kubeconfig,
    certs_environment,
    install_base,
    install_webhook,
    renewal_overrides,
)
from sandbox.kube.component import KubeComponent
from sandbox.reconciler_component import ReconcilerProcess
from sandbox.runner import Sandbox, SandboxContext
from sandbox.scenario import load_scenario
from sandbox.webhook_component import WebhookComponent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
ROOT = Path(__file__).resolve().parents[2]


async def run_certs(env: dict[str, str]) -> tuple[int, str]:
    """``python -m certs ensure`` as the hook Job runs it; exit code and output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "certs",
        "ensure",
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), **env},
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


def der(pem_b64: str) -> bytes:
    cert = x509.load_pem_x509_certificate(base64.b64decode(pem_b64))
    return cert.public_bytes(Encoding.DER)


class World:
    def __init__(self, ctx: SandboxContext, admin: Gateway, objects: chart.ChartObjects) -> None:
        self.ctx, self.admin, self.objects = ctx, admin, objects
        self.namespace = ctx.namespace

    async def secret(self) -> dict[str, Any]:
        return await self.admin.get(SECRETS, self.objects.webhook_secret, self.namespace)

    async def configuration(self) -> dict[str, Any]:
        name = self.objects.webhook_configuration["metadata"]["name"]
        return await self.admin.get(MUTATING_WEBHOOK_CONFIGURATIONS, name)

    async def versions(self) -> list[str]:
        ca_name = self.objects.certs_environment["CERTS_CA_SECRET_NAME"]
        ca = await self.admin.get(SECRETS, ca_name, self.namespace)
        objs = [await self.secret(), ca, await self.configuration()]
        return [o["metadata"]["resourceVersion"] for o in objs]

    async def gpu_pod(self, name: str) -> list[str]:
        """Create a GPU pod (alice holds no booking); the admission warnings."""
        body = PodBuilder(name, "alice").cls("h100").gpus("1").build()
        return (await self.admin.create(PODS, body, "alice")).warnings


def answered(warnings: list[str]) -> bool:
    """Whether the webhook's answer came back: its warning (alice holds no booking);
    a call that failed open (TLS not verified) returns no warning."""
    return any("no reservation" in text for text in warnings)


async def scenario(tmp_path: Path) -> None:
    ctx = SandboxContext(state_dir=tmp_path, scenario=load_scenario())
    kube = KubeComponent()
    await kube.start(ctx)
    assert ctx.kubeconfig is not None
    (tmp_path / "admin.kubeconfig").write_text(ctx.kubeconfig, encoding="utf-8")
    admin = Gateway.from_kubeconfig(str(tmp_path / "admin.kubeconfig"))
    webhook = WebhookComponent()
    try:
        objects = chart.objects(ctx.namespace)
        await install_base(admin, objects)
        await install_webhook(admin, objects)
        await acceptance(World(ctx, admin, objects), webhook)
    finally:
        await webhook.stop()
        admin.close()
        await kube.stop()


async def acceptance(w: World, webhook: WebhookComponent) -> None:
    server = w.ctx.handles["kube"]
    account = w.objects.service_accounts["certs"]
    path = account_kubeconfig(server, w.namespace, account, w.ctx.state_dir / "job.kubeconfig")
    env = certs_environment(w.objects, path)

    # 1. the first run creates the Secrets and sets the caBundle
    code, out = await run_certs(env)
    assert code == 0, out
    secret = await w.secret()
    bundles = [h["clientConfig"]["caBundle"] for h in (await w.configuration())["webhooks"]]
    assert bundles == [secret["data"][CA_CRT]]
    first = await w.versions()

    # 2. the webhook serves the Secret's certificate; the dispatch verifies it with the CA
    await webhook.start(w.ctx)
    assert await w.versions() == first  # the component's own hook-Job run kept everything
    replica = webhook.replicas[0]
    assert await asyncio.to_thread(presented, replica.port) == der(secret["data"][TLS_CRT])
    warnings = await w.gpu_pod("p-1")
    assert answered(warnings), warnings

    # 3. a second run changes nothing
    code, out = await run_certs(env)
    assert code == 0, out
    assert await w.versions() == first

    # 4. near expiry: renewed, and picked up without a restart
    assert replica.proc is not None
    pid = replica.proc.pid
    current = webhook.serving_pair()
    overrides = renewal_overrides(current.not_after, datetime.now(UTC))
    code, out = await run_certs({**env, **overrides})
    assert code == 0, out
    renewed = await w.secret()
    assert renewed["data"][TLS_CRT] != secret["data"][TLS_CRT]
    assert renewed["data"][CA_CRT] == secret["data"][CA_CRT]  # same CA: caBundle kept
    assert (await w.versions())[1:] == first[1:]
    want = der(renewed["data"][TLS_CRT])
    deadline = time.monotonic() + 30  # liveness: the replica rereads its files
    while await asyncio.to_thread(presented, replica.port) != want:
        assert time.monotonic() < deadline, "the webhook still presents the old certificate"
        await asyncio.sleep(0.1)
    assert replica.proc.pid == pid
    assert replica.proc.returncode is None
    warnings = await w.gpu_pod("p-2")
    assert answered(warnings), warnings


def test_certs_ensure_against_the_sandbox(tmp_path: Path) -> None:
    asyncio.run(scenario(tmp_path))


def reconciler_certs_env(namespace: str) -> dict[str, str]:
    """The certificate-check variables the chart gives the reconciler (self-signed)."""
    docs = chart.render(namespace)
    deployment = next(
        d
        for d in docs
        if d["kind"] == "Deployment"
        and d["metadata"]["labels"].get(chart.COMPONENT_LABEL) == "reconciler"
    )
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e["value"] for e in env if e["name"].startswith("CERT") and "value" in e}


async def rotation_scenario(tmp_path: Path) -> None:
    ctx = SandboxContext(state_dir=tmp_path, scenario=load_scenario())
    sandbox = Sandbox(ctx, ["kube", "app", "webhook"])
    await sandbox.start()
    replica: ReconcilerProcess | None = None
    try:
        webhook: WebhookComponent = ctx.handles["webhook"]
        before = webhook.serving_pair()
        env = reconciler_certs_env(ctx.namespace)
        assert env["CERT_CHECK_INTERVAL"] == "3600"
        overrides = renewal_overrides(before.not_after, datetime.now(UTC))
        replica = ReconcilerProcess(ctx, "r0", {**env, **overrides, "CERT_CHECK_INTERVAL": "1"})
        await replica.start()  # under the chart's reconciler account and its RBAC
        deadline = time.monotonic() + 30  # liveness, both steps
        while webhook.serving_pair().certificate == before.certificate:
            assert time.monotonic() < deadline, "the reconciler did not renew the certificate"
            await asyncio.sleep(0.2)
        want = webhook.serving_pair().certificate.public_bytes(Encoding.DER)
        port = webhook.replicas[0].port
        while await asyncio.to_thread(presented, port) != want:
            assert time.monotonic() < deadline, "the webhook still presents the old certificate"
            await asyncio.sleep(0.1)
        assert not [e for e in replica.logs() if e.get("event") == "certs.check_failed"]
    finally:
        if replica is not None:
            await replica.stop()
        await sandbox.stop()


def test_the_reconcilers_check_renews_with_the_charts_rbac(tmp_path: Path) -> None:
    """Self-signed mode: the reconciler leader's periodic check, as the chart configures
    it (only the interval shortened and the lifetimes made due), renews the certificate
    under the reconciler's own service account; the webhook picks it up."""
    asyncio.run(rotation_scenario(tmp_path))
