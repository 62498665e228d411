"""The sandbox runner: starts the selected components, writes how to reach them, waits.

A component is anything with an async ``start(ctx)`` and ``stop()``. ``start`` records
its URL in ``ctx.endpoints[<name>]`` (and whatever else it publishes on ``ctx``) once it
is ready. Components start in ``ORDER`` and stop in reverse. When all have started the
runner writes ``<state-dir>/kubeconfig`` (if the kube component wrote one into the
context) and ``<state-dir>/endpoints.json``; ``up`` also writes each sandbox user's
kubeconfig under ``<state-dir>/users/`` and prints ``sandbox ready``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import secrets
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from shared import vocab
from shared.clock import Clock, ScaledClock, SystemClock

#: Every component the sandbox knows, in start order, with where its class lives.
#: Our webhook and reconciler run only from the release (the process kubelet runs its
#: pods).
ORDER: tuple[tuple[str, str], ...] = (
    ("kube", "sandbox.kube.component:KubeComponent"),
    ("cluster", "sandbox.cluster.component:ClusterComponent"),
    ("app", "sandbox.app.component:AppComponent"),
    ("release", "sandbox.release_component:ReleaseComponent"),
)

#: The controller's namespace in the sandbox.
CONTROLLER_NAMESPACE = vocab.PRODUCT_NAME


@dataclass
class SandboxContext:
    """What components share: configuration in, endpoints and credentials out."""

    state_dir: Path
    scenario: dict[str, Any]
    clock: Clock = field(default_factory=SystemClock)
    namespace: str = CONTROLLER_NAMESPACE
    endpoints: dict[str, str] = field(default_factory=dict)
    #: ``read_write`` and ``read_only`` reservation-app keys.
    app_keys: dict[str, str] = field(default_factory=dict)
    inbound_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    #: Text of the admin kubeconfig, written to ``<state-dir>/kubeconfig``.
    kubeconfig: str | None = None
    #: Free-form handles components publish for later ones (e.g. the kube server).
    handles: dict[str, Any] = field(default_factory=dict)
    #: ``POD_SCHEDULING_GATE_NAME`` of the webhook and of every reconciler replica (one
    #: value, so the gate the webhook adds is the one the reconciler removes). The
    #: default scenario has an ordinary h100 node whose taint the reserved ones carry
    #: too: without a gate a pod queued for a booking would run there at once. None:
    #: no gate (the seed's default), for tests of the ungated path.
    scheduling_gate: str | None = vocab.SANDBOX_SCHEDULING_GATE


def gate_env(ctx: SandboxContext) -> dict[str, str]:
    """The environment that gives a component the sandbox's scheduling gate (if any)."""
    return {} if ctx.scheduling_gate is None else {"POD_SCHEDULING_GATE_NAME": ctx.scheduling_gate}


def clock_env(clock: Clock) -> dict[str, str]:
    """The environment that makes a child process's clock agree with ``clock``.

    Empty for the system clock. For a scaled clock the epoch keeps its fraction of a
    second: rounding it would run the child's clock up to one sandbox second behind.
    """
    if not isinstance(clock, ScaledClock):
        return {}
    return {
        "CLOCK_FACTOR": repr(clock.factor),
        "CLOCK_EPOCH": clock.epoch.isoformat(),
        "CLOCK_STARTED_AT": repr(clock.started_at),
    }


class SandboxError(Exception):
    """A component refused to start (e.g. its scenario section is invalid)."""


class Component(Protocol):
    """One part of the sandbox."""

    name: str

    async def start(self, ctx: SandboxContext) -> None: ...

    async def stop(self) -> None: ...


def available() -> list[str]:
    """Names of every component, in start order."""
    return [name for name, _ in ORDER]


def load(name: str) -> Component:
    """Instantiate the component called ``name``."""
    target = dict(ORDER)[name]
    module_name, class_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    component: Component = cls()
    return component


class Sandbox:
    """Starts and stops a set of components around one context."""

    def __init__(self, ctx: SandboxContext, names: list[str]) -> None:
        unknown = sorted(set(names) - set(available()))
        if unknown:
            raise ValueError(f"unknown component(s) {unknown}; known: {available()}")
        self.ctx = ctx
        self.components = [load(n) for n in available() if n in names]
        self._started: list[Component] = []

    async def start(self) -> None:
        """Start every component in order, then write the state files."""
        self.ctx.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            for component in self.components:
                try:
                    await component.start(self.ctx)
                except ValueError as exc:  # components report a bad scenario this way
                    raise SandboxError(f"component {component.name!r}: {exc}") from exc
                self._started.append(component)
        except BaseException:
            await self.stop()
            raise
        self.write_state()

    async def stop(self) -> None:
        """Stop what was started, newest first."""
        while self._started:
            await self._started.pop().stop()

    def write_state(self) -> None:
        """Write ``kubeconfig`` and ``endpoints.json`` into the state directory."""
        if self.ctx.kubeconfig is not None:
            path = self.ctx.state_dir / "kubeconfig"
            path.write_text(self.ctx.kubeconfig, encoding="utf-8")
            path.chmod(0o600)
        endpoints: dict[str, Any] = {
            **self.ctx.endpoints,
            "app_keys": self.ctx.app_keys,
            "inbound_token": self.ctx.inbound_token,
            "namespace": self.ctx.namespace,
        }
        (self.ctx.state_dir / "endpoints.json").write_text(
            json.dumps(endpoints, indent=2) + "\n", encoding="utf-8"
        )


async def run_until_interrupted(sandbox: Sandbox) -> None:
    """Start, print ``sandbox ready``, wait for SIGINT/SIGTERM, stop cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await sandbox.start()
    try:
        write_users(sandbox.ctx)
        print("sandbox ready", flush=True)
        print(next_steps(sandbox.ctx), flush=True)
        await stop.wait()
    finally:
        await sandbox.stop()


def write_users(ctx: SandboxContext) -> list[Path]:
    """``<state-dir>/users/<name>.kubeconfig`` for every sandbox user, each a namespace
    editor in their namespace (``sandbox.users``); nothing without the kube component.
    Done by ``up`` only: a sandbox started in-process (tests) grants users nothing
    unless it asks (``sandbox.users.user_kubeconfig``)."""
    if "kube" not in ctx.handles:
        return []
    from sandbox.users import USERS_DIR, write_user_kubeconfigs

    return write_user_kubeconfigs(ctx, ctx.scenario, ctx.state_dir / USERS_DIR)


def next_steps(ctx: SandboxContext) -> str:
    """What to try next, for the components that are running."""
    lines = [""]
    if ctx.kubeconfig is not None:
        kubeconfig = (ctx.state_dir / "kubeconfig").resolve()
        lines += [f"  export KUBECONFIG={kubeconfig}", "  kubectl get nodes"]
        users = sorted((ctx.state_dir / "users").glob("*.kubeconfig"))
        if users:
            names = ", ".join(p.name.removesuffix(".kubeconfig") for p in users)
            lines.append(
                f"  as a user ({names}, namespace editors): export KUBECONFIG={users[0].resolve()}"
            )
    release = ctx.handles.get("release")
    if release is not None:
        lines.append(f"  kubectl get pods -n {ctx.namespace}      # our processes, from the chart")
        for problem in getattr(release, "problems", []):
            pod = problem.split(":")[0]
            lines.append(f"  ! {problem}: kubectl logs -n {ctx.namespace} {pod}")
    if "reconciler" in ctx.endpoints:
        lines.append(f"  kubectl get gpureservations -n {ctx.namespace}")
        lines.append(
            f"  kubectl annotate node h100-r1 {vocab.FORCE_NODE_CAPACITY}=0   "
            f"# h100 overcommitted at the next audit: kubectl describe lease -n {ctx.namespace}"
        )
    if "webhook" in ctx.endpoints:
        example = Path(__file__).parent / "examples" / "alice-notebook.yaml"
        lines.append(f"  kubectl create -f {example}")
        lines.append(
            "  kubectl gpures list -n alice      # with .venv/bin on PATH (docs/user/explain.md)"
        )
    if "app" in ctx.endpoints:
        lines += [
            f"  curl -s -X POST {ctx.endpoints['app']}/_sandbox/bookings \\",
            '       -H \'content-type: application/json\' -d \'{"username": "carol", '
            '"group": "lab", "gpu_class": "h100", "gpu_count": 1, '
            '"start": "+2m", "end": "+1h"}\'',
        ]
    lines += ["", f"  endpoints and keys: {(ctx.state_dir / 'endpoints.json').resolve()}"]
    lines.append("  Ctrl-C stops everything.")
    return "\n".join(lines)
