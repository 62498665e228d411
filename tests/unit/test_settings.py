"""The settings reader: strict fields list every problem; seed fields fall back."""

from __future__ import annotations

import logging

import pytest

from shared.settings import EnvReader, Notice, SecretStr, SettingsError, read_common


def test_every_invalid_strict_variable_is_reported_at_once() -> None:
    reader = EnvReader({"A": "abc", "B": "-3", "C": "maybe", "D": "x"})
    reader.integer("A", 1)
    reader.integer("B", 1, minimum=0)
    reader.boolean("C", True)
    reader.choice("D", "strip", ("strip", "deny"))
    reader.required("E")
    with pytest.raises(SettingsError) as info:
        reader.check()
    message = str(info.value)
    for name in ("A=", "B=", "C=", "D=", "E is required"):
        assert name in message
    assert len(info.value.problems) == 5


def test_seed_integers_fall_back_with_a_notice() -> None:
    reader = EnvReader({"RESERVATION_FETCH_INTERVAL": "soon", "HTTP_PORT": "70000"})
    assert reader.integer("RESERVATION_FETCH_INTERVAL", 300, minimum=1, strict=False) == 300
    assert reader.integer("HTTP_PORT", 8000, 1, 65535, strict=False) == 8000
    reader.check()  # no error
    assert reader.notices == [
        Notice("RESERVATION_FETCH_INTERVAL", "not_an_integer", "soon"),
        Notice("HTTP_PORT", "out_of_range", "70000"),
    ]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("TRUE", True), (" yes ", True), ("On", True), ("0", False), ("off", False), ("", True)],
)
def test_boolean_words(raw: str, expected: bool) -> None:
    assert EnvReader({"X": raw}).boolean("X", True) is expected


def test_seed_boolean_ignores_unknown_words_quietly() -> None:
    reader = EnvReader({"X": "perhaps"})
    assert reader.boolean("X", False, strict=False) is False
    reader.check()
    assert reader.notices == []


def test_empty_string_means_unset() -> None:
    reader = EnvReader({"S": "   "})
    assert reader.string("S") is None
    assert reader.integer("S", 7) == 7


def test_secret_is_masked() -> None:
    secret = EnvReader({"K": "gpures_abcdef"}).secret("K")
    assert isinstance(secret, SecretStr)
    assert secret.value == "gpures_abcdef"
    assert "abcdef" not in repr(secret)
    assert "abcdef" not in str(secret)


def test_unknown_timezone_falls_back_to_tz_with_a_notice() -> None:
    reader = EnvReader({"EVENT_DISPLAY_TIMEZONE": "Mars/Olympus", "TZ": "Europe/Berlin"})
    common = read_common(reader)
    assert common.display_timezone is not None
    assert str(common.display_timezone) == "Europe/Berlin"
    assert reader.notices == [Notice("EVENT_DISPLAY_TIMEZONE", "unknown_timezone", "Mars/Olympus")]


def test_a_zone_naming_a_folder_of_the_zone_database_falls_back_too() -> None:
    # "America" is a directory of the database: ZoneInfo raises IsADirectoryError (an
    # OSError), which must be a notice and a fallback, not a crash at start.
    reader = EnvReader({"EVENT_DISPLAY_TIMEZONE": "America", "TZ": "Europe/Berlin"})
    common = read_common(reader)
    assert str(common.display_timezone) == "Europe/Berlin"
    assert reader.notices == [Notice("EVENT_DISPLAY_TIMEZONE", "unknown_timezone", "America")]


def test_unknown_log_level_falls_back() -> None:
    reader = EnvReader({"LOG_LEVEL": "chatty", "LIBRARY_LOG_LEVEL": "debug"})
    common = read_common(reader)
    assert common.log_level == logging.INFO
    assert common.library_log_level == logging.DEBUG
    assert reader.notices == [Notice("LOG_LEVEL", "unknown_log_level", "chatty")]


@pytest.mark.parametrize("raw", ["nan", "inf", "1e400", "x"])
def test_number_rejects_non_finite(raw: str) -> None:
    reader = EnvReader({"N": raw})
    assert reader.number("N", 1.5) == 1.5
    with pytest.raises(SettingsError):
        reader.check()
