"""The reconciler's periodic certificate check (``reconciler.rotation``), manual clock."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from certs.plan import Action, Policy
from reconciler.base import settings as reconciler_settings
from reconciler.base.settings import RotationSettings, rotation_from
from reconciler.rotation import ROTATION_TASK, Rotator
from shared.clock import ManualClock
from shared.errors import Forbidden
from shared.resources import MUTATING_WEBHOOK_CONFIGURATIONS, SECRETS
from shared.settings import EnvReader, SettingsError
from tests.fakekube import FakeKube

from .helpers import NAMESPACE, NOW, SERVICE
from .test_apply import TARGET, configuration

SETTINGS = RotationSettings(3600.0, TARGET, Policy())
ENV = {
    "CERT_CHECK_INTERVAL": "3600",
    "POD_NAMESPACE": NAMESPACE,
    "CERTS_SERVICE_NAME": SERVICE,
    "CERTS_SECRET_NAME": TARGET.secret,
    "CERTS_CA_SECRET_NAME": TARGET.ca_secret,
    "CERTS_WEBHOOK_CONFIGURATION": TARGET.webhook_configuration,
    "CERTS_RENEW_BEFORE_DAYS": "30",
}


def kube() -> FakeKube:
    fake = FakeKube()
    fake.add(MUTATING_WEBHOOK_CONFIGURATIONS, configuration())
    return fake


def test_off_unless_an_interval_is_set() -> None:
    assert rotation_from(EnvReader({})) is None
    assert rotation_from(EnvReader({"CERT_CHECK_INTERVAL": "0"})) is None
    assert Rotator(kube(), None, ManualClock(NOW)).loops() == []


def test_reads_the_hook_jobs_names() -> None:
    reader = EnvReader(ENV)
    found = rotation_from(reader)
    assert reader.problems == []
    assert found == SETTINGS


def test_bad_names_or_lifetimes_are_settings_problems() -> None:
    reader = EnvReader({**ENV, "CERTS_SECRET_NAME": "Not A Name", "CERTS_VALIDITY_DAYS": "10"})
    assert rotation_from(reader) is None
    assert len(reader.problems) == 2, reader.problems
    assert all(p.startswith("CERT_CHECK_INTERVAL is set: ") for p in reader.problems)


def test_the_reconciler_settings_carry_it() -> None:
    base = {"RESERVATION_API_URL": "http://app", "RESERVATION_API_KEY": "k"}
    off, _ = reconciler_settings.load(base)
    assert off.rotation is None
    on, _ = reconciler_settings.load({**base, **ENV})
    assert on.rotation == SETTINGS
    with pytest.raises(SettingsError):
        reconciler_settings.load({**base, **ENV, "CERTS_RENEW_BEFORE_DAYS": "0"})


def test_checks_at_once_then_every_interval_renewing_only_when_due() -> None:
    async def scenario() -> None:
        fake, clock = kube(), ManualClock(NOW)
        rotator = Rotator(fake, SETTINGS, clock)
        assert [name for name, _ in rotator.loops()] == [ROTATION_TASK]
        task = asyncio.create_task(rotator.run())
        await _settle(clock)
        first = fake.read(SECRETS, TARGET.secret, NAMESPACE)
        writes = fake.writes
        await clock.advance(3600)
        await _settle(clock)
        assert fake.writes == writes  # still good: a check only reads
        await clock.advance(timedelta(days=340).total_seconds())
        await _settle(clock)
        renewed = fake.read(SECRETS, TARGET.secret, NAMESPACE)
        assert renewed["data"]["tls.crt"] != first["data"]["tls.crt"]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


async def _settle(clock: ManualClock) -> None:
    for _ in range(50):
        if clock.pending_sleepers():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the rotation loop did not go back to sleep")


def refusing() -> FakeKube:
    """A kube whose every GET is refused by RBAC."""
    fake = FakeKube()
    fake.faults["get"] = Forbidden(403, "secrets is forbidden", "Forbidden")
    return fake


def test_a_failed_check_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        clock = ManualClock(NOW)
        rotator = Rotator(refusing(), SETTINGS, clock)
        assert await rotator.check_once() is None
        task = asyncio.create_task(rotator.run())
        await _settle(clock)
        await clock.advance(3600)
        await _settle(clock)
        assert not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    assert "certs.check_failed" in caplog.text


def test_a_good_check_reports_keep() -> None:
    async def scenario() -> None:
        fake, clock = kube(), ManualClock(NOW)
        rotator = Rotator(fake, SETTINGS, clock)
        first = await rotator.check_once()
        again = await rotator.check_once()
        assert first is not None
        assert first.action is Action.RENEW_ALL
        assert again is not None
        assert (again.action, again.changed) == (Action.KEEP, False)

    asyncio.run(scenario())
