"""``ReleaseComponent``: the chart installed into the sandbox as an operator installs it.

Before the release, what docs/operator/install.md asks an operator to do and what a cluster's
operators provide: the release namespace; the reservation app's ``read_write`` key in
the Secret the values name (``reservationApi.existingSecret``); the inbound token in
``inboundApi.tokenSecret``; the CRDs of prometheus-operator and cert-manager and the
built-in kinds the emulator lacks (``sandbox.operators``). Then ``helm install`` of
the chart rendered with the values layers (``sandbox.values``: the sandbox's file, the
computed layer, the user's ``--values``/``--set`` from ``ctx.handles["release.user"]``),
applied by ``sandbox.apply``.

The release's pods run as local processes of the process kubelet
(``ctx.handles["processes"]``, the cluster component): it is the one way the sandbox
runs our webhook and reconciler, so the release needs the cluster. Tests and benchmarks
that want reconciler replicas of their own add them as pods of this release
(``sandbox.release_replicas``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from certs.pem import KeyPair, load_pair
from certs.plan import TLS_CRT, TLS_KEY
from sandbox import chart
from sandbox import release as rel
from sandbox.apply import Applier, ReleaseError, rolled_out, wait_available
from sandbox.certmanager import CertManager
from sandbox.chart import COMPONENT_LABEL
from sandbox.install import ensure_certificates, renewal_overrides, secret_data, write_private
from sandbox.kube.seed import node_object
from sandbox.operators import operator_crds, serve_builtins
from sandbox.runner import SandboxContext
from sandbox.values import Layers, Values, sandbox_values, user_layers
from shared import vocab
from shared.clock import SystemClock, format_utc
from shared.errors import Conflict
from shared.gateway import Gateway
from shared.resources import CRDS, NAMESPACES, NODES, PODS, SECRETS, Resource

#: The app URL rendered when the sandbox runs without the app emulator.
NO_APP_URL = "http://127.0.0.1:9"
ADMIN_KUBECONFIG = "release-admin.kubeconfig"
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
#: Seconds the install waits for every Deployment to be available.
ROLLOUT_TIMEOUT_S = 90.0

#: Waiting reasons that end the wait for a rollout (the pod will not become ready
#: without a change): a crash loop, a missing Secret or key.
STUCK = frozenset({"CrashLoopBackOff", "CreateContainerConfigError"})
POLL_S = 0.2
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
        #: Pods of the release that did not start (``stuck``), for ``next_steps``.
        self.problems: list[str] = []
        self.cert_manager: CertManager | None = None
        self._ctx: SandboxContext | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self, ctx: SandboxContext) -> None:
        if ctx.kubeconfig is None or "kube" not in ctx.handles:
            raise RuntimeError("the release needs the kube component")
        if "processes" not in ctx.handles:
            raise ValueError("the release needs the cluster component (its pods' kubelet)")
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
        self.cert_manager = CertManager(self.gateway, ctx.namespace, ctx.clock)
        self.cert_manager.start()
        await self._secrets(ctx, rendered.effective)
        self.applier = Applier(self.gateway, ctx.namespace, now=_now)
        self._ctx, self._loop = ctx, asyncio.get_running_loop()
        self.record = await self.applier.install(rendered, layers)
        self.rendered = rendered
        ctx.handles[self.name] = self
        # docs/operator/install.md: no --wait on a self-signed install; `kubectl rollout
        # status` after it.
        self.problems = await self._rollout(ctx, rendered)
        await self._publish(ctx, rendered.effective)

    async def _rollout(self, ctx: SandboxContext, rendered: rel.Rendered) -> list[str]:
        """Wait until every Deployment is available, or until a pod of the release is
        stuck as a cluster shows it (``STUCK`` waiting reasons): then the sandbox comes
        up anyway, as a cluster would, and says which pods to look at."""
        assert self.gateway is not None
        done = asyncio.create_task(
            wait_available(self.gateway, rendered, ctx.namespace, ROLLOUT_TIMEOUT_S)
        )
        try:
            while not done.done():
                problems = stuck(await self.pods(ctx.namespace, ""))
                if problems:
                    return problems
                await asyncio.wait({done}, timeout=POLL_S)
            done.result()
            return []
        finally:
            done.cancel()
            with contextlib.suppress(asyncio.CancelledError, ReleaseError):
                await done

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
        selector = f"app.kubernetes.io/instance={rel.RELEASE_NAME}"
        if component:
            selector += f",{COMPONENT_LABEL}={component}"
        items = (await self.gateway.list_all(PODS, namespace, label_selector=selector)).items
        return sorted(items, key=lambda p: str(p["metadata"].get("creationTimestamp", "")))

    # --- what tests and benches use -----------------------------------------------------

    async def upgrade(
        self, sets: Sequence[str] = (), files: Sequence[Path] = (), settle: bool = True
    ) -> rel.Record:
        """``python -m sandbox upgrade`` in-process, then (``settle``) the rollout's end:
        every pod of the release Ready and no pod of an older template left. As with
        Helm, a Deployment someone scaled is set back to the chart's replicas."""
        assert self._ctx is not None
        self.record = await upgrade(self._ctx.state_dir, list(files), list(sets))
        if settle:
            await self.settle()
        return self.record

    async def scale(self, component: str, replicas: int, wait_ready: bool = True) -> None:
        """``kubectl scale deploy/<release>-<component> --replicas=N``; then (``wait_ready``)
        until exactly N pods of it are Ready and running."""
        assert self.gateway is not None
        assert self._ctx is not None
        name = f"{rel.RELEASE_NAME}-{component}"
        await self.gateway.patch(
            DEPLOYMENTS, name, {"spec": {"replicas": replicas}}, self._ctx.namespace, "merge"
        )
        if wait_ready:
            await self.settle()

    async def settle(self, timeout_s: float = ROLLOUT_TIMEOUT_S) -> None:
        """Until every Deployment of the release has exactly its replicas, all Ready, with
        a live process each, and no other pod of the release is left."""
        assert self.gateway is not None
        assert self._ctx is not None
        async with asyncio.timeout(timeout_s):
            while True:
                if await self._settled():
                    return
                await asyncio.sleep(POLL_S)

    async def _settled(self) -> bool:
        assert self.gateway is not None
        assert self._ctx is not None
        namespace = self._ctx.namespace
        want = 0
        for deployment in (await self.gateway.list_all(DEPLOYMENTS, namespace)).items:
            if not rolled_out(deployment):
                return False
            want += int(deployment["spec"].get("replicas", 1))
        pods = await self.pods(namespace, "")
        live = [p for p in pods if _owner_kind(p) != "Job"]
        return len(live) == want and all(_ready(p) and self._alive(p) for p in live)

    def _alive(self, pod: dict[str, Any]) -> bool:
        assert self._ctx is not None
        processes = self._ctx.handles["processes"]
        found = processes.of(self._ctx.namespace, pod["metadata"]["name"])
        return found is not None and bool(found.alive)

    async def replicas(self, component: str) -> list[Replica]:
        """The running pods of ``component`` as processes: name, pod IP, pid, log."""
        assert self._ctx is not None
        assert self.rendered is not None
        values = self.record.values if self.record is not None else {}
        port = _port(self.rendered.effective, component, values)
        processes = self._ctx.handles["processes"]
        out = []
        for pod in await self.pods(self._ctx.namespace, component):
            found = processes.of(self._ctx.namespace, pod["metadata"]["name"])
            ip = (pod.get("status") or {}).get("podIP")
            if found is not None and ip and pod["metadata"].get("deletionTimestamp") is None:
                out.append(Replica(pod["metadata"]["name"], str(ip), port, found))
        return out

    async def renew(self) -> KeyPair:
        """Renew the serving certificate as a near-expiry run of the certificates Job
        would (the Job's ``certs.apply.ensure`` under its service account); the pods'
        Secret volume follows and the webhook reloads it. Returns the new pair."""
        assert self._ctx is not None
        objects = chart.objects(
            self._ctx.namespace, self.rendered.values if self.rendered else None
        )
        current = self.serving_pair()
        overrides = renewal_overrides(current.not_after, SystemClock().now())
        await ensure_certificates(
            self._ctx.handles["kube"], objects, self._ctx.state_dir, overrides
        )
        return self.serving_pair()

    def rotate(self) -> KeyPair:
        """``renew`` from another thread than the sandbox's loop (blocking)."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(self.renew(), self._loop).result(30)

    def serving_pair(self) -> KeyPair:
        """The serving certificate and key the Secret holds now."""
        assert self._ctx is not None
        objects = chart.objects(
            self._ctx.namespace, self.rendered.values if self.rendered else None
        )
        data = secret_data(self._ctx.handles["kube"], self._ctx.namespace, objects.webhook_secret)
        return load_pair(data[TLS_CRT], data[TLS_KEY], "serving certificate")

    async def stop(self) -> None:
        if self.cert_manager is not None:
            await self.cert_manager.stop()
            self.cert_manager = None
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
        """The Secrets an operator creates before installing (docs/operator/install.md)."""
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


@dataclass(frozen=True)
class Replica:
    """A running pod of the release and its process."""

    name: str
    ip: str
    #: The component's serving port (webhook: TLS; reconciler: HTTP).
    port: int
    process: Any

    @property
    def running(self) -> bool:
        return bool(self.process.alive)

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    @property
    def log_path(self) -> Path:
        return Path(self.process.log_path)

    @property
    def url(self) -> str:
        """``http://<pod IP>:<port>`` (the reconciler's HTTP API)."""
        return f"http://{self.ip}:{self.port}"

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process (SIGKILL: a crash; SIGSTOP: a hang)."""
        self.process.signal(sig)


def _owner_kind(pod: dict[str, Any]) -> str:
    owners = pod["metadata"].get("ownerReferences") or [{}]
    return str(owners[0].get("kind", ""))


def _port(values: Values, component: str, _record: Values) -> int:
    section = values.get(component) or {}
    return int(section.get("port", section.get("httpPort", 0)))


def stuck(pods: list[dict[str, Any]]) -> list[str]:
    """``<pod>: <reason>`` for each pod with a container waiting for a ``STUCK`` reason."""
    out = []
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            reason = ((status.get("state") or {}).get("waiting") or {}).get("reason")
            if reason in STUCK:
                out.append(f"{pod['metadata']['name']}: {reason}")
    return out


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
