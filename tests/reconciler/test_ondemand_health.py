"""The reservation app's health: what changes it, and where the leader publishes it.

The leader carries the health annotation in its own Lease writes (no separate write
that could make its renew conflict); a standby taking over keeps the previous value
until it knows better; the value reads back as written, and malformed values read as
unknown.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from reconciler.base.apphealth import AppHealth, Health, format_health, is_outage, parse_health
from reconciler.base.settings import LeaderSettings
from reconciler.leader import Elector
from shared import vocab
from shared.appclient import Denied, Fetched, Rejected, Transient, TransientReason
from shared.appclient.outcomes import Denial
from shared.clock import ManualClock, utc
from shared.resources import LEASES
from tests.fakekube import FakeKube

T0 = utc(2026, 1, 5, 9)
LEASE = LeaderSettings(enabled=True, lease_s=15.0, renew_s=5.0)


@pytest.mark.parametrize(
    ("result", "outage"),
    [
        (Transient(TransientReason.NETWORK), True),
        (Transient(TransientReason.TIMEOUT), True),
        (Transient(TransientReason.SERVER_ERROR, status=503), True),
        (Transient(TransientReason.MALFORMED), False),
        (Transient(TransientReason.UNSTABLE), False),
        (Denied(Denial()), False),
        (Rejected("gpu class 7"), False),
        (Fetched(()), False),
    ],
)
def test_only_a_call_the_app_did_not_answer_is_an_outage(result: object, outage: bool) -> None:
    assert is_outage(result) is outage


def test_only_changes_are_heard_and_since_is_when_the_state_began() -> None:
    clock = ManualClock(T0)
    health = AppHealth(clock)
    heard: list[Health] = []
    health.listeners.append(heard.append)
    assert health.annotations() == {}
    health.note(Transient(TransientReason.NETWORK))
    asyncio.run(clock.advance(30))
    health.note(Transient(TransientReason.SERVER_ERROR, status=503))
    assert heard == [Health(False, T0)]
    assert health.annotations() == {
        vocab.APP_HEALTH_ANNOTATION: "unreachable since 2026-01-05T09:00:00Z"
    }
    health.note(Fetched(()))
    assert heard[-1] == Health(True, T0 + timedelta(seconds=30))
    assert len(heard) == 2


@pytest.mark.parametrize(
    "text",
    [
        None,
        7,
        "",
        "ok",
        "ok since",
        "ok since yesterday",
        "down since 2026-01-05T09:00:00Z",
        "ok 2026-01-05T09:00:00Z",
    ],
)
def test_a_malformed_value_reads_as_unknown(text: Any) -> None:
    assert parse_health(text) is None


def test_the_value_reads_back() -> None:
    for ok in (True, False):
        assert parse_health(format_health(Health(ok, T0))) == Health(ok, T0)


def test_the_leader_publishes_the_health_in_its_own_renew_writes() -> None:
    async def scenario() -> None:
        kube = FakeKube()
        clock = ManualClock(T0)
        health = AppHealth(clock)
        a = Elector(kube, "ns", "a", clock, LEASE, lambda _l: None, health.annotations)
        b = Elector(kube, "ns", "b", clock, LEASE, lambda _l: None)

        def lease() -> dict[str, Any]:
            return kube.objects[(LEASES.plural, "ns", vocab.LEADER_LEASE_NAME)]

        await a.step()
        assert vocab.APP_HEALTH_ANNOTATION not in (lease()["metadata"].get("annotations") or {})
        health.note(Transient(TransientReason.NETWORK))
        await clock.advance(5)
        await a.step()
        assert a.is_leader  # the publication cost the renew nothing
        published = lease()["metadata"]["annotations"][vocab.APP_HEALTH_ANNOTATION]
        assert parse_health(published) == Health(False, T0)
        # b takes a lapsed Lease over knowing nothing of the app: the last value stays.
        await b.step()
        await clock.advance(16)
        await b.step()
        assert b.is_leader
        assert lease()["metadata"]["annotations"][vocab.APP_HEALTH_ANNOTATION] == published

    asyncio.run(scenario())
