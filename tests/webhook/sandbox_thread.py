"""A sandbox (kube, the process kubelet, the chart's release with webhook replicas and no
reconciler) on its own event loop thread, for kubectl tests."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from sandbox.release_component import ReleaseComponent, Replica
from sandbox.runner import Sandbox, SandboxContext
from sandbox.scenario import load_scenario
from shared import model
from shared.clock import SystemClock
from shared.gateway import Gateway
from shared.resources import GPU_RESERVATIONS, PODS

T = TypeVar("T")


class SandboxThread:
    """Starts the sandbox on a background loop; ``run`` executes coroutines there.

    The webhook runs as the chart's Deployment with ``replicas`` pods; the reconciler's
    Deployment is scaled to 0 (tests write GPUReservations themselves, and there is no
    app emulator: its pod could not start without the app's key)."""

    def __init__(self, state_dir: Path, replicas: int) -> None:
        self.ctx = SandboxContext(state_dir=state_dir, scenario=load_scenario())
        self.ctx.handles["release.user"] = ((), (f"webhook.replicas={replicas}",))
        self.sandbox = Sandbox(self.ctx, ["kube", "cluster", "release"])
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.run(self.sandbox.start(), timeout=120)
        # no app, no reconciler: kubectl scale --replicas=0 (the chart's minimum is 1)
        self.run(self.release.scale("reconciler", 0), timeout=120)
        self.kubeconfig = state_dir / "kubeconfig"
        self.gateway = Gateway.from_kubeconfig(str(self.kubeconfig))

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.gateway.close()  # its keep-alive sockets first, so the server can drain
        self.run(self.sandbox.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    @property
    def release(self) -> ReleaseComponent:
        component: ReleaseComponent = self.ctx.handles["release"]
        return component

    def webhook_replicas(self) -> list[Replica]:
        """The webhook's running pods (pod IP, TLS port, process, log)."""
        return self.run(self.release.replicas("webhook"))

    @property
    def namespace(self) -> str:
        return self.ctx.namespace

    def now(self) -> Any:
        return SystemClock().now()

    def put_reservation(self, res: model.GPUReservation) -> None:
        body = model.to_object(res, self.namespace, self.now())
        body["metadata"].pop("resourceVersion", None)
        self.run(self.gateway.create(GPU_RESERVATIONS, body, self.namespace))

    def reservation(self, name: str) -> model.GPUReservation:
        return model.from_object(self.run(self.gateway.get(GPU_RESERVATIONS, name, self.namespace)))

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.run(self.gateway.get(PODS, name, namespace))

    def kubectl(
        self, *args: str, stdin: str | None = None, token_kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        binary = shutil.which("kubectl") or "kubectl"
        config = str(token_kubeconfig or self.kubeconfig)
        return subprocess.run(
            [binary, "--kubeconfig", config, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def apply(self, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return self.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))

    def user_kubeconfig(self, username: str, groups: list[str]) -> Path:
        kube = self.ctx.handles["kube"]
        token = kube.mint_token(username, groups)
        path = self.ctx.state_dir / f"{username.replace(':', '_')}.kubeconfig"
        path.write_text(kube.kubeconfig(token=token, user=username.replace(":", "-")))
        return path
