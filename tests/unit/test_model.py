"""``shared.model``: the GPUReservation object round-trips, and bad fields are named."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import model, vocab
from shared.clock import format_utc, utc
from tests.ledger.fakes import NOW, facts


def full() -> model.GPUReservation:
    f = facts(rid=42, owner_id=3, group="lab", cancel_reason="no-show", state=model.State.CANCELLED)
    holds = (
        model.Hold("c1", 2, NOW, pod="p1", pod_uid="u1", announced=True),
        model.Hold("c2", 1, NOW),
    )
    return model.GPUReservation(f, holds, "17", {"noShow": {"declared": True}})


def test_round_trip_with_every_field() -> None:
    res = full()
    assert model.from_object(model.to_object(res, "ns", NOW)) == res


def test_round_trip_with_only_required_fields() -> None:
    res = model.GPUReservation(facts())
    back = model.from_object(model.to_object(res, "ns", NOW))
    assert back == res


def test_object_envelope_and_derived_status() -> None:
    obj = model.to_object(full(), "ns", NOW)
    assert obj["apiVersion"] == f"{vocab.CRD_GROUP}/{vocab.CRD_VERSION}"
    assert obj["kind"] == vocab.CRD_KIND
    assert obj["metadata"] == {"name": "res-42", "namespace": "ns", "resourceVersion": "17"}
    assert obj["status"]["usedGpus"] == 3
    assert obj["status"]["phase"] == "Cancelled"


@pytest.mark.parametrize(
    ("at", "phase"),
    [
        (utc(2026, 1, 5, 8, 59, 59), model.Phase.UPCOMING),
        (utc(2026, 1, 5, 9), model.Phase.OPEN),
        (utc(2026, 1, 5, 11, 59, 59), model.Phase.OPEN),
        (utc(2026, 1, 5, 12), model.Phase.ENDED),
    ],
)
def test_phase_follows_the_half_open_window(at, phase) -> None:
    assert facts().phase(at) is phase


def test_reference_round_trip_and_rejects() -> None:
    assert model.reference(7) == "res-7"
    assert model.parse_reference("res-7") == 7
    prefix = vocab.RESERVATION_REF_PREFIX
    for bad in (prefix, "res-x", "rez-7", "res-7a", prefix + "9" * 19):
        assert model.parse_reference(bad) is None


def _set(obj: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = obj
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    key: Any = int(last) if last.isdigit() else last
    if value is _DELETE:
        del node[key]
    else:
        node[key] = value


_DELETE = object()

MALFORMED = [
    ("spec.reservationId", "7", "spec.reservationId"),
    ("spec.reservationId", -1, "spec.reservationId"),
    ("spec.reservationId", True, "spec.reservationId"),
    ("spec.owner", "", "spec.owner"),
    ("spec.owner", _DELETE, "spec.owner"),
    ("spec.gpuClass", 3, "spec.gpuClass"),
    ("spec.gpuClassName", None, "spec.gpuClassName"),
    ("spec.gpuCount", "8", "spec.gpuCount"),
    ("spec.gpuCount", -2, "spec.gpuCount"),
    ("spec.kind", "reclaim", "spec.kind"),
    ("spec.start", "2026-01-05T09:00:00", "spec.start"),
    ("spec.end", "tomorrow", "spec.end"),
    ("spec.state", "gone", "spec.state"),
    ("spec.updatedAt", _DELETE, "spec.updatedAt"),
    ("spec.ownerId", "3", "spec.ownerId"),
    ("spec.group", 5, "spec.group"),
    ("spec.cancelReason", 5, "spec.cancelReason"),
    ("status.holds", {"a": 1}, "status.holds"),
    ("status.holds.0", "c1", "status.holds[0]"),
    ("status.holds.0.claim", "", "status.holds[0].claim"),
    ("status.holds.0.gpus", "2", "status.holds[0].gpus"),
    ("status.holds.1.gpus", -1, "status.holds[1].gpus"),
    ("status.holds.0.at", "noon", "status.holds[0].at"),
    ("status.holds.0.pod", 7, "status.holds[0].pod"),
    ("status.holds.0.podUid", "", "status.holds[0].podUid"),
    ("spec", None, "spec"),
    ("metadata", [], "metadata"),
    ("status", "x", "status"),
]


@pytest.mark.parametrize(("path", "value", "named"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_field_is_named(path: str, value: Any, named: str) -> None:
    obj = copy.deepcopy(model.to_object(full(), "ns", NOW))
    _set(obj, path, value)
    with pytest.raises(ValueError, match=r"^" + named.replace("[", r"\[").replace("]", r"\]")):
        model.from_object(obj)


def test_a_remembered_hold_does_not_let_an_equal_but_invalid_value_through() -> None:
    """The hold memo keys on values; ``True == 1`` must not make ``gpus: true`` valid
    because ``gpus: 1`` was read before, nor ``announced: 1`` count as announced."""
    obj = model.to_object(full(), "ns", NOW)
    model.from_object(obj)
    holds = obj["status"]["holds"]
    changed = copy.deepcopy(obj)
    changed["status"]["holds"][0]["gpus"] = (
        True if holds[0]["gpus"] == 1 else float(holds[0]["gpus"])
    )
    with pytest.raises(ValueError, match=r"status\.holds\[0\]\.gpus"):
        model.from_object(changed)
    flagged = copy.deepcopy(obj)
    flagged["status"]["holds"][0].pop("announced", None)
    flagged["status"]["holds"][0]["announced"] = 1
    assert model.from_object(flagged).holds[0].announced is False


def test_the_hold_memo_stays_bounded() -> None:
    res = model.GPUReservation(
        facts(gpus=10**6),
        tuple(model.Hold(f"c{i}", 1, NOW) for i in range(model.HOLD_MEMO_SIZE + 10)),
    )
    parsed = model.from_object(model.to_object(res, "ns", NOW))
    assert parsed.holds == res.holds
    assert len(model._HOLDS) <= model.HOLD_MEMO_SIZE


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.datetimes(
                min_value=datetime(2000, 1, 1),
                max_value=datetime(2100, 1, 1),
                timezones=st.sampled_from([None, UTC, timezone(timedelta(hours=5, minutes=30))]),
            ),
            st.booleans(),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_a_hold_s_instant_is_written_as_format_utc_writes_it_whatever_came_before(
    instants: list[tuple[datetime, bool]],
) -> None:
    """``hold_to_status`` remembers the last instant's text (the holds of one write
    share it): equal instants in other zones, naive ones and the same one again all
    come out as ``format_utc`` gives them."""
    for at, again in instants:
        for _ in range(2 if again else 1):
            entry = model.hold_to_status(model.Hold("c", 1, at))
            assert entry["at"] == format_utc(at)
            same = at.astimezone(timezone(timedelta(hours=-3))) if at.tzinfo else at
            assert model.hold_to_status(model.Hold("c", 1, same))["at"] == format_utc(same)
