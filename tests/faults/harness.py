"""A reusable fault-injection harness: the reconciler's passes against the sandbox's
Kubernetes and reservation-app emulators, with faults injected into either.

``fault_world`` starts a fresh kube + app pair (on one manual clock, shared with the
reconciler), installs the CRD, and builds a ``Reconciler`` without starting it: a test
drives its passes itself (``FaultWorld.poll``) so every step is deterministic. Faults:

- app, per endpoint (``/api/reservations``, ``/api/gpu-classes``): 5xx, a timeout (a
  delay past the client's), a dropped connection, malformed JSON, a wrong schema, a
  slow but timely body — through the app emulator's control API;
- kube (``KubeServer.faults``): 409 on GPUReservation writes, 500 on the pod list, 429
  with ``Retry-After``, slow answers, 410 on a watch, a watch dropped mid-body. The
  gateway resends a throttled call after its ``Retry-After`` a bounded number of times;
  here it does not wait the seconds out in wall time (``no_wait``: the cell's time is
  the manual clock), so a lasting 429 fails each call at once as it did before.

``observe`` reads the state the invariants are about, normalised (claim ids, uids and
timestamps dropped): GPUReservation specs and holds, pods, Events, app reservations.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from reconciler.base import settings as rs
from reconciler.process import Reconciler
from sandbox.app.policies import Policies
from sandbox.app.seed import build_state, parse_section
from sandbox.runner import SandboxContext
from shared import vocab
from shared.appclient import AppClient, KeyScope
from shared.appclient.backoff import PageRetryPolicy
from shared.appclient.http import Timeouts
from shared.clock import ManualClock, utc
from shared.errors import KubeError
from shared.gateway import Gateway
from shared.policy.tolerations import granted_toleration
from shared.resources import EVENTS, GPU_RESERVATIONS, PODS
from tests.policy.builders import PodBuilder
from tests.sandboxkit import book, emulators

#: The instant every world starts at (a Monday, 10:00 in the app's zone).
T0 = utc(2026, 10, 5, 17, 0)
#: The app client's deadline per call in these worlds (a timeout fault waits longer):
#: far above what a call takes on a loaded machine, where a deadline of 0.3 s was met by
#: calls no fault delayed (a kill-point cell then ended without its no-show cancels).
CLIENT_TIMEOUT_S = 2.0
USERS = ("alice", "bob")


@dataclass(frozen=True)
class Fault:
    """One injectable fault: where it goes and the fault book entry."""

    name: str
    #: ``app`` (the app emulator's control API) or ``kube`` (``KubeServer.faults``).
    target: str
    spec: dict[str, Any]


def app_fault(name: str, path: str, **spec: Any) -> Fault:
    return Fault(name, "app", {"method": "GET", "path": path, "count": None, **spec})


def kube_fault(name: str, method: str, path: str, **spec: Any) -> Fault:
    return Fault(name, "kube", {"method": method, "path": path, "count": None, **spec})


RESERVATIONS = "/api/reservations"
CLASSES = "/api/gpu-classes"
GPURES_PATH = f"/apis/{vocab.CRD_GROUP}/{vocab.CRD_VERSION}/namespaces/*/{vocab.CRD_PLURAL}*"
CONFLICT = {"kind": "Status", "status": "Failure", "reason": "Conflict", "code": 409}

#: The fault columns of the matrix.
FAULTS: tuple[Fault, ...] = (
    app_fault("app 503 reservations", RESERVATIONS, status=503),
    app_fault("app timeout reservations", RESERVATIONS, delay_s=CLIENT_TIMEOUT_S * 2),
    app_fault("app drop reservations", RESERVATIONS, drop=True),
    app_fault("app malformed reservations", RESERVATIONS, malformed=True),
    app_fault("app wrong schema reservations", RESERVATIONS, status=200, body={"rows": 3}),
    app_fault("app 500 gpu-classes", CLASSES, status=500),
    kube_fault("kube 409 gpures writes", "PUT", GPURES_PATH, status=409, body=CONFLICT),
    kube_fault("kube 500 pod list", "GET", "/api/v1/pods", status=500),
    kube_fault("kube 429 everything", "*", "/api*", status=429, headers={"Retry-After": "1"}),
)
#: A fault that changes nothing but the timing: everything must simply work.
SLOW = (
    app_fault("app slow reservations", RESERVATIONS, delay_s=CLIENT_TIMEOUT_S / 4),
    kube_fault("kube slow everything", "*", "/api*", delay_s=0.02),
)


@dataclass
class State:
    """What the invariants compare (normalised)."""

    #: name → spec of every GPUReservation.
    specs: dict[str, dict[str, Any]]
    #: name → sorted (pod, gpus) of its holds.
    holds: dict[str, list[tuple[str | None, int]]]
    #: ``namespace/name`` of every pod.
    pods: set[str]
    #: (pod, reason) → how many Events.
    events: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: The app's reservations: id → (status, cancel reason).
    app: dict[int, tuple[str, str | None]] = field(default_factory=dict)

    def comparable(self) -> tuple[Any, ...]:
        return (self.specs, self.holds, self.pods, dict(self.events), self.app)


class WorldClock(ManualClock):
    """The manual clock, which a reset may also send back to the start."""

    def set(self, instant: datetime) -> None:
        self._now = instant


class FaultWorld:
    """The emulators, an unstarted reconciler on the same clock, and fault controls.

    ``reset`` gives the next cell a clean start on the same emulators (a fresh app
    state, no pods, Events or GPUReservations, the clock back at the start, a new
    reconciler): starting emulators costs far more than a cell."""

    def __init__(self, ctx: SandboxContext, gateway: Gateway, http: httpx.AsyncClient) -> None:
        self.ctx, self.gateway, self.http = ctx, gateway, http
        assert isinstance(ctx.clock, WorldClock)
        self.clock: WorldClock = ctx.clock
        self.start = self.clock.now()
        self.kube = ctx.handles["kube"]
        #: Ids of the bookings this cell made, in order (the scenario's own come first).
        self.booked: list[int] = []
        self.emulator = ctx.handles["app"]
        self._key = ctx.app_keys["read_write"]
        self.app_client = self._client(self._key)
        #: Whether ``poll`` runs the on-demand lease batch too (a lease scenario sets it;
        #: ``reset`` clears it, so the other scenarios keep their rounds).
        self.leases = False
        self.reconciler = self._reconciler(self._key)

    def _client(self, key: str) -> AppClient:
        return AppClient(
            self.ctx.endpoints["app"],
            key,
            clock=self.clock,
            timeouts=Timeouts(default=CLIENT_TIMEOUT_S, long=CLIENT_TIMEOUT_S),
            page_retry=PageRetryPolicy(pauses=()),
        )

    def _reconciler(self, key: str, wrap: Callable[[Any], Any] = lambda x: x) -> Reconciler:
        env = {
            "RESERVATION_API_URL": self.ctx.endpoints["app"],
            "RESERVATION_API_KEY": key,
            "POD_NAMESPACE": self.ctx.namespace,
            "LEADER_ELECTION_ENABLED": "false",
            "POD_ADOPTION_ENABLED": "false",
            # Ended mirrors go at once: "window ends" exercises the deletion under faults
            # (the retention of usage records is tested in tests/reconciler).
            "USAGE_RETENTION_DAYS": "0",
        }
        self.settings, _ = rs.load(env)
        app = wrap(self.app_client)
        return Reconciler(
            self.settings, wrap(self.gateway), app, self.clock, leases=app, victims=app
        )

    def restart(self, wrap: Callable[[Any], Any] = lambda x: x) -> None:
        """A new reconciler process on the same cluster and app: nothing in memory
        survives. ``wrap`` wraps its gateway and app client (e.g. a kill switch)."""
        self.reconciler = self._reconciler(self._key, wrap)

    async def reset(self, wrap: Callable[[Any], Any] = lambda x: x) -> None:
        """A clean start for the next cell on the same emulators (``wrap``: as for
        ``restart``)."""
        await self.clear()
        self.booked = []
        self.leases = False
        self.clock.set(self.start)
        section = parse_section(self.ctx.scenario.get("app"))
        self.emulator.state = build_state(section, self.start)
        self.emulator.policies = Policies(seed=section.seed)
        self._key = self.emulator.state.mint_key(KeyScope.READ_WRITE).key
        await self.app_client.aclose()
        self.app_client = self._client(self._key)
        self.reconciler = self._reconciler(self._key, wrap)
        ns = self.ctx.namespace
        for obj in (await self.gateway.list_all(GPU_RESERVATIONS, ns)).items:
            await self.gateway.delete(GPU_RESERVATIONS, obj["metadata"]["name"], ns)
        for user in USERS:
            for res in (PODS, EVENTS):
                for obj in (await self.gateway.list_all(res, user)).items:
                    await self.gateway.delete(res, obj["metadata"]["name"], user)

    # --- the app ------------------------------------------------------------------------

    async def book(
        self, user: str = "alice", gpus: int = 2, start: str = "-10m", end: str = "+1h"
    ) -> int:
        rid = await book(self.http, self.app, user=user, gpus=gpus, start=start, end=end)
        self.booked.append(rid)
        return rid

    async def control(self, path: str, body: Any = None) -> None:
        answer = await self.http.post(f"{self.app}/_sandbox/{path}", json=body)
        assert answer.status_code in (200, 201), answer.text

    @property
    def app(self) -> str:
        return self.ctx.endpoints["app"]

    # --- pods -----------------------------------------------------------------------------

    async def pod(
        self,
        name: str,
        ref: str | None,
        *,
        ns: str = "alice",
        tolerated: bool = True,
        claim: str | None = None,
    ) -> None:
        """A running a100 GPU pod; with ``ref`` as if it had been admitted under it."""
        notes = {}
        if ref is not None:
            notes = {vocab.BOOKING_REFERENCE: ref, vocab.ADMISSION_CLAIM: claim or f"c-{name}"}
        body = gpu_pod(name, ns, notes)
        body["spec"]["tolerations"] = [granted_toleration("a100")] if tolerated else []
        await self.gateway.create(PODS, body, ns)

    async def candidate(self, name: str, ns: str = "alice") -> None:
        """A just-in-time candidate: a pending 1-GPU a100 pod with a minimum runtime and
        a usage group, no booking, untolerated, and the scheduler's verdict that the
        ordinary pool has no GPU for it (as the emulated scheduler words it)."""
        notes = {vocab.MINIMUM_RUNTIME_SECONDS: "3600", vocab.USAGE_GROUP: "lab"}
        await self.gateway.create(PODS, gpu_pod(name, ns, notes), ns)
        verdict = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": f"0/2 nodes are available: 2 Insufficient {vocab.GPU_RESOURCE}.",
        }
        status = {"status": {"phase": "Pending", "conditions": [verdict]}}
        await self.gateway.patch(PODS, name, status, ns, "merge", "status")

    # --- faults -----------------------------------------------------------------------------

    async def inject(self, fault: Fault) -> None:
        if fault.target == "app":
            await self.control("faults", fault.spec)
        else:
            self.kube.faults.add(**fault.spec)

    async def clear(self) -> None:
        answer = await self.http.delete(f"{self.app}/_sandbox/faults")
        assert answer.status_code == 204, answer.text
        self.kube.faults.clear()

    # --- the reconciler's passes ------------------------------------------------------------

    async def relist(self) -> None:
        """The caches LIST (a failure keeps what they held, as the watch loop does)."""
        caches = self.reconciler.caches
        for cache in (caches.pods, caches.reservations):
            with suppress(KubeError):
                await cache.relist()

    async def poll(self) -> None:
        """One full round: the sync, then every pass that reacts to it (upkeep, the
        evictor, the backstop, the queue's admissions, no-shows), each on freshly
        listed caches."""
        r = self.reconciler
        await r.syncer.sync_once()
        await self.relist()
        await r.caches.keeper.once()
        await self.relist()
        await r.upholders.evictor.once()
        await r.backstop.once()
        await self.relist()
        await r.caches.keeper.once()
        await r.admitter.once()
        await r.noshows.once()
        await self.relist()
        await r.caches.keeper.once()
        if self.leases and r.leaser is not None:
            await r.leaser.once()
            # The batch announces its admissions in the background; here they finish
            # in the round (a kill in them stops the round, as it would the process).
            await asyncio.gather(*r.leaser._announcing)
            await self.relist()
            await r.caches.keeper.once()

    async def advance(self, seconds: float) -> None:
        await self.clock.advance(seconds)

    # --- what the invariants read -------------------------------------------------------------

    async def observe(self) -> State:
        ns = self.ctx.namespace
        objs = (await self.gateway.list_all(GPU_RESERVATIONS, ns)).items
        specs = {o["metadata"]["name"]: _spec(o) for o in objs}
        holds = {
            o["metadata"]["name"]: sorted(
                (h.get("pod"), int(h.get("gpus", 0)))
                for h in (o.get("status") or {}).get("holds") or []
            )
            for o in objs
        }
        pods: set[str] = set()
        events: Counter[tuple[str, str]] = Counter()
        for user in USERS:
            for pod in (await self.gateway.list_all(PODS, user)).items:
                if not pod["metadata"].get("deletionTimestamp"):
                    pods.add(f"{user}/{pod['metadata']['name']}")
            for event in (await self.gateway.list_all(EVENTS, user)).items:
                events[(f"{user}/{event['involvedObject']['name']}", event["reason"])] += 1
        app = {
            rid: (str(r.status), getattr(r, "cancel_reason", None))
            for rid, r in self.emulator.state.reservations.items()
        }
        return State(specs, holds, pods, events, app)


def gpu_pod(name: str, ns: str, notes: dict[str, str]) -> dict[str, Any]:
    """A 1-GPU a100 pod with ``notes`` as its annotations (no tolerations)."""
    return PodBuilder(name, ns).cls("a100").gpus("1").notes(notes).build()


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = dict(obj.get("spec") or {})
    spec.pop("updatedAt", None)  # the app's clock: equal runs differ only here
    return spec


async def no_wait(seconds: float) -> None:
    """The harness gateway's wait for a ``Retry-After``: none (a turn of the loop)."""
    await asyncio.sleep(0)


@asynccontextmanager
async def fault_world(tmp_path: Path, start: datetime = T0) -> AsyncIterator[FaultWorld]:
    """Kube + app emulators on a manual clock at ``start``; the CRD installed."""
    kit = emulators(tmp_path, clock=WorldClock(start), http_timeout_s=10, sleep=no_wait)
    async with kit as e:
        world = FaultWorld(e.ctx, e.gateway, e.http)
        try:
            yield world
        finally:
            await world.app_client.aclose()


#: A scenario step: acts on the world (no fault active).
Step = Callable[[FaultWorld], Awaitable[None]]
MINUTE = timedelta(minutes=1)
