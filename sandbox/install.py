"""Installing the chart into the sandbox's Kubernetes emulator, as ``helm install`` would.

One mechanism for every sandbox component. What is installed comes from
``sandbox.chart`` (the chart rendered with Helm's own engine); this module only puts it
into the emulator and does locally what a cluster does on its own:

- ``install_base``: the controller namespace, the CRDs of ``crds/``, and every
  component's ServiceAccount, Role/ClusterRole and bindings — verbatim;
- ``install_webhook``: the webhook Service and the MutatingWebhookConfiguration —
  verbatim, so without a ``caBundle`` (as on a cluster, ``python -m certs ensure`` sets
  it: ``ensure_certificates``);
- ``put_endpoints``: the Endpoints behind the Service. On a cluster the endpoints
  controller derives them from the webhook pods; in the sandbox the replicas are
  loopback processes, so the sandbox writes one subset per replica port;
- ``ensure_certificates``: what the chart's self-signed hook Job does — ``certs.apply``
  with the Job's own environment, under the ``certs`` service account's token;
- ``MountedSecret``: what the kubelet does for a Secret volume — keeps ``tls.crt`` and
  ``tls.key`` files equal to the Secret's data, so a renewed Secret reaches the webhook
  without a restart;
- ``account_kubeconfig``: a kubeconfig holding a service account's token, so a
  component runs with exactly the RBAC the chart grants it.

The two substitutions (``caBundle``, Endpoints) are the only differences from the
render; ``tests/chart/test_sandbox_chart.py`` checks the running sandbox against it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from certs.apply import Outcome, ensure
from certs.plan import TLS_CRT, TLS_KEY
from certs.settings import read_ensure
from sandbox.chart import ChartObjects
from sandbox.kube.server import KubeServer
from shared.clock import Clock, SystemClock
from shared.errors import Conflict, NotFound
from shared.gateway import Gateway
from shared.resources import (
    CRDS,
    GPU_RESERVATIONS,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    SECRETS,
    SERVICEACCOUNTS,
    SERVICES,
    Resource,
)

Obj = dict[str, Any]
_RBAC = "rbac.authorization.k8s.io"
ENDPOINTS = Resource("", "v1", "endpoints", "Endpoints")
#: The resource of every kind the sandbox installs from the chart.
RESOURCES: Mapping[str, Resource] = {
    "Namespace": NAMESPACES,
    "CustomResourceDefinition": CRDS,
    "ServiceAccount": SERVICEACCOUNTS,
    "Role": Resource(_RBAC, "v1", "roles", "Role"),
    "RoleBinding": Resource(_RBAC, "v1", "rolebindings", "RoleBinding"),
    "ClusterRole": Resource(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False),
    "ClusterRoleBinding": Resource(
        _RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
    ),
    "Service": SERVICES,
    "Endpoints": ENDPOINTS,
    "MutatingWebhookConfiguration": MUTATING_WEBHOOK_CONFIGURATIONS,
}
#: The Service port the API server calls (the chart's ``https`` port).
WEBHOOK_PORT_NAME = "https"
#: How often the sandbox's "kubelet" looks at a mounted Secret (seconds).
MOUNT_SYNC_SECONDS = 0.1


async def put(gateway: Gateway, body: Obj) -> None:
    """Create ``body``, or bring the live object to it as ``helm upgrade`` would: no
    write when the live object already carries every field the chart sets; else a
    replace that keeps what others set on fields the chart leaves out (the caBundle)."""
    res = RESOURCES[body["kind"]]
    name = body["metadata"]["name"]
    namespace = body["metadata"].get("namespace") if res.namespaced else None
    try:
        await gateway.create(res, body, namespace)
        return
    except Conflict:
        pass
    with contextlib.suppress(NotFound):
        current = await gateway.get(res, name, namespace)
        if covers(body, current):
            return
        version = current["metadata"]["resourceVersion"]
        body = _keep_ca_bundle(body, current)
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
    await gateway.replace(res, name, body, namespace)


def covers(rendered: Any, live: Any) -> bool:
    """Whether ``live`` holds every field ``rendered`` sets, with the same value."""
    if isinstance(rendered, dict) and isinstance(live, dict):
        return all(covers(value, live.get(key)) for key, value in rendered.items())
    if isinstance(rendered, list) and isinstance(live, list) and len(rendered) == len(live):
        return all(covers(r, x) for r, x in zip(rendered, live, strict=True))
    return bool(rendered == live)


def _keep_ca_bundle(body: Obj, live: Obj) -> Obj:
    """A webhook configuration keeps the live caBundle of each webhook it names."""
    if body["kind"] != "MutatingWebhookConfiguration":
        return body
    bundles = {
        hook.get("name"): (hook.get("clientConfig") or {}).get("caBundle")
        for hook in live.get("webhooks") or []
    }
    out = copy.deepcopy(body)
    for hook in out.get("webhooks") or []:
        if bundles.get(hook.get("name")):
            hook.setdefault("clientConfig", {})["caBundle"] = bundles[hook["name"]]
    return out


async def install_base(gateway: Gateway, objects: ChartObjects) -> None:
    """Namespace, CRDs and every component's RBAC; waits until GPUReservations are served."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": objects.namespace}}
    with contextlib.suppress(Conflict):  # the namespace is not the chart's (helm -n)
        await gateway.create(NAMESPACES, namespace)
    for obj in objects.crds:
        with contextlib.suppress(Conflict):  # helm never upgrades crds/ either
            await gateway.create(CRDS, obj)
    for obj in objects.rbac_objects():
        await put(gateway, obj)
    await _wait_served(gateway, objects.namespace)


async def _wait_served(gateway: Gateway, namespace: str) -> None:
    for _ in range(100):
        try:
            await gateway.list_all(GPU_RESERVATIONS, namespace)
            return
        except Exception:
            await asyncio.sleep(0.05)
    raise RuntimeError("the emulator does not serve GPUReservations")


async def install_webhook(gateway: Gateway, objects: ChartObjects) -> None:
    """The webhook Service and the MutatingWebhookConfiguration, as rendered."""
    await put(gateway, objects.webhook_service)
    await put(gateway, objects.webhook_configuration)


def endpoints(service: Obj, ports: list[int]) -> Obj:
    """Endpoints for ``service``: one subset per loopback replica port."""
    subsets = [
        {"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": WEBHOOK_PORT_NAME, "port": port}]}
        for port in ports
    ]
    meta = service["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "subsets": subsets,
    }


async def put_endpoints(gateway: Gateway, objects: ChartObjects, ports: list[int]) -> None:
    """Point the webhook Service at the replicas' ports."""
    await put(gateway, endpoints(objects.webhook_service, ports))


def write_private(path: Path, content: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` atomically (write beside it, then rename)."""
    scratch = path.with_name(f".{path.name}.tmp")
    scratch.write_bytes(content)
    scratch.chmod(mode)
    os.replace(scratch, path)


def account_kubeconfig(server: KubeServer, namespace: str, account: str, path: Path) -> Path:
    """Write a kubeconfig with a token of service account ``<namespace>/<account>``."""
    token = server.service_account_token(namespace, account)
    write_private(path, server.kubeconfig(token=token, user=account).encode())
    return path


def certs_environment(
    objects: ChartObjects, kubeconfig: Path, overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The hook Job's environment, pointed at the sandbox (``POD_NAMESPACE`` comes from
    the downward API on a cluster)."""
    if not objects.certs_environment:
        raise RuntimeError("the chart renders no certs hook Job (cert-manager mode)")
    return {
        **objects.certs_environment,
        "POD_NAMESPACE": objects.namespace,
        "KUBECONFIG": str(kubeconfig),
        **(overrides or {}),
    }


async def ensure_certificates(
    server: KubeServer,
    objects: ChartObjects,
    state_dir: Path,
    overrides: Mapping[str, str] | None = None,
    clock: Clock | None = None,
) -> Outcome:
    """Run what the hook Job runs (``certs.apply.ensure``) under the certs account."""
    account = objects.service_accounts["certs"]
    path = account_kubeconfig(server, objects.namespace, account, state_dir / "certs.kubeconfig")
    settings = read_ensure(certs_environment(objects, path, overrides))
    gateway = Gateway.from_kubeconfig(str(path))
    try:
        return await ensure(gateway, settings.target, settings.policy, clock or SystemClock())
    finally:
        gateway.close()


def renewal_overrides(not_after: datetime, now: datetime) -> dict[str, str]:
    """Lifetimes that make the serving certificate ending at ``not_after`` due now
    (renew-before longer than what is left) and keep the CA."""
    renew = (not_after - now).days + 2
    return {"CERTS_RENEW_BEFORE_DAYS": str(renew), "CERTS_VALIDITY_DAYS": str(renew + 1)}


def secret_data(server: KubeServer, namespace: str, name: str) -> dict[str, bytes]:
    """The decoded data of a stored Secret (read in-process); ``LookupError`` if absent."""
    stored = server.get_object(SECRETS, name, namespace)
    if stored is None:
        raise LookupError(f"Secret {namespace}/{name} does not exist")
    return {k: base64.b64decode(v) for k, v in (stored.get("data") or {}).items()}


class MountedSecret:
    """The kubelet's part: files ``tls.crt``/``tls.key`` that follow a Secret."""

    def __init__(self, server: KubeServer, namespace: str, name: str, directory: Path) -> None:
        self.server, self.namespace, self.name = server, namespace, name
        self.directory = directory
        self.cert_file = directory / TLS_CRT
        self.key_file = directory / TLS_KEY
        self._seen: dict[str, str] | None = None
        self._task: asyncio.Task[None] | None = None

    def sync(self) -> bool:
        """Write the files if the Secret changed; whether it wrote."""
        secret = self.server.get_object(SECRETS, self.name, self.namespace)
        data = {k: str(v) for k, v in ((secret or {}).get("data") or {}).items()}
        if secret is None or data == self._seen or not {TLS_CRT, TLS_KEY} <= set(data):
            return False
        self.directory.mkdir(parents=True, exist_ok=True)
        # key first: the webhook's reloader waits until the pair matches
        write_private(self.key_file, base64.b64decode(data[TLS_KEY]))
        write_private(self.cert_file, base64.b64decode(data[TLS_CRT]), 0o644)
        self._seen = data
        return True

    def start(self) -> None:
        """Keep syncing in the background."""
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            self.sync()
            await asyncio.sleep(MOUNT_SYNC_SECONDS)
