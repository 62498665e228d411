"""``ReleaseComponent``: the chart installed into the sandbox as an operator installs it.

Before the release, what docs/install.md asks an operator to do and what a cluster's
operators provide: the release namespace; the reservation app's ``read_write`` key in
the Secret the values name (``reservationApi.existingSecret``); the inbound token in
``inboundApi.tokenSecret``; the CRDs of prometheus-operator and cert-manager and the
built-in kinds the emulator lacks (``sandbox.operators``). Then ``helm install`` of
the chart rendered with the values layers (``sandbox.values``: the sandbox's file, the
computed layer, the user's ``--values``/``--set`` from ``ctx.handles["release.user"]``),
applied by ``sandbox.apply``.

Until the process kubelet runs the chart's pods (``ctx.handles["processes"]``), the
webhook and reconciler processes are started by the sandbox's own components, and the
release withholds the kinds whose pods those components stand in for: Deployments and
the certificates hook Job. The record keeps the withheld kinds, so an upgrade withholds
them too.
"""

from __future__ import annotations

import base64
import contextlib
import json
from pathlib import Path
from typing import Any

from sandbox import release as rel
from sandbox.apply import Applier, wait_available
from sandbox.chart import COMPONENT_LABEL
from sandbox.install import write_private
from sandbox.kube.seed import node_object
from sandbox.operators import operator_crds, serve_builtins
from sandbox.runner import SandboxContext
from sandbox.values import Layers, Values, sandbox_values, user_layers
from shared import vocab
from shared.clock import SystemClock, format_utc
from shared.errors import Conflict
from shared.gateway import Gateway
from shared.resources import CRDS, NAMESPACES, NODES, PODS, SECRETS

#: Kinds withheld while the sandbox's own components run our processes.
WITHOUT_PROCESSES = frozenset({"Deployment", "Job"})
#: The app URL rendered when the sandbox runs without the app emulator.
NO_APP_URL = "http://127.0.0.1:9"
ADMIN_KUBECONFIG = "release-admin.kubeconfig"
#: Seconds the install waits for every Deployment to be available.
ROLLOUT_TIMEOUT_S = 90.0

#: The sandbox's node for the release's pods.
SYSTEM_NODE = "system-1"


def computed(ctx: SandboxContext, sandbox: Values) -> Values:
    """The values only a running sandbox knows (kept small): the app's URL and a
    scheduling gate other than ``sandbox/values.yaml``'s. (A scaled clock reaches the
    processes from the process kubelet, as it does every local process.)"""
    out: Values = {"reservationApi": {"url": ctx.endpoints.get("app", NO_APP_URL)}}
    gate = ctx.scheduling_gate or ""
    if gate != (sandbox.get("matching") or {}).get("podSchedulingGateName", ""):
        out["matching"] = {"podSchedulingGateName": gate}
    return out


def layers_of(ctx: SandboxContext) -> Layers:
    """The release's values layers for ``ctx``."""
    files, sets = ctx.handles.get("release.user", ((), ()))
    own = sandbox_values()
    return Layers(own, computed(ctx, own), tuple(files), tuple(sets))


def _secret(name: str, namespace: str, key: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace},
        "data": {key: base64.b64encode(value.encode()).decode()},
    }


class ReleaseComponent:
    """Installs the chart (``ctx.handles["release"]`` is this component)."""

    name = "release"

    def __init__(self) -> None:
        self.gateway: Gateway | None = None
        self.applier: Applier | None = None
        self.record: rel.Record | None = None
        self.rendered: rel.Rendered | None = None

    async def start(self, ctx: SandboxContext) -> None:
        if ctx.kubeconfig is None or "kube" not in ctx.handles:
            raise RuntimeError("the release needs the kube component")
        admin = ctx.state_dir / ADMIN_KUBECONFIG
        write_private(admin, ctx.kubeconfig.encode())
        self.gateway = Gateway.from_kubeconfig(str(admin))
        layers = layers_of(ctx)
        rendered = rel.render(layers, ctx.namespace)  # RenderError: a ValueError
        serve_builtins(ctx.handles["kube"])
        await self._system_node(ctx)
        for crd in operator_crds():
            with contextlib.suppress(Conflict):
                await self.gateway.create(CRDS, crd)
        with contextlib.suppress(Conflict):
            await self.gateway.create(NAMESPACES, {"metadata": {"name": ctx.namespace}})
        await self._secrets(ctx, rendered.effective)
        self.applier = Applier(self.gateway, ctx.namespace, now=_now)
        withheld = frozenset() if "processes" in ctx.handles else WITHOUT_PROCESSES
        self.record = await self.applier.install(rendered, layers, withheld)
        self.rendered = rendered
        ctx.handles[self.name] = self
        if not withheld:
            # docs/install.md: no --wait on a self-signed install; `kubectl rollout
            # status` after it.
            await wait_available(self.gateway, rendered, ctx.namespace, ROLLOUT_TIMEOUT_S)
            await self._publish(ctx, rendered.effective)

    async def _publish(self, ctx: SandboxContext, values: Values) -> None:
        """``ctx.endpoints`` of a ready webhook and reconciler pod (pod IP and port)."""
        ports = {
            "webhook": int(values["webhook"]["healthPort"]),
            "reconciler": int(values["reconciler"]["httpPort"]),
        }
        for component, port in ports.items():
            for pod in await self.pods(ctx.namespace, component):
                ip = (pod.get("status") or {}).get("podIP")
                if ip and _ready(pod):
                    ctx.endpoints[component] = f"http://{ip}:{port}"
                    break

    async def pods(self, namespace: str, component: str) -> list[dict[str, Any]]:
        """The release's pods of ``component`` (webhook, reconciler), oldest first."""
        assert self.gateway is not None
        selector = f"{COMPONENT_LABEL}={component},app.kubernetes.io/instance={rel.RELEASE_NAME}"
        items = (await self.gateway.list_all(PODS, namespace, label_selector=selector)).items
        return sorted(items, key=lambda p: str(p["metadata"].get("creationTimestamp", "")))

    async def stop(self) -> None:
        if self.gateway is not None:
            self.gateway.close()
            self.gateway = None

    async def _system_node(self, ctx: SandboxContext) -> None:
        """The node the release's pods run on: the scenario's nodes are GPU nodes whose
        taints no pod of ours tolerates, where a cluster has nodes for its system pods.
        Its taint (``vocab.SANDBOX_SYSTEM_TAINT``) keeps users' pods off it."""
        assert self.gateway is not None
        spec = {
            "name": SYSTEM_NODE,
            "labels": {"node-role.kubernetes.io/system": ""},
            "taints": [f"{vocab.SANDBOX_SYSTEM_TAINT}:NoSchedule"],
            "allocatable": {"cpu": "8", "memory": "32Gi"},
        }
        index = len(ctx.scenario.get("nodes") or [])
        node = node_object(spec, index)
        stamp = format_utc(ctx.clock.now())
        for condition in node["status"]["conditions"]:
            condition.setdefault("lastHeartbeatTime", stamp)
            condition.setdefault("lastTransitionTime", stamp)
        with contextlib.suppress(Conflict):
            await self.gateway.create(NODES, node)

    async def _secrets(self, ctx: SandboxContext, values: Values) -> None:
        """The Secrets an operator creates before installing (docs/install.md)."""
        assert self.gateway is not None
        wanted: list[tuple[dict[str, Any], str]] = []
        api = (values.get("reservationApi") or {}).get("existingSecret") or {}
        if "read_write" in ctx.app_keys and api.get("name"):
            wanted.append((api, ctx.app_keys["read_write"]))
        inbound = (values.get("inboundApi") or {}).get("tokenSecret") or {}
        if inbound.get("name"):
            wanted.append((inbound, ctx.inbound_token))
        for ref, value in wanted:
            body = _secret(str(ref["name"]), ctx.namespace, str(ref.get("key", "")), value)
            with contextlib.suppress(Conflict):
                await self.gateway.create(SECRETS, body, ctx.namespace)


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _now() -> str:
    return format_utc(SystemClock().now())


async def upgrade(state_dir: Path, files: list[Path], sets: list[str]) -> rel.Record:
    """``python -m sandbox upgrade``: render the running sandbox's release again with
    its layers plus the user's new ones and apply the difference. Nothing is written
    when the values do not render (``ValueError`` with Helm's message)."""
    namespace = json.loads((state_dir / "endpoints.json").read_text(encoding="utf-8"))["namespace"]
    gateway = Gateway.from_kubeconfig(str(state_dir / "kubeconfig"))
    try:
        applier = Applier(gateway, namespace, now=_now)
        previous = await applier.current()
        if previous is None:
            raise ValueError(f'release "{rel.RELEASE_NAME}" has no deployed releases')
        new_files, new_sets = user_layers(files, sets)
        layers = previous.layers.plus(new_files, new_sets)
        rendered = rel.render(layers, namespace, revision=previous.version + 1)
        return await applier.upgrade(previous, rendered, layers)
    finally:
        gateway.close()
