"""``GET /api/forecast/preemption-risk`` over the HTTP app: auth, 503 on unknown
physical state, the body from the caches, and the standby's own watches."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx

from reconciler.base.pods import project_pod
from reconciler.base.settings import load
from reconciler.http import HttpState, build_app
from reconciler.preemption.forecast import forecaster, pending_jit
from reconciler.process import Reconciler
from shared import model, vocab
from shared.clock import ManualClock
from shared.policy.matching import MatchRules
from shared.resources import GPU_RESERVATIONS, NODES, PODS
from tests.fakekube import FakeKube
from tests.reconciler.builders import END, NS, START, FakeSource
from tests.reconciler.test_sweep import node

NOW = START + timedelta(hours=1)
TOKEN = "forecast-token"
URL = "/api/forecast/preemption-risk"


def reconciler(kube: FakeKube, token: str | None = TOKEN) -> Reconciler:
    env = {"RESERVATION_API_URL": "http://a", "RESERVATION_API_KEY": "k", "POD_NAMESPACE": NS}
    if token is not None:
        env["INBOUND_API_TOKEN"] = token
    settings, _ = load(env)
    return Reconciler(settings, kube, FakeSource(), ManualClock(NOW))  # type: ignore[arg-type]


def pod(name: str, namespace: str = "alice", **notes: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": {vocab.GPU_CLASS_LABEL: "a100"},
            "annotations": {vocab.BOOKING_REFERENCE: "res-1", **notes},
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{"resources": {"limits": {vocab.GPU_RESOURCE: "1"}}}],
        },
        "status": {"phase": "Running"},
    }


class QuietKube(FakeKube):
    """The fake API with a watch that stays open and quiet (the LIST is the state)."""

    async def watch(self, *args: Any, **kw: Any) -> AsyncIterator[Any]:
        await asyncio.Event().wait()
        yield None


def world() -> FakeKube:
    kube = QuietKube()
    facts = model.ReservationFacts(
        1, "alice", "a100", "A100", 2, model.Kind.BOOKING, START, END, model.State.ACTIVE, START
    )
    kube.add(GPU_RESERVATIONS, model.to_object(model.GPUReservation(facts), NS, NOW), NS)
    kube.add(NODES, node("n1"))
    kube.add(PODS, pod("a"), "alice")
    kube.add(PODS, pod("b", "bob"), "bob")
    return kube


async def get(r: Reconciler, auth: str | None = f"Bearer {TOKEN}", **params: str) -> httpx.Response:
    state = HttpState(
        r.tasks,
        r.metrics,
        r.syncer,
        r.settings.inbound_token,
        lambda: r.is_leader,
        forecaster(
            lambda: r.caches if r.is_leader else r.standby.caches,
            r.settings.preemption,
            r.settings.rules,
            r.clock,
        ),
    )
    transport = httpx.ASGITransport(app=build_app(state))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        headers = {"Authorization": auth} if auth is not None else {}
        return await client.get(URL, params=params, headers=headers)


def test_503_while_the_node_watch_has_not_listed_then_200() -> None:
    async def scenario() -> None:
        r = reconciler(world())
        r._leading = True
        await r.caches.pods.relist()
        await r.caches.reservations.relist()
        answer = await get(r)
        assert answer.status_code == 503
        assert "not known" in answer.json()["detail"]
        await r.caches.nodes.relist()
        answer = await get(r)
        assert answer.status_code == 200
        body = answer.json()
        assert [p["name"] for p in body["pods"]] == ["a", "b"]
        pods = {p["name"]: p for p in body["pods"]}
        assert pods["a"]["buckets"][0] == {"risk": 0.0, "state": vocab.GUARANTEE_STATUS_GUARANTEED}
        assert body["buckets"][0]["classes"]["a100"]["capacity"] == 2
        only = (await get(r, namespace="bob")).json()
        assert [p["name"] for p in only["pods"]] == ["b"]

    asyncio.run(scenario())


def test_auth_401_and_503_when_the_token_is_unset() -> None:
    async def scenario() -> None:
        r = reconciler(world())
        assert (await get(r, auth=None)).status_code == 401
        wrong = await get(r, auth="Bearer nope")
        assert wrong.status_code == 401
        assert wrong.headers["www-authenticate"] == "Bearer"
        assert (await get(r, auth="Basic " + TOKEN)).status_code == 401
        off = reconciler(world(), token=None)
        answer = await get(off)
        assert answer.status_code == 503
        assert "disabled" in answer.json()["detail"]

    asyncio.run(scenario())


def test_a_standby_answers_from_its_own_watches_and_drops_them_when_it_leads() -> None:
    async def scenario() -> None:
        r = reconciler(world())
        r.leader_loops = list  # type: ignore[method-assign]
        r.standby.start()
        assert sorted(r.standby.tasks.running()) == [
            "watch-nodes",
            "watch-pods",
            "watch-reservations",
        ]
        for _ in range(50):
            await asyncio.sleep(0)
            if r.standby.caches.inventory() is not None and r.standby.caches.ready():
                break
        answer = await get(r)
        assert answer.status_code == 200
        assert len(answer.json()["pods"]) == 2
        r._on_leadership(True)
        for _ in range(20):
            await asyncio.sleep(0)
        assert r.standby.tasks.running() == []
        assert not r.standby.caches.ready()
        r._on_leadership(False)
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(r.standby.tasks.running()) == 3
        await r.standby.stop()

    asyncio.run(scenario())


def test_pending_jit_counts_eligible_unadmitted_unbound_ungated_live_pods() -> None:
    rules = MatchRules()
    raw = pod("w")
    raw["metadata"]["annotations"] = {
        vocab.MINIMUM_RUNTIME_SECONDS: "3600",
        vocab.USAGE_GROUP: "lab",
    }
    raw["spec"].pop("nodeName")
    raw["status"]["phase"] = "Pending"
    gated = {**raw, "spec": {**raw["spec"], "schedulingGates": [{"name": "g"}]}}
    no_runtime = {**raw, "metadata": {**raw["metadata"], "name": "n", "annotations": {}}}
    views = [project_pod(p, rules) for p in (raw, gated, no_runtime, pod("bound"))]
    assert pending_jit((v for v in views if v is not None), rules) == {"a100": 1}
