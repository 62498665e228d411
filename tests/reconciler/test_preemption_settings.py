"""The seed's preemption variables: defaults, values, and the lenient fallback."""

from __future__ import annotations

from datetime import timedelta

import pytest

from reconciler.base.settings import load
from shared.settings import SettingsError

BASE = {"RESERVATION_API_URL": "http://a", "RESERVATION_API_KEY": "k"}


def test_defaults_are_the_seeds() -> None:
    p = load(BASE)[0].preemption
    assert (p.lead, p.interval_s, p.delegate, p.warnings) == (timedelta(minutes=15), 60, True, True)
    assert (p.warning_lead, p.headroom_percent, p.overstay_report) == (
        timedelta(minutes=30),
        0,
        False,
    )
    assert (p.headroom_notice, p.headroom_interval_s) == (timedelta(minutes=15), 600)


def test_values_are_read() -> None:
    env = {
        **BASE,
        "PREEMPTION_LEAD_MINUTES": "0",
        "PREEMPTION_CHECK_INTERVAL": "5",
        "PREEMPTION_DELEGATE_SELECTION": "off",
        "TERMINATION_WARNING_ENABLED": "No",
        "HEADROOM_TARGET_PERCENT": "100",
        "OVERSTAY_REPORT_ENABLED": " TRUE ",
    }
    p = load(env)[0].preemption
    assert (p.lead, p.interval_s, p.delegate, p.warnings) == (timedelta(0), 5, False, False)
    assert (p.headroom_percent, p.overstay_report) == (100, True)


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("PREEMPTION_LEAD_MINUTES", "ten", "not_an_integer"),
        ("PREEMPTION_CHECK_INTERVAL", "0", "out_of_range"),
        ("HEADROOM_TARGET_PERCENT", "101", "out_of_range"),
        ("HEADROOM_NOTICE_MINUTES", "-1", "out_of_range"),
        ("TERMINATION_WARNING_LEAD_MINUTES", "1.5", "not_an_integer"),
    ],
)
def test_a_bad_number_falls_back_to_the_default_with_a_notice(
    name: str, value: str, reason: str
) -> None:
    settings, reader = load({**BASE, name: value})
    assert settings.preemption == load(BASE)[0].preemption
    assert [(n.variable, n.reason) for n in reader.notices] == [(name, reason)]


def test_an_unknown_boolean_word_quietly_keeps_the_default() -> None:
    settings, reader = load({**BASE, "PREEMPTION_DELEGATE_SELECTION": "maybe"})
    assert settings.preemption.delegate is True
    assert reader.notices == []


def test_eviction_grace_defaults_to_a_minute_and_is_read() -> None:
    assert load(BASE)[0].preemption.grace_s == 60
    assert load({**BASE, "EVICTION_GRACE_SECONDS": ""})[0].preemption.grace_s == 60  # unset
    assert load({**BASE, "EVICTION_GRACE_SECONDS": "5"})[0].preemption.grace_s == 5


@pytest.mark.parametrize("value", ["0", "-3", "86401", "1.5", "a minute", " 6 0"])
def test_a_bad_eviction_grace_stops_the_process_naming_it(value: str) -> None:
    with pytest.raises(SettingsError, match="EVICTION_GRACE_SECONDS"):
        load({**BASE, "EVICTION_GRACE_SECONDS": value})
