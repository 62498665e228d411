"""The gateway reads the apiserver's Warning headers back into the texts that were sent."""

from __future__ import annotations

import pytest

from shared.kubewire import _warnings


@pytest.mark.parametrize(
    ("header", "text"),
    [
        ('299 - "admitted under res-4"', "admitted under res-4"),
        ('299 - "unknown field \\"spec.extra\\""', 'unknown field "spec.extra"'),
        ('299 - "back\\\\slash"', "back\\slash"),
        ('299 - "dated" "Wed, 02 Dec 2026 13:00:00 GMT"', "dated"),
        ("not a warning header", "not a warning header"),
    ],
    ids=["plain", "escaped-quotes", "escaped-backslash", "with-date", "malformed-kept"],
)
def test_warning_header_texts(header: str, text: str) -> None:
    assert _warnings([header]) == [text]
