"""Webhook dispatch inside the API emulator, driven over HTTP (and by real kubectl).

Skipped only while ``sandbox.kube.component`` cannot be imported.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import shutil
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shared.errors import Conflict, Invalid, ServerError
from shared.gateway import Gateway
from shared.resources import MUTATING_WEBHOOK_CONFIGURATIONS, NAMESPACES, PODS, SERVICES, Resource
from tests.admission.builders import answer, configuration, webhook
from tests.admission.webhook_server import serve_webhook

component = pytest.importorskip("sandbox.kube.component")
runner = pytest.importorskip("sandbox.runner")
install = pytest.importorskip("sandbox.kube.admission.install")

# The emulator currently leaves a server-side connection unclosed after an error
# response (seen with any 4xx/5xx through the gateway; reported to its author): the
# ResourceWarning at garbage collection is not about dispatch, so it is not an error here.
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

ENDPOINTS = Resource("", "v1", "endpoints", "Endpoints")
SERVICE, HOOKS_NS, USER_NS = "hook", "hooks", "team-a"
DNS_NAME = f"{SERVICE}.{HOOKS_NS}.svc"
WARNING = "labelled by the throwaway webhook"


@dataclass
class Emulator:
    gateway: Gateway
    kubeconfig: Path
    kube: Any  # the KubeComponent (its ``stop`` may be called twice)

    async def register(self, ports: list[int], ca_bundle: str, **fields: Any) -> None:
        """Service + Endpoints for ``ports`` and the configuration pointing at them."""
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": HOOKS_NS},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]},
        }
        subsets = [
            {"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": p}]}
            for p in ports
        ]
        endpoints = {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": SERVICE, "namespace": HOOKS_NS},
            "subsets": subsets,
        }
        await self.gateway.create(SERVICES, service, HOOKS_NS)
        await self.gateway.create(ENDPOINTS, endpoints, HOOKS_NS)
        client = {
            "service": {"namespace": HOOKS_NS, "name": SERVICE, "path": "/mutate"},
            "caBundle": ca_bundle,
        }
        raw = webhook("throwaway.example.com", clientConfig=client, timeoutSeconds=5, **fields)
        await self.gateway.create(MUTATING_WEBHOOK_CONFIGURATIONS, configuration("throwaway", raw))

    async def create_pod(self, **meta: Any) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "job-", **meta},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }
        return (await self.gateway.create(PODS, body, USER_NS)).body


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    ctx = runner.SandboxContext(state_dir=tmp_path, scenario={})
    kube = component.KubeComponent()
    await kube.start(ctx)
    install.install(ctx.handles["kube"])
    assert ctx.kubeconfig is not None
    path = tmp_path / "kubeconfig"
    path.write_text(ctx.kubeconfig, encoding="utf-8")
    gateway = Gateway.from_kubeconfig(str(path))
    try:
        for name in (HOOKS_NS, USER_NS):
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            with contextlib.suppress(Conflict):
                await gateway.create(NAMESPACES, body)
        yield Emulator(gateway, path, kube)
    finally:
        gateway.close()
        await kube.stop()
        gc.collect()  # surface leaked sockets now, under this module's warning filter


def label(review: dict[str, Any]) -> dict[str, Any]:
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}]
    return answer(review, patch=ops, warnings=[WARNING])


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def kubectl(kubeconfig: Path, *args: str, stdin: str = "") -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        "kubectl",
        f"--kubeconfig={kubeconfig}",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), 30)
    return int(process.returncode or 0), out.decode(), err.decode()


POD_YAML = f"""
apiVersion: v1
kind: Pod
metadata:
  generateName: job-
  namespace: {USER_NS}
spec:
  containers:
  - name: main
    image: busybox
"""


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_sees_the_warning_and_the_webhook_a_correct_review(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Rule: the webhook gets a correct AdmissionReview (no name for generateName, no uid,
    oldObject null), its patch is applied and its warning reaches kubectl as a Warning header."""
    with serve_webhook(tmp_path, [DNS_NAME], label) as hook:
        await emulator.register([hook.port], hook.ca_bundle)
        code, out, err = await kubectl(emulator.kubeconfig, "create", "-f", "-", stdin=POD_YAML)
    assert code == 0, err
    assert f"Warning: {WARNING}" in err
    name = out.split()[0].split("/")[-1]
    assert name.startswith("job-")
    [review] = hook.reviews
    check_create_review(review)
    # read in-process: kubectl can take longer than the emulator keeps the gateway's idle
    # connection open (5 s), and the gateway does not retry a GET on a closed one
    stored = emulator.kube.server.store.get("", "pods", USER_NS, name)
    assert stored["metadata"]["labels"] == {"mutated": "yes"}


def check_create_review(review: dict[str, Any]) -> None:
    request = review["request"]
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    assert "name" not in request
    assert request["namespace"] == USER_NS
    assert request["operation"] == "CREATE"
    assert request["oldObject"] is None
    assert request["dryRun"] is False
    assert request["options"]["kind"] == "CreateOptions"
    assert request["userInfo"]["username"]
    meta = request["object"]["metadata"]
    assert meta["generateName"] == "job-"
    assert not meta.get("uid")
    assert not meta.get("name")


async def test_a_down_webhook_under_ignore_lets_the_pod_through(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Rule: with failurePolicy Ignore a down webhook lets the pod through unmutated."""
    with serve_webhook(tmp_path, [DNS_NAME], label) as hook:
        bundle = hook.ca_bundle
    await emulator.register([closed_port()], bundle, failurePolicy="Ignore")
    pod = await emulator.create_pod()
    assert "mutated" not in (pod["metadata"].get("labels") or {})


async def test_a_down_webhook_under_fail_fails_the_create(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Rule: with failurePolicy Fail a down webhook fails the create with 500 ``failed calling
    webhook "<name>"``."""
    with serve_webhook(tmp_path, [DNS_NAME], label) as hook:
        bundle = hook.ca_bundle
    await emulator.register([closed_port()], bundle)
    with pytest.raises(ServerError) as info:
        await emulator.create_pod()
    assert info.value.code == 500
    assert 'failed calling webhook "throwaway.example.com"' in info.value.message


async def test_an_unappliable_patch_fails_with_500_even_under_ignore(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Rule: over HTTP, an unappliable patch fails the create with 500 even under Ignore."""

    def bad_patch(review: dict[str, Any]) -> dict[str, Any]:
        return answer(
            review, patch=[{"op": "add", "path": "/metadata/annotations/x", "value": "1"}]
        )

    with serve_webhook(tmp_path, [DNS_NAME], bad_patch) as hook:
        await emulator.register([hook.port], hook.ca_bundle, failurePolicy="Ignore")
        with pytest.raises(ServerError) as info:
            await emulator.create_pod()
    assert info.value.code == 500
    assert "doc is missing path" in info.value.message
    assert len(hook.reviews) == 1


async def test_a_certificate_not_matching_the_service_name_counts_as_down(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Rule: a serving certificate without the ``<svc>.<ns>.svc`` SAN is a failed call (down)."""
    with serve_webhook(tmp_path, ["elsewhere.hooks.svc"], label) as hook:
        await emulator.register([hook.port], hook.ca_bundle, failurePolicy="Ignore")
        pod = await emulator.create_pod()
    assert "mutated" not in (pod["metadata"].get("labels") or {})
    assert hook.reviews == []


async def test_a_configuration_with_unbound_cel_is_422(emulator: Emulator) -> None:
    """Rule: a configuration whose matchCondition uses an unknown variable is refused with 422 at
    creation."""
    conditions = [{"name": "bad", "expression": "params.gpu == 1"}]
    raw = webhook("cel.example.com", matchConditions=conditions)
    with pytest.raises(Invalid) as info:
        await emulator.gateway.create(MUTATING_WEBHOOK_CONFIGURATIONS, configuration("bad", raw))
    assert "webhooks[0].matchConditions[0].expression" in info.value.message


async def test_creates_share_one_kept_alive_connection_closed_when_the_server_stops(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Rule: kube-apiserver keeps one client per webhook client configuration and its
    connections alive; stopping the emulator closes them."""
    server = emulator.kube.server
    dispatcher = install.install(server)
    with serve_webhook(tmp_path, [DNS_NAME], label) as hook:
        await emulator.register([hook.port], hook.ca_bundle)
        pods = [await emulator.create_pod() for _ in range(3)]
        assert dispatcher.http.open_clients == 1
        await emulator.kube.stop()
        assert dispatcher.http.open_clients == 0
    assert all(p["metadata"]["labels"] == {"mutated": "yes"} for p in pods)
    assert hook.connections == 1
