"""``certs.apply.ensure`` against the sandbox's Kubernetes emulator, through the gateway.

Skipped only while ``sandbox.kube.component`` cannot be imported (the emulator is
built in parallel); once it exists this runs against the real HTTP API it serves.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from certs.apply import SECRET_TYPE_TLS, Outcome, Target, ensure
from certs.plan import CA_CRT, Action, Policy
from shared.clock import ManualClock, SystemClock
from shared.errors import Conflict
from shared.gateway import Gateway
from shared.resources import MUTATING_WEBHOOK_CONFIGURATIONS, NAMESPACES, SECRETS

component = pytest.importorskip("sandbox.kube.component")
runner = pytest.importorskip("sandbox.runner")

SERVICE = "webhook"
CONFIGURATION = "certs-integration"


def webhook_configuration(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": MUTATING_WEBHOOK_CONFIGURATIONS.api_version,
        "kind": MUTATING_WEBHOOK_CONFIGURATIONS.kind,
        "metadata": {"name": CONFIGURATION},
        "webhooks": [
            {
                "name": "certs.integration.example.com",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "clientConfig": {
                    "service": {"name": SERVICE, "namespace": namespace, "path": "/mutate"}
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["configmaps"],
                    }
                ],
            }
        ],
    }


@asynccontextmanager
async def emulator(tmp_path: Path) -> AsyncIterator[tuple[Gateway, str]]:
    ctx = runner.SandboxContext(state_dir=tmp_path, scenario={})
    kube = component.KubeComponent()
    await kube.start(ctx)
    assert ctx.kubeconfig is not None
    path = tmp_path / "kubeconfig"
    path.write_text(ctx.kubeconfig, encoding="utf-8")
    gateway = Gateway.from_kubeconfig(str(path))
    try:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ctx.namespace}}
        with contextlib.suppress(Conflict):  # the emulator may have made it already
            await gateway.create(NAMESPACES, namespace)
        await gateway.create(MUTATING_WEBHOOK_CONFIGURATIONS, webhook_configuration(ctx.namespace))
        yield gateway, ctx.namespace
    finally:
        gateway.close()
        await kube.stop()


def scenario(tmp_path: Path, body: Callable[[Gateway, str], Awaitable[None]]) -> None:
    async def main() -> None:
        async with emulator(tmp_path) as (gateway, namespace):
            await body(gateway, namespace)

    asyncio.run(main())


async def versions(gateway: Gateway, target: Target) -> list[str]:
    objects = [
        await gateway.get(SECRETS, target.secret, target.namespace),
        await gateway.get(SECRETS, target.ca_secret, target.namespace),
        await gateway.get(MUTATING_WEBHOOK_CONFIGURATIONS, CONFIGURATION),
    ]
    return [o["metadata"]["resourceVersion"] for o in objects]


def test_ensure_against_the_emulator(tmp_path: Path) -> None:
    async def body(gateway: Gateway, namespace: str) -> None:
        target = Target(namespace, SERVICE, "webhook-tls", "webhook-tls-ca", CONFIGURATION)
        start = SystemClock().now()

        async def run(days_later: int) -> Outcome:
            clock = ManualClock(start + timedelta(days=days_later))
            return await ensure(gateway, target, Policy(), clock)

        first = await run(0)
        assert first.action is Action.RENEW_ALL
        stored = await gateway.get(SECRETS, target.secret, namespace)
        assert stored["type"] == SECRET_TYPE_TLS
        mwc = await gateway.get(MUTATING_WEBHOOK_CONFIGURATIONS, CONFIGURATION)
        assert mwc["webhooks"][0]["clientConfig"]["caBundle"] == stored["data"][CA_CRT]
        assert base64.b64decode(stored["data"][CA_CRT]).startswith(b"-----BEGIN CERTIFICATE")

        before = await versions(gateway, target)
        second = await run(1)
        assert (second.action, second.changed) == (Action.KEEP, False)
        assert await versions(gateway, target) == before

        renewed = await run(340)
        assert renewed.action is Action.RENEW_SERVING
        assert renewed.fingerprint != first.fingerprint
        after = await versions(gateway, target)
        assert after[0] != before[0]
        assert after[1:] == before[1:]  # same CA: CA Secret and caBundle untouched

    scenario(tmp_path, body)
