"""Issue 8 acceptance 2: ``python -m certs ensure`` against the sandbox, end to end.

The chart is installed into the sandbox as ``helm install`` does: its post-install hook
Job runs the real command as a process, from the Job's pod spec, under a token of the
chart's ``certs`` service account (so its RBAC is the chart's). It creates the Secrets
and patches the ``caBundle``; the webhook's pod then serves the Secret's certificate
(its Secret volume) and the emulator's admission dispatch verifies it with that CA — a
GPU pod gets the webhook's answer. A second run (the Job's environment, the same
account) changes nothing (same resourceVersions). A run for which the certificate is
near expiry (renew-before longer than what is left) renews it, and the running webhook
presents the new one on a new TLS handshake without a restart (same pid).
"""

from __future__ import annotations

import asyncio
import base64
import json
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
from shared import vocab
from shared.gateway import Gateway
from shared.resources import MUTATING_WEBHOOK_CONFIGURATIONS, PODS, SECRETS
from tests.policy.builders import PodBuilder
from tests.tlskit import presented

pytest.importorskip("sandbox.kube.component")
from sandbox import chart
from sandbox.install import (
    account_kubeconfig,
    certs_environment,
    renewal_overrides,
)
from sandbox.runner import Sandbox, SandboxContext
from sandbox.scenario import load_scenario

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
        """Create a GPU pod of alice's; the admission warnings."""
        body = PodBuilder(name, "alice").cls("h100").gpus("1").build()
        return (await self.admin.create(PODS, body, "alice")).warnings


def answered(warnings: list[str]) -> bool:
    """Whether the webhook's answer came back: its warning (alice's open booking of the
    default scenario admits the pod); a call that failed open (TLS not verified) returns
    no warning."""
    return any("admitted under reservation" in text for text in warnings)


async def scenario(tmp_path: Path) -> None:
    ctx = SandboxContext(state_dir=tmp_path, scenario=load_scenario())
    sandbox = Sandbox(ctx, ["kube", "cluster", "app", "release"])
    await sandbox.start()  # the chart's post-install hook Job ran `python -m certs ensure`
    assert ctx.kubeconfig is not None
    (tmp_path / "admin.kubeconfig").write_text(ctx.kubeconfig, encoding="utf-8")
    admin = Gateway.from_kubeconfig(str(tmp_path / "admin.kubeconfig"))
    try:
        objects = chart.objects(ctx.namespace, ctx.handles["release"].rendered.values)
        await acceptance(World(ctx, admin, objects), ctx.handles["release"])
    finally:
        admin.close()
        await sandbox.stop()


async def acceptance(w: World, release: Any) -> None:
    server = w.ctx.handles["kube"]
    account = w.objects.service_accounts["certs"]
    path = account_kubeconfig(server, w.namespace, account, w.ctx.state_dir / "job.kubeconfig")
    env = certs_environment(w.objects, path)

    # 1. the hook Job's run created the Secrets and set the caBundle
    secret = await w.secret()
    bundles = [h["clientConfig"]["caBundle"] for h in (await w.configuration())["webhooks"]]
    assert bundles == [secret["data"][CA_CRT]]
    first = await w.versions()

    # 2. the webhook serves the Secret's certificate; the dispatch verifies it with the CA
    (replica,) = await release.replicas("webhook")
    assert await asyncio.to_thread(presented, replica.port, replica.ip) == der(
        secret["data"][TLS_CRT]
    )
    warnings = await w.gpu_pod("p-1")
    assert answered(warnings), warnings

    # 3. a second run changes nothing
    code, out = await run_certs(env)
    assert code == 0, out
    assert await w.versions() == first

    # 4. near expiry: renewed, and picked up without a restart
    pid = replica.pid
    current = release.serving_pair()
    overrides = renewal_overrides(current.not_after, datetime.now(UTC))
    code, out = await run_certs({**env, **overrides})
    assert code == 0, out
    renewed = await w.secret()
    assert renewed["data"][TLS_CRT] != secret["data"][TLS_CRT]
    assert renewed["data"][CA_CRT] == secret["data"][CA_CRT]  # same CA: caBundle kept
    assert (await w.versions())[1:] == first[1:]
    want = der(renewed["data"][TLS_CRT])
    deadline = time.monotonic() + 30  # liveness: the replica rereads its files
    while await asyncio.to_thread(presented, replica.port, replica.ip) != want:
        assert time.monotonic() < deadline, "the webhook still presents the old certificate"
        await asyncio.sleep(0.1)
    (still,) = await release.replicas("webhook")
    assert (still.name, still.pid) == (replica.name, pid)
    assert still.running
    warnings = await w.gpu_pod("p-2")
    assert answered(warnings), warnings


def test_certs_ensure_against_the_sandbox(tmp_path: Path) -> None:
    asyncio.run(scenario(tmp_path))


async def rotation_scenario(tmp_path: Path) -> None:
    ctx = SandboxContext(state_dir=tmp_path, scenario=load_scenario())
    sandbox = Sandbox(ctx, ["kube", "cluster", "app", "release"])
    await sandbox.start()
    try:
        release = ctx.handles["release"]
        before = release.serving_pair()
        reconciler = await release.replicas("reconciler")
        env = reconciler_env(release.rendered.effective)
        assert env["CERT_CHECK_INTERVAL"] == "3600"
        # Only the reconciler's check is made due and frequent (its extraEnv): the
        # certificates Job that runs at the upgrade keeps the chart's lifetimes.
        overrides = {
            **renewal_overrides(before.not_after, datetime.now(UTC)),
            "CERT_CHECK_INTERVAL": "1",
        }
        extra = [{"name": k, "value": v} for k, v in overrides.items()]
        values = tmp_path / "check.yaml"
        values.write_text(json.dumps({"reconciler": {"extraEnv": extra}}), encoding="utf-8")
        await release.upgrade(files=[values])  # rolls the reconciler pod onto the new env
        assert [r.name for r in await release.replicas("reconciler")] != [
            r.name for r in reconciler
        ]
        deadline = time.monotonic() + 30  # liveness, both steps
        while release.serving_pair().certificate == before.certificate:
            assert time.monotonic() < deadline, "the reconciler did not renew the certificate"
            await asyncio.sleep(0.2)
        want = release.serving_pair().certificate.public_bytes(Encoding.DER)
        webhook = (await release.replicas("webhook"))[0]
        while await asyncio.to_thread(presented, webhook.port, webhook.ip) != want:
            assert time.monotonic() < deadline, "the webhook still presents the old certificate"
            await asyncio.sleep(0.1)
        (replica,) = await release.replicas("reconciler")
        lines = replica.log_path.read_text(encoding="utf-8").splitlines()
        events = [json.loads(line).get("event") for line in lines if line.startswith("{")]
        assert "certs.check_failed" not in events
    finally:
        await sandbox.stop()


def reconciler_env(values: dict[str, Any]) -> dict[str, str]:
    """The certificate-check variables the chart gives the reconciler (self-signed)."""
    docs = chart.render(vocab.PRODUCT_NAME, values)
    deployment = next(
        d
        for d in docs
        if d["kind"] == "Deployment"
        and d["metadata"]["labels"].get(chart.COMPONENT_LABEL) == "reconciler"
    )
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e["value"] for e in env if e["name"].startswith("CERT") and "value" in e}


def test_the_reconcilers_check_renews_with_the_charts_rbac(tmp_path: Path) -> None:
    """Self-signed mode: the reconciler leader's periodic check, as the chart configures
    it (only the interval shortened and the lifetimes made due, through the chart's
    ``reconciler.extraEnv``), renews the certificate under the reconciler's own service
    account; the webhook's pods pick it up from their Secret volume."""
    asyncio.run(rotation_scenario(tmp_path))
