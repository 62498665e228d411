"""The adversarial suite's stage: one sandbox per test module (kube, the emulated
scheduler and kubelet, the app, and the chart's release: the real webhook behind its
Service and one real reconciler, pods of the chart's Deployments), run on a loop of its
own so every test of the module shares it, and the ordinary users alice, bob, carol and
dave, each with a kubeconfig of their own.

Tests act as the users do: ``kubectl`` with the user's kubeconfig, a user's own HTTP
client with their token where a script would race (``as_user``), raw HTTPS where
anyone who can reach the webhook could send a hand-made body. Assertions read the
cluster as the admin (``Stage.world.gateway``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

from sandbox.release_component import ReleaseComponent
from sandbox.runner import Sandbox, SandboxContext
from sandbox.scenario import load_scenario
from shared import model, vocab
from shared.clock import Clock
from shared.errors import NotFound
from shared.gateway import Gateway
from shared.resources import GPU_RESERVATIONS, PODS
from tests.policy.builders import PodBuilder
from tests.reconciler.test_integration import World
from tests.security.users import user_kubeconfig

T = TypeVar("T")
USERS = ("alice", "bob", "carol", "dave")
#: The reconciler's environment: bookings arrive by push; a hold whose pod never
#: appears is released after 2 s (the fixed default is 10 s), while the claim's
#: time-to-live is the production default, so only that release can free it soon.
ENV = {
    "LEADER_ELECTION_ENABLED": "false",
    "RESERVATION_FETCH_INTERVAL": "3600",
    "QUEUE_PROCESSOR_INTERVAL": "2",
    "LEDGER_UNSEEN_HOLD_SECONDS": "2",
    "LEDGER_CLAIM_TTL_SECONDS": "120",
}
COMPONENTS = ("kube", "cluster", "app", "release")
#: A liveness bound on any one wait (wall seconds), never a speed figure: the figures
#: the issue names (2 s to evict, a few seconds for a hold) are the ``expect_s`` a slow
#: wait is logged against (``tests.reconciler.test_integration.eventually``).
PATIENCE_S = 30.0


@dataclass
class Done:
    """What one kubectl run gave."""

    code: int
    out: str
    err: str


def kubectl(config: Path, *args: str, stdin: str | None = None) -> Done:
    """Run the real kubectl with ``config``; the outcome, whatever it is."""
    done = subprocess.run(
        [shutil.which("kubectl") or "kubectl", "--kubeconfig", str(config), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,  # liveness: kubectl is slow to start on a loaded machine
        check=False,
    )
    return Done(done.returncode, done.stdout, done.stderr)


class Stage:
    """A sandbox on a background event loop; ``run`` executes coroutines there."""

    def __init__(
        self,
        state_dir: Path,
        *,
        scenario: dict[str, Any] | None = None,
        clock: Clock | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        ctx = SandboxContext(state_dir=state_dir, scenario=scenario or load_scenario())
        if clock is not None:
            ctx.clock = clock
        # The reconciler's environment through the chart's reconciler.extraEnv (after
        # the chart's own variables, so these win); one webhook replica.
        extra = [{"name": k, "value": v} for k, v in {**ENV, **(env or {})}.items()]
        values = {"webhook": {"replicas": 1}, "reconciler": {"extraEnv": extra}}
        ctx.handles["release.user"] = ((values,), ())
        self.sandbox = Sandbox(ctx, list(COMPONENTS))
        self.run(self.sandbox.start())
        self.admin = state_dir / "kubeconfig"
        gateway = Gateway.from_kubeconfig(str(self.admin))
        self.world = World(ctx, gateway, self.run(_client()))
        (self.reconciler,) = self.run(self.release.replicas("reconciler"))
        server = self.world.ctx.handles["kube"]
        self.configs = {
            u: user_kubeconfig(server, self.admin, u, state_dir / f"{u}.kubeconfig") for u in USERS
        }
        self.tokens = {u: _token(self.configs[u]) for u in USERS}

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def release(self) -> ReleaseComponent:
        component: ReleaseComponent = self.world.ctx.handles["release"]
        return component

    def close(self) -> None:
        try:
            self.world.gateway.close()
            self.run(self.world.http.aclose())
            self.run(self.sandbox.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()

    # --- acting as a user -----------------------------------------------------------

    async def as_user(self, user: str, *args: str, stdin: str | None = None) -> Done:
        """``kubectl`` as ``user`` (their own kubeconfig), off the sandbox's loop."""
        return await asyncio.to_thread(kubectl, self.configs[user], *args, stdin=stdin)

    async def create(self, user: str, *objs: dict[str, Any]) -> Done:
        """``kubectl create`` of ``objs`` in ``user``'s namespace, as ``user``."""
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})
        args = ("create", "--validate=false", "-n", user, "-f", "-")
        return await self.as_user(user, *args, stdin=body)

    @property
    def api(self) -> str:
        """The API server's HTTPS address (as in every kubeconfig)."""
        return str(self.world.ctx.handles["kube"].secure_url)

    def client(self, user: str) -> httpx.AsyncClient:
        """``user``'s own HTTP client on the API server (their token, the cluster CA)."""
        ca = self.state_dir / "cluster-ca.pem"
        ca.write_bytes(self.world.ctx.handles["kube"].ca_pem)
        headers = {"Authorization": f"Bearer {self.tokens[user]}"}
        trust = ssl.create_default_context(cafile=str(ca))
        return httpx.AsyncClient(base_url=self.api, headers=headers, verify=trust, timeout=10)

    async def webhook_url(self) -> str:
        """``/mutate`` of the first webhook replica, as anyone on the pod network sees it
        (its pod IP: the pods change when the webhook is scaled)."""
        replica = (await self.release.replicas("webhook"))[0]
        return f"https://{replica.ip}:{replica.port}/mutate"

    # --- reading as the admin -------------------------------------------------------

    async def pod(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            got: dict[str, Any] = await self.world.gateway.get(PODS, name, ns)
        except NotFound:
            return None
        return got

    async def gone(self, ns: str, name: str) -> bool:
        """The pod is deleted or being deleted (evicted)."""
        got = await self.pod(ns, name)
        return got is None or bool(got["metadata"].get("deletionTimestamp"))

    async def reservation(self, rid: int) -> model.GPUReservation | None:
        try:
            obj = await self.world.gateway.get(
                GPU_RESERVATIONS, model.reference(rid), self.world.ctx.namespace
            )
        except NotFound:
            return None
        return model.from_object(obj)

    async def book(self, user: str, gpus: int, gpu_class: str, start: str = "-1m") -> int:
        """A booking of ``user``'s, once the reconciler mirrors it."""
        body = {
            "username": user,
            "group": "lab",
            "gpu_class": gpu_class,
            "gpu_count": gpus,
            "start": start,
            "end": "+2h",
        }
        answer = await self.world.http.post(f"{self.world.app}/_sandbox/bookings", json=body)
        assert answer.status_code == 201, answer.text
        rid: int = answer.json()["id"]
        await waits(lambda: self.reservation(rid), 5)
        return rid

    async def cancel(self, rid: int) -> None:
        await self.world.cancel(rid)

    async def clear(self, *namespaces: str) -> None:
        """Delete every pod of ``namespaces`` at once (between tests)."""
        for ns in namespaces:
            for item in (await self.world.gateway.list_all(PODS, ns)).items:
                with suppress(NotFound):
                    await self.world.gateway.delete(
                        PODS, item["metadata"]["name"], ns, grace_period_s=0
                    )

    async def events(self, ns: str, name: str) -> list[str]:
        """The reasons of the Events about pod ``name``."""
        done = await asyncio.to_thread(kubectl, self.admin, "get", "events", "-n", ns, "-o", "json")
        text = done.out
        items = json.loads(text)["items"] if text else []
        return [e["reason"] for e in items if e["involvedObject"].get("name") == name]


async def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=5.0)


def _token(config: Path) -> str:
    doc = yaml.safe_load(config.read_text("utf-8"))
    token: str = doc["users"][0]["user"]["token"]
    return token


async def waits(check: Callable[[], Awaitable[T]], expect_s: float) -> T:
    """Poll ``check`` until truthy (``eventually``: a slow wait is logged against
    ``expect_s``, the test fails after ``PATIENCE_S``)."""
    from tests.reconciler.test_integration import eventually

    value: T = await eventually(check, expect_s)
    return value


async def survivors(
    check: Callable[[str], Awaitable[bool]], names: Iterable[str], patience_s: float = PATIENCE_S
) -> list[str]:
    """The ``names`` for which ``check`` is still false after ``patience_s`` (polled;
    returns as soon as every one holds)."""
    left = list(names)
    began = time.monotonic()
    while left and time.monotonic() - began < patience_s:
        left = [n for n in left if not await check(n)]
        await asyncio.sleep(0.1)
    return left


# --- pods as users write them ---------------------------------------------------------


def pod(
    name: str,
    *,
    gpu_class: str | None = None,
    limits: dict[str, str] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    node: str | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod manifest as a user writes it (``PodBuilder``; the namespace comes from
    ``kubectl -n``); it runs for an hour in the emulated kubelet."""
    built = PodBuilder(name).notes({vocab.SANDBOX_RUN_SECONDS: "3600", **(annotations or {})})
    if gpu_class is not None:
        built.cls(gpu_class)
    for toleration in tolerations or []:
        built.tolerate(**toleration)
    body = built.build()
    body["metadata"].pop("namespace")
    spec = body["spec"]
    spec["terminationGracePeriodSeconds"] = 0
    if limits is not None:
        spec["containers"][0]["resources"] = {"limits": dict(limits)}
    if node is not None:
        spec["nodeName"] = node  # as written: not ``PodBuilder.on``, which adds a status
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    return body


def gpus(count: int | str) -> dict[str, str]:
    return {vocab.GPU_RESOURCE: str(count)}


def reservation_toleration(gpu_class: str) -> dict[str, Any]:
    """The toleration of a class's reservation taint, as a user would declare it."""
    return {
        "key": vocab.RESERVATION_TAINT_KEY,
        "operator": "Equal",
        "value": gpu_class,
        "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
    }


def class_toleration(gpu_class: str) -> dict[str, Any]:
    """The toleration of a GPU class's ordinary taint (every GPU node carries it)."""
    return {
        "key": vocab.GPU_CLASS_LABEL,
        "operator": "Equal",
        "value": gpu_class,
        "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
    }


def declares_reservation(obj: dict[str, Any] | None) -> bool:
    """Whether a live pod tolerates some reservation taint."""
    from shared.policy.tolerations import tolerates_reservation

    found = ((obj or {}).get("spec") or {}).get("tolerations") or []
    return any(tolerates_reservation(t) for t in found)


def notes(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def admitted(obj: dict[str, Any] | None) -> bool:
    return vocab.BOOKING_REFERENCE in notes(obj)
