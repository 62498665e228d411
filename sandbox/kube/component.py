"""The sandbox component that runs the Kubernetes API emulator (``--components kube``)."""

from __future__ import annotations

from sandbox.kube.admission.install import install
from sandbox.kube.seed import seed
from sandbox.kube.server import KubeServer
from sandbox.runner import SandboxContext


class KubeComponent:
    """Starts a ``KubeServer``, seeds it from the scenario and publishes it."""

    name = "kube"

    def __init__(self) -> None:
        self.server: KubeServer | None = None

    async def start(self, ctx: SandboxContext) -> None:
        """Serve, seed, and publish ``endpoints["kube"]``, the kubeconfig and the handle."""
        server = KubeServer(ctx.clock)
        install(server)  # mutating webhook dispatch + MutatingWebhookConfiguration validation
        await seed(server.cluster, ctx.scenario)
        await server.start()
        self.server = server
        ctx.endpoints[self.name] = server.url
        ctx.kubeconfig = server.kubeconfig()
        ctx.handles[self.name] = server

    async def stop(self) -> None:
        """Shut the server down."""
        if self.server is not None:
            await self.server.stop()
            self.server = None
