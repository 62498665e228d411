"""The push answer's ``adopted``: in-window owner changes (contract §4.1)."""

from __future__ import annotations

from tests.reconciler.builders import row
from tests.reconciler.test_push import Harness

BOB = {"user_id": 32, "user": {"id": 32, "username": "bob"}}


def test_an_owner_change_in_window_counts_as_adopted_once() -> None:
    h = Harness()
    assert h.post({"reservations": [row(1)]}).status_code == 200
    moved = row(1, updated_at="2026-01-05T09:59:00Z", **BOB)
    assert h.post({"reservations": [moved]}).json()["adopted"] == 1
    assert h.post({"reservations": [moved]}).json()["adopted"] == 0


def test_an_owner_change_outside_the_window_is_not_counted() -> None:
    h = Harness()
    later = {"start_utc": "2026-01-06T09:00:00Z", "end_utc": "2026-01-06T12:00:00Z"}
    h.post({"reservations": [row(1, **later)]})
    moved = row(1, updated_at="2026-01-05T09:59:00Z", **later, **BOB)
    assert h.post({"reservations": [moved]}).json()["adopted"] == 0
