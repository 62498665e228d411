"""Guarded tasks flip /health; settings read from the environment."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from reconciler.base import settings as rs
from reconciler.base.caches import STALL_S, Caches
from reconciler.base.metrics import Metrics
from reconciler.base.tasks import Tasks
from reconciler.http import HttpState, build_app
from reconciler.mirror.sync import Syncer
from reconciler.process import Reconciler
from shared.clock import ManualClock, SystemClock
from shared.errors import Forbidden
from shared.resources import GPU_RESERVATIONS, PODS
from shared.settings import SettingsError
from tests.fakekube import FakeKube
from tests.reconciler.builders import NS, START, FakeSource, relisting

REQUIRED = {"RESERVATION_API_URL": "http://app/", "RESERVATION_API_KEY": "gpures_x"}


async def get(app, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.get(path)


def test_health_is_503_naming_a_crashed_or_exited_task() -> None:
    async def scenario() -> None:
        tasks, metrics = Tasks(), Metrics()
        syncer = Syncer(FakeSource(), FakeKube(), NS, ManualClock(), metrics, 7)
        app = build_app(HttpState(tasks, metrics, syncer, None, lambda: True))
        assert (await get(app, "/health")).json() == {"status": "ok", "leader": True}

        async def boom() -> None:
            raise RuntimeError("kaput")

        async def quits() -> None:
            return None

        forever = asyncio.Event()

        async def waits() -> None:
            await forever.wait()

        tasks.spawn("fine", waits)
        tasks.spawn("sync", boom)
        tasks.spawn("queue", quits)
        for _ in range(200):  # both guards record their outcome within a few loop turns
            if len(tasks.failed) == 2:
                break
            await asyncio.sleep(0.005)
        answer = await get(app, "/health")
        assert answer.status_code == 503
        assert answer.json()["failed"] == {
            "sync": "crashed: RuntimeError: kaput",
            "queue": "exited",
        }
        text = (await get(app, "/metrics")).text
        assert 'gpu_reservation_background_task_failed{task="sync"} 1.0' in text
        await tasks.cancel()
        assert tasks.running() == []

    asyncio.run(scenario())


def test_settings_defaults() -> None:
    settings, reader = rs.load(REQUIRED)
    assert settings.api_url == "http://app"
    assert settings.api_key.value == "gpures_x"
    assert "gpures_x" not in repr(settings)
    assert (settings.fetch_interval_s, settings.lookahead_days, settings.http_port) == (
        300,
        7,
        8000,
    )
    assert settings.inbound_token is None
    assert settings.ledger_claim_ttl_s == 120
    assert settings.leader == rs.LeaderSettings(True, 15.0, 5.0)
    assert isinstance(settings.clock.build(), SystemClock)
    assert reader.notices == []


def test_seed_numbers_fall_back_with_a_notice() -> None:
    env = {**REQUIRED, "RESERVATION_FETCH_INTERVAL": "often", "HTTP_PORT": "70000"}
    settings, reader = rs.load(env)
    assert (settings.fetch_interval_s, settings.http_port) == (300, 8000)
    assert [(n.variable, n.reason) for n in reader.notices] == [
        ("RESERVATION_FETCH_INTERVAL", "not_an_integer"),
        ("HTTP_PORT", "out_of_range"),
    ]


def test_new_variables_are_strict_and_every_problem_is_listed() -> None:
    env = {
        "LEDGER_CLAIM_TTL_SECONDS": "0",
        "LEADER_ELECTION_LEASE_SECONDS": "5",
        "LEADER_ELECTION_RENEW_SECONDS": "6",
        "LEADER_ELECTION_ENABLED": "maybe",
        "CLOCK_EPOCH": "noon",
    }
    with pytest.raises(SettingsError) as err:
        rs.load(env)
    text = str(err.value)
    for name in [
        "RESERVATION_API_URL",
        "RESERVATION_API_KEY",
        "LEDGER_CLAIM_TTL_SECONDS",
        "LEADER_ELECTION_RENEW_SECONDS",
        "LEADER_ELECTION_ENABLED",
        "CLOCK_EPOCH",
    ]:
        assert name in text


def test_backstop_exempt_namespaces_default_list_and_malformed() -> None:
    settings, _ = rs.load(REQUIRED)
    assert settings.exempt_namespaces == frozenset({"kube-system"})
    settings, _ = rs.load({**REQUIRED, "UNADMITTED_EXEMPT_NAMESPACES": " monitoring, ,gpu-ops "})
    assert settings.exempt_namespaces == frozenset({"monitoring", "gpu-ops"})
    with pytest.raises(SettingsError) as err:
        rs.load({**REQUIRED, "UNADMITTED_EXEMPT_NAMESPACES": "kube-system,Bad_NS,-x"})
    assert "UNADMITTED_EXEMPT_NAMESPACES: not namespace names: -x, Bad_NS" in str(err.value)


def test_identity_falls_back_to_hostname() -> None:
    settings, _ = rs.load({**REQUIRED, "HOSTNAME": "pod-xyz"})
    assert settings.identity == "pod-xyz"
    settings, _ = rs.load({**REQUIRED, "HOSTNAME": "pod-xyz", "POD_NAME": "rec-0"})
    assert settings.identity == "rec-0"


def test_health_is_503_naming_a_cache_whose_list_keeps_failing() -> None:
    """Known limitation decided: a watch that never syncs (e.g. its LIST refused by
    RBAC) must not leave the leader waiting behind a green /health."""

    async def scenario() -> None:
        kube, clock, metrics = FakeKube(), ManualClock(), Metrics()
        settings, _ = rs.load({**REQUIRED, "POD_NAMESPACE": NS})
        caches = Caches(relisting(kube), settings, clock)
        now = [0.0]
        for cache in (caches.pods, caches.nodes, caches.reservations):
            cache._monotonic = lambda: now[0]
        syncer = Syncer(FakeSource(), kube, NS, clock, metrics, 7)
        state = HttpState(Tasks(), metrics, syncer, None, lambda: True)
        state.stalled = lambda: caches.stalled(STALL_S)
        app = build_app(state)
        real = kube.list_all

        async def refuse(res, *args, **kwargs):
            if res is PODS:
                raise Forbidden(403, "pods is forbidden: cannot list resource")
            return await real(res, *args, **kwargs)

        kube.list_all = refuse  # type: ignore[method-assign]
        task = asyncio.create_task(caches.pods.run())
        await asyncio.sleep(0)
        now[0] = STALL_S - 1
        assert (await get(app, "/health")).status_code == 200  # within the grace
        now[0] = STALL_S
        answer = await get(app, "/health")
        assert answer.status_code == 503
        assert answer.json()["unsynced"] == ["pods"]
        kube.list_all = real  # type: ignore[method-assign]
        await clock.advance(1.0)  # the retry LISTs and syncs
        await asyncio.sleep(0)
        assert caches.pods.synced.is_set()
        assert (await get(app, "/health")).status_code == 200
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


class Victims:
    """An app that selects victims and takes overstay reports (nothing is called)."""

    async def select_victims(self, *args: Any) -> Any:
        raise AssertionError("not called")

    async def report_overstay(self, *args: Any) -> Any:
        raise AssertionError("not called")


def composed(victims: Victims | None, **env: str) -> Reconciler:
    base = {"RESERVATION_API_URL": "http://a", "RESERVATION_API_KEY": "k", "POD_NAMESPACE": NS}
    settings, _ = rs.load({**base, **env})
    kube = relisting(FakeKube())
    return Reconciler(settings, kube, FakeSource(), ManualClock(START), victims=victims)  # type: ignore[arg-type]


def test_the_leader_runs_the_loops_of_its_components_in_order() -> None:
    """``process.py`` lists components; the leader's loops are theirs, in that order."""
    r = composed(None)
    names = [name for name, _ in r.leader_loops()]
    assert names == [name for c in r.components for name, _ in c.loops()]
    assert names[0] == "reservation-sync"
    assert names[-3:] == ["capacity-audit", "no-show", "usage"]
    assert "ondemand-leases" not in names  # no lease app handed over


def test_preemption_asks_the_app_only_when_it_is_handed_over_as_victims() -> None:
    """The sweep asks the app for victims, and overstays are reported, only through
    the capability the process is handed (``victims``), never found by inspection."""
    alone = composed(None, OVERSTAY_REPORT_ENABLED="true")
    victims = Victims()
    asked = composed(victims, OVERSTAY_REPORT_ENABLED="true")
    assert alone.sweeper._app is None
    assert asked.sweeper._app is victims
    # The overstay reporter listens to the pod cache only when there is an app to tell.
    assert len(asked.caches.pods.listeners) == len(alone.caches.pods.listeners) + 1


def test_the_leaders_full_sync_reads_live_references_from_its_pod_cache() -> None:
    """Before the pod cache holds a LIST (the startup sync) a full sync lists every pod;
    once it does, the sync asks the cache and lists none."""
    r = composed(None)
    kube = r.caches.pods._gateway
    assert isinstance(kube, FakeKube)
    asyncio.run(r.syncer.sync_once())
    assert ("list", PODS.plural) in kube.calls
    asyncio.run(r.caches.pods.relist())
    kube.calls.clear()
    asyncio.run(r.syncer.sync_once())
    assert ("list", GPU_RESERVATIONS.plural) in kube.calls  # a full pass ran
    assert ("list", PODS.plural) not in kube.calls
