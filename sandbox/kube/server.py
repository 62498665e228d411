"""``KubeServer``: the emulated kube-apiserver on 127.0.0.1 and an ephemeral port.

It runs uvicorn inside the caller's event loop. Other components use it through
``url``, ``admin_token``, ``mint_token``, ``mutating_admission``, ``compact_history``,
``store`` and ``get_object``; ``kubeconfig()`` is the admin kubeconfig (cluster-admin
through the ``system:masters`` group). The cluster starts with the ``cluster-admin``
and ``edit`` ClusterRoles (``sandbox.users`` binds ``edit`` to each sandbox user).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import shutil
import tempfile
from pathlib import Path
from typing import Any

import uvicorn
import yaml

from sandbox.faults import FaultBook, FaultMiddleware
from sandbox.kube.admission_api import MutatingAdmission
from sandbox.kube.auth import service_account_user
from sandbox.kube.cluster import Cluster
from sandbox.kube.corked import CorkedHttpToolsProtocol
from sandbox.kube.rbac import RBAC_GROUP, cluster_admin_role, edit_role
from sandbox.kube.routes import Api
from sandbox.kube.store import Store
from sandbox.kube.timing import RequestTimes
from sandbox.kube.tls import ServingFiles, write_serving_files
from sandbox.ports import free_port
from shared.clock import Clock
from shared.resources import Resource

Obj = dict[str, Any]
HOST = "127.0.0.1"


def _free_port() -> int:
    return free_port(HOST)


class KubeServer:
    """The emulator: a cluster, its HTTP API, and the uvicorn server running it."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.cluster = Cluster(clock)
        self.port = 0
        self.secure_port = 0
        self._api = Api(self.cluster, lambda: f"{HOST}:{self.secure_port}")
        #: Faults injected into the HTTP API (tests: 409, 410 on watch, 429, drops, …).
        self.faults = FaultBook()
        self._servers: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []
        self._tls_dir: Path | None = None
        self._tls: ServingFiles | None = None
        #: Every connection protocol ever accepted, to close leftovers at stop.
        self._connections: list[Any] = []
        for role in (cluster_admin_role(), edit_role()):
            self.cluster.store.put(
                (RBAC_GROUP, "clusterroles", "", role["metadata"]["name"]),
                _bootstrap(role, self.cluster),
            )

    # --- the interface other components use -------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{HOST}:{self.port}"

    @property
    def secure_url(self) -> str:
        """``https://127.0.0.1:<port>``: the same API over TLS (what kubectl uses)."""
        return f"https://{HOST}:{self.secure_port}"

    @property
    def ca_pem(self) -> bytes:
        """PEM of the CA that signed the HTTPS listener's certificate."""
        assert self._tls is not None, "the server is not started"
        return self._tls.ca_pem

    @property
    def admin_token(self) -> str:
        """Bearer token of ``kubernetes-admin`` (group ``system:masters``)."""
        return self.cluster.authn.admin_token

    @property
    def store(self) -> Store:
        """The object store (in-process reads for tests)."""
        return self.cluster.store

    @property
    def mutating_admission(self) -> list[MutatingAdmission]:
        """Mutating admission plugins, called in order on every write."""
        return self.cluster.mutating_admission

    def mint_token(self, username: str, groups: list[str] | tuple[str, ...] = ()) -> str:
        """A bearer token for any identity (``system:authenticated`` is added)."""
        return self.cluster.authn.mint(username, groups)

    def service_account_token(self, namespace: str, name: str) -> str:
        """A token for service account ``<namespace>/<name>`` with its usual groups."""
        username, groups = service_account_user(namespace, name)
        return self.mint_token(username, groups)

    def compact_history(self) -> None:
        """Forget watch history and list snapshots: older RVs now get 410 Expired."""
        self.cluster.store.compact_history()

    def get_object(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        """A stored object (as stored: core/v1 form for events), or ``None``."""
        return self.cluster.store.get(res.group, res.plural, namespace or "", name)

    @property
    def bookmark_interval(self) -> float:
        """Seconds between BOOKMARK events on watches that allow them."""
        return self._api.bookmark_interval

    @bookmark_interval.setter
    def bookmark_interval(self, seconds: float) -> None:
        self._api.bookmark_interval = seconds

    def time_requests(self) -> RequestTimes:
        """Start recording how long each answer takes (``sandbox.kube.timing``; for
        benchmarks: off by default)."""
        if self._api.times is None:
            self._api.times = RequestTimes()
        return self._api.times

    def kubeconfig(
        self, token: str | None = None, user: str = "admin", namespace: str = "default"
    ) -> str:
        """A kubeconfig for the HTTPS listener (admin unless another token is given;
        ``namespace``: its context's default namespace).

        kubectl sends tokens only over TLS, so this names ``secure_url`` and embeds the CA.
        """
        cluster = {
            "server": self.secure_url,
            "certificate-authority-data": base64.b64encode(self.ca_pem).decode(),
        }
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "sandbox", "cluster": cluster}],
            "users": [{"name": user, "user": {"token": token or self.admin_token}}],
            "contexts": [
                {
                    "name": "sandbox",
                    "context": {"cluster": "sandbox", "user": user, "namespace": namespace},
                }
            ],
            "current-context": "sandbox",
        }
        return yaml.safe_dump(config, sort_keys=False)

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve HTTP and HTTPS on 127.0.0.1 (free ports) in the running loop."""
        self._tls_dir = Path(tempfile.mkdtemp(prefix="sandbox-kube-"))
        self._tls = write_serving_files(self._tls_dir, HOST)
        self.port = await self._serve(_free_port(), {})
        tls = {"ssl_certfile": str(self._tls.cert_file), "ssl_keyfile": str(self._tls.key_file)}
        self.secure_port = await self._serve(_free_port(), tls)

    def asgi_app(self) -> FaultMiddleware:
        """The ASGI application both listeners serve (benchmarks call it directly)."""
        return FaultMiddleware(self._api.app(), self.faults)

    async def _serve(self, port: int, options: dict[str, Any]) -> int:
        # httptools (what "auto" picks when installed, and it is pinned), each answer
        # written at once (``corked``); no access log and no proxy-headers middleware
        # (nothing here reads the client's address, and it parsed every request's headers
        # again): measured, docs/developer/performance.md.
        config = uvicorn.Config(
            self.asgi_app(),
            host=HOST,
            port=port,
            http=CorkedHttpToolsProtocol,
            log_level="warning",
            access_log=False,
            proxy_headers=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            **options,
        )
        server = uvicorn.Server(config)
        server.server_state.connections = _TrackedConnections(self._connections)
        task = asyncio.create_task(server.serve())
        self._servers.append((server, task))
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("the kube emulator stopped while starting")
            await asyncio.sleep(0.01)
        return port

    async def stop(self) -> None:
        """Close every watch, shut the listeners down, then close what the admission
        plugins hold open (an ``aclose`` of theirs: the webhook clients)."""
        self.cluster.store.close_watchers()
        for server, _ in self._servers:
            server.should_exit = True
        for _, task in self._servers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._servers = []
        for plugin in self.mutating_admission:
            close = getattr(plugin, "aclose", None)
            if close is not None:
                await close()  # webhook clients and their kept-alive connections
        _abort_leftovers(self._connections)
        self._connections = []
        if self._tls_dir is not None:
            shutil.rmtree(self._tls_dir, ignore_errors=True)
            self._tls_dir = None


def settle_collector() -> None:
    """Collect once, then exempt every object alive now from the cyclic garbage
    collector's later passes (``gc.freeze``), for a process that goes on to serve the
    emulator for long (a benchmark): under a write load its full collections walked
    the startup's objects too and stopped the emulator's loop for 50–140 ms (≈ 0.2 s
    in a 12 s cell; a Go apiserver's collector does not stop the world like that).
    Objects made later are collected as before. Process-wide, so not done by
    ``KubeServer`` itself."""
    gc.collect()
    gc.freeze()


class _TrackedConnections(set[Any]):
    """uvicorn's connection set that also remembers every connection it saw."""

    def __init__(self, sink: list[Any]) -> None:
        super().__init__()
        self._sink = sink

    def add(self, protocol: Any) -> None:
        super().add(protocol)
        self._sink.append(protocol)


def _abort_leftovers(protocols: list[Any]) -> None:
    """Abort transports uvicorn left open (a TLS peer that vanished mid-shutdown).

    Without this the raw socket under a TLS transport can outlive the server and be
    reported as an unclosed resource when garbage-collected much later.
    """
    for protocol in protocols:
        transport = getattr(protocol, "transport", None)
        raw = getattr(getattr(transport, "_ssl_protocol", None), "_transport", None)
        for candidate in (transport, raw):
            if candidate is not None and not candidate.is_closing():
                candidate.abort()


def _bootstrap(obj: Obj, cluster: Cluster) -> Obj:
    import uuid

    from sandbox.kube.meta import format_time

    obj["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=format_time(cluster.now()))
    return obj
