"""Holds whose pod never appears are released within seconds (LEDGER_UNSEEN_HOLD_SECONDS),
on a timer, counted; holds of live pods are kept, after the window too."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from reconciler.base.settings import load
from reconciler.base.upkeep import Keeper
from shared import model
from shared.clock import ManualClock
from shared.model import Hold, claim_key
from shared.resources import GPU_RESERVATIONS
from shared.settings import SettingsError
from tests.reconciler.builders import NS
from tests.reconciler.test_upkeep import NOW, TTL, World, gpu_pod, run, settle, tick

UNSEEN = 10.0


def keeper(w: World, counted: list[int], later_s: float = 0.0) -> Keeper:
    if later_s:
        w.clock = ManualClock(NOW + timedelta(seconds=later_s))
    return Keeper(
        w.kube,
        NS,
        w.clock,
        TTL,
        w.uses,
        w.cached,
        lambda: True,
        unseen_s=UNSEEN,
        on_unseen=counted.append,
    )


def test_a_hold_whose_pod_never_appears_goes_after_the_unseen_limit_on_a_timer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hand-made review made a hold at NOW - 4 s: still there 5 s later, gone (and
    counted once) when it is 10 s old — the tick is an hour away."""
    caplog.set_level(logging.WARNING)

    async def scenario() -> None:
        w = World((Hold("forged", 2, NOW - timedelta(seconds=4)),))
        counted: list[int] = []
        k = keeper(w, counted)
        task = asyncio.create_task(k.run(3600.0))
        await settle()
        await tick(w.clock, 5)
        assert [h.claim for h in w.holds()] == [claim_key("forged")]
        await tick(w.clock, 1.5)
        assert w.holds() == ()
        assert counted == [1]
        assert k.unseen_released == 1
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(scenario())
    assert "ledger.unseen_released" in caplog.text


def test_a_hold_whose_pod_appears_in_time_is_bound_not_released() -> None:
    w = World((Hold("c1", 1, NOW - timedelta(seconds=9)),))
    w.pods = [gpu_pod("p1", "res-1", "c1")]
    counted: list[int] = []
    k = keeper(w, counted, later_s=30)
    assert run(k.once()) == ["res-1"]
    (hold,) = w.holds()
    assert hold.pod_uid == "uid-p1"
    assert counted == []


def test_a_pod_persisted_after_its_hold_was_released_is_adopted_while_there_is_room() -> None:
    w = World((Hold("slow", 1, NOW - timedelta(seconds=11)),))
    counted: list[int] = []
    k = keeper(w, counted)
    assert run(k.once()) == ["res-1"]
    assert w.holds() == ()
    assert counted == [1]
    w.pods = [gpu_pod("late", "res-1", "slow")]
    assert run(k.once()) == ["res-1"]
    (hold,) = w.holds()
    assert (hold.claim, hold.pod_uid) == (claim_key("slow"), "uid-late")


def due_after(unseen_s: float) -> timedelta:
    """How long after an unbound hold's ``at`` its release pass is due."""
    return timedelta(seconds=unseen_s + 0.01)


def test_the_unseen_limit_never_exceeds_the_claim_ttl() -> None:
    w = World((Hold("h", 1, NOW - timedelta(seconds=5)),))
    k = Keeper(w.kube, NS, w.clock, 3.0, w.uses, w.cached, lambda: True, unseen_s=UNSEEN)
    assert k.unbound_due() == NOW - timedelta(seconds=5) + due_after(3.0)  # past the 3 s TTL


def test_a_bound_hold_of_a_live_pod_is_kept_after_the_window_ends() -> None:
    """Overstay is preemption's business: upkeep keeps the hold of a pod still running."""
    w = World((Hold("c1", 1, NOW, "p1", "uid-p1"),))
    w.pods = [gpu_pod("p1", "res-1", "c1")]
    k = keeper(w, [], later_s=86400)
    assert run(k.once()) == []
    assert [h.pod_uid for h in w.holds()] == ["uid-p1"]


def base_env() -> dict[str, str]:
    return {"RESERVATION_API_URL": "http://app", "RESERVATION_API_KEY": "k"}


def test_the_setting_defaults_to_ten_seconds_and_is_bounded_by_the_ttl() -> None:
    settings, _ = load(base_env())
    assert settings.ledger_unseen_hold_s == 10
    assert settings.unseen_s == 10.0
    short, _ = load({**base_env(), "LEDGER_CLAIM_TTL_SECONDS": "4"})
    assert short.unseen_s == 4.0
    longer, _ = load({**base_env(), "LEDGER_UNSEEN_HOLD_SECONDS": "30"})
    assert longer.unseen_s == 30.0


@pytest.mark.parametrize("value", ["0", "-1", "ten", "1.5", "86401", "1e3"])
def test_a_malformed_unseen_limit_is_refused_by_name(value: str) -> None:
    with pytest.raises(SettingsError) as err:
        load({**base_env(), "LEDGER_UNSEEN_HOLD_SECONDS": value})
    assert "LEDGER_UNSEEN_HOLD_SECONDS" in str(err.value)


def test_the_next_pass_follows_the_ledger_as_it_changes() -> None:
    """The wake-up for an unbound hold's release is read from the reservation as the
    cache holds it now: a hold bound meanwhile no longer brings the pass forward, a new
    unbound hold does."""
    w = World((Hold("h", 1, NOW - timedelta(seconds=5)),))
    k = keeper(w, [])
    assert k.unbound_due() == NOW - timedelta(seconds=5) + due_after(UNSEEN)
    w.pods = [gpu_pod("p1", "res-1", "h")]
    assert run(k.once()) == ["res-1"]  # bound
    assert k.unbound_due() is None
    obj = w.kube.objects[(GPU_RESERVATIONS.plural, NS, "res-1")]
    obj["status"]["holds"].append(model.hold_to_status(Hold("new", 1, NOW)))
    assert k.unbound_due() == NOW + due_after(UNSEEN)
