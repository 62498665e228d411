"""The spare-hold settings the webhook reads (``webhook.settings``): defaults, the age
limit derived from the reconciler's claim TTL, and malformed values refused with every
problem named at once."""

from __future__ import annotations

import pytest

from shared.settings import SettingsError
from webhook import settings
from webhook.groupcommit import SpareRules

#: What every webhook needs set.
BASE = {"TLS_CERT_FILE": "/tls/tls.crt", "TLS_KEY_FILE": "/tls/tls.key"}


def named(problems: list[str]) -> set[str]:
    """The variables a list of problems names (``NAME='value' is …``, ``NAME is …``)."""
    return {p.split("=", 1)[0].split(" ", 1)[0] for p in problems}


def test_defaults_keep_32_spares_for_a_second_never_older_than_ten_seconds() -> None:
    loaded, _ = settings.load(BASE)
    assert loaded.spares == SpareRules(most=32, idle_s=1.0, max_age_s=10.0)


def test_the_age_limit_is_a_quarter_of_a_short_claim_ttl() -> None:
    loaded, _ = settings.load(
        {
            **BASE,
            "LEDGER_CLAIM_TTL_SECONDS": "8",
            "WEBHOOK_CLAIM_SPARES": "0",
            "WEBHOOK_SPARE_IDLE_MS": "50",
        }
    )
    assert loaded.spares == SpareRules(most=0, idle_s=0.05, max_age_s=2.0)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("WEBHOOK_CLAIM_SPARES", "-1"),
        ("WEBHOOK_CLAIM_SPARES", "129"),
        ("WEBHOOK_CLAIM_SPARES", "many"),
        ("WEBHOOK_SPARE_IDLE_MS", "9"),
        ("WEBHOOK_SPARE_IDLE_MS", "60001"),
        ("WEBHOOK_SPARE_IDLE_MS", "1.5"),
        ("LEDGER_CLAIM_TTL_SECONDS", "0"),
        ("LEDGER_CLAIM_TTL_SECONDS", "two minutes"),
    ],
)
def test_a_malformed_value_is_refused_by_name(variable: str, value: str) -> None:
    with pytest.raises(SettingsError) as raised:
        settings.load({**BASE, variable: value})
    assert named(raised.value.problems) == {variable}, raised.value.problems


def test_every_malformed_spare_setting_is_named_at_once() -> None:
    with pytest.raises(SettingsError) as raised:
        settings.load({**BASE, "WEBHOOK_CLAIM_SPARES": "x", "WEBHOOK_SPARE_IDLE_MS": "0"})
    assert named(raised.value.problems) == {"WEBHOOK_CLAIM_SPARES", "WEBHOOK_SPARE_IDLE_MS"}
