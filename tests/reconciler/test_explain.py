"""``reconciler.explain.explain``: one state per situation, notes added, bad input survived.

Each case is a pure ``Scene`` (virtual now, builders): the table picks the state, the
headline and lines say what holds the pod and what would release it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from reconciler import cli
from reconciler.base.pods import project_pod
from reconciler.explain import explain
from reconciler.explain.scene import Said, Scene
from reconciler.explain.states import STATES
from shared import vocab
from shared.clock import format_utc
from shared.model import GPUReservation
from shared.policy import noshow
from shared.policy.matching import MatchRules
from tests.policy.builders import HOUR, NOW, PodBuilder, gpu_pod, reservation

RULES = MatchRules()


def scene(
    raw: dict[str, Any],
    reservations: tuple[GPUReservation, ...] | None = (),
    neighbours: tuple[dict[str, Any], ...] = (),
    **extra: Any,
) -> Scene:
    meta = raw["metadata"]
    return Scene(
        key=f"{meta['namespace']}/{meta['name']}",
        pod=project_pod(raw, RULES),
        now=NOW,
        reservations=reservations,
        neighbours=tuple(v for n in neighbours if (v := project_pod(n, RULES))),
        **extra,
    )


def admitted(builder: PodBuilder, ref: str = "res-1", until: str | None = None) -> PodBuilder:
    return (
        builder.reservation_toleration()
        .annotate(vocab.BOOKING_REFERENCE, ref)
        .annotate(vocab.GUARANTEED_UNTIL, until or format_utc(NOW + HOUR))
        .annotate(vocab.GUARANTEE_STATUS, vocab.GUARANTEE_STATUS_GUARANTEED)
    )


def running(builder: PodBuilder, node: str = "h100-r1") -> dict[str, Any]:
    raw = builder.build()
    raw["spec"]["nodeName"] = node
    raw["status"] = {"phase": "Running"}
    return raw


def named(name: str, gpus: int = 1) -> PodBuilder:
    return PodBuilder(name).cls().gpus(str(gpus))


def test_queued_for_window_says_when_it_opens() -> None:
    later = reservation(2, gpus=1, start=NOW + timedelta(minutes=10), end=NOW + 2 * HOUR)
    found = explain.explain(scene(gpu_pod().build(), (later,)))
    assert found.state == "queued-for-window"
    assert found.headline == (
        "waiting for your booking res-2, which opens 2026-01-05 10:10 UTC (in 10 min)"
    )
    assert found.estimate == NOW + timedelta(minutes=10)
    assert any(line.startswith("Released by: the window opening at") for line in found.lines)
    assert found.lines[1].startswith("It carries no scheduling gate: should a node its own")


def test_a_gated_queued_pod_is_told_the_scheduler_leaves_it_alone() -> None:
    later = reservation(2, gpus=1, start=NOW + timedelta(minutes=10), end=NOW + 2 * HOUR)
    raw = gpu_pod().gate(vocab.SANDBOX_SCHEDULING_GATE).build()
    found = explain.explain(scene(raw, (later,)))
    assert found.state == "queued-for-window"
    assert found.lines[1] == (
        f"Kubernetes shows it Pending (SchedulingGated: {vocab.SANDBOX_SCHEDULING_GATE}): "
        "the scheduler leaves it alone until the reservation system admits it."
    )
    full = explain.explain(scene(raw, (reservation(1, gpus=1, holds=(1,)),)))
    assert full.state == "booking-full"
    assert any(
        line.startswith("Kubernetes shows it Pending (SchedulingGated") for line in full.lines
    )


def test_a_full_booking_names_the_holders_and_the_earliest_guarantee_end() -> None:
    full = reservation(1, gpus=2, holds=(1, 1))
    early = admitted(named("a"), until=format_utc(NOW + HOUR))
    late = admitted(named("b"), until=format_utc(NOW + 2 * HOUR))
    neighbours = (running(late), running(early))
    found = explain.explain(scene(named("waiting").build(), (full,), neighbours))
    assert found.state == "booking-full"
    assert found.estimate == NOW + HOUR
    text = "\n".join(found.lines)
    assert "held by your pods a (1 GPU, guaranteed until 2026-01-05 11:00 UTC), b (" in text
    assert "the earliest a holder's guarantee ends is 2026-01-05 11:00 UTC (in 60 min)" in text


def test_a_too_small_booking_says_it_never_admits() -> None:
    small = reservation(1, gpus=1)
    found = explain.explain(scene(gpu_pod(gpus=2).build(), (small,)))
    assert found.state == "booking-too-small"
    assert found.estimate is None


def test_no_booking_gives_every_reason_and_why_no_lease() -> None:
    found = explain.explain(scene(gpu_pod(namespace="carol").build(), ()))
    assert found.state == "no-booking"
    assert "you hold no booking" in found.lines[0]
    assert "It cannot be admitted on demand either" in found.lines[0]


def test_another_class_is_a_near_miss() -> None:
    a100 = reservation(1, gpu_class="a100")
    found = explain.explain(scene(gpu_pod().build(), (a100,)))
    assert found.state == "no-booking"
    assert "your booking res-1 (A100" in found.lines[0]


def test_a_booking_declared_a_no_show_no_longer_takes_pods() -> None:
    record = noshow.Record(declared_at=NOW - HOUR, deadline=NOW - HOUR)
    gone = replace(
        reservation(1),
        status_extra={noshow.STATUS_KEY: noshow.record_to_status(record)},
    )
    found = explain.explain(scene(gpu_pod().build(), (gone,)))
    assert found.state == "no-booking"
    assert "your booking was declared a no-show" in found.lines[0]


def test_an_open_booking_with_room_admits_within_seconds() -> None:
    found = explain.explain(scene(gpu_pod().build(), (reservation(1),)))
    assert found.state == "admittable-now"
    assert found.reservation == "res-1"


def test_jit_eligible_points_at_the_lease_events() -> None:
    raw = (
        gpu_pod()
        .annotate(vocab.MINIMUM_RUNTIME_SECONDS, "3600")
        .annotate(vocab.USAGE_GROUP, "lab")
        .build()
    )
    found = explain.explain(scene(raw, ()))
    assert found.state == "on-demand"
    # No lease Event on the pod yet: none is named as if it were there.
    assert not any("OnDemand" in line for line in found.lines)
    assert "No lease Event is on it yet" in "\n".join(found.lines)
    said = (Said(vocab.REASON_ONDEMAND_LEASE_DELAYED, "unreachable", NOW),)
    found = explain.explain(scene(raw, (), said=said))
    assert f"in its Events ({vocab.REASON_ONDEMAND_LEASE_DELAYED}; the newest" in found.lines[1]
    assert vocab.REASON_ONDEMAND_LEASE_DENIED not in "\n".join(found.lines)


def test_admitted_but_unscheduled_quotes_the_scheduler() -> None:
    raw = admitted(gpu_pod()).build()
    message = "0/6 nodes are available: 6 Insufficient nvidia.com/gpu."
    found = explain.explain(scene(raw, (reservation(1),), unschedulable=message))
    assert found.state == "admitted-waiting-for-scheduler"
    assert f"The scheduler says: {message}" in found.lines
    assert found.estimate == NOW + HOUR


def test_a_pod_placed_in_the_ordinary_pool_is_not_called_waiting() -> None:
    """Bound without an admission (it tolerated the ordinary pool's taint and no gate
    held it): not waiting, whatever its route — here a booking opening later."""
    later = reservation(2, gpus=1, start=NOW + timedelta(minutes=10), end=NOW + 2 * HOUR)
    said = Said(vocab.REASON_WAITING_FOR_RESERVATION, "Waiting for res-2.", NOW)
    found = explain.explain(scene(running(gpu_pod(), node="h100-o1"), (later,), said=(said,)))
    assert found.state == "running-outside-bookings"
    assert (
        found.headline == "on node h100-o1 without a booking (Running): not admitted, not waiting"
    )
    assert found.estimate is None
    assert found.reservation is None
    assert "outside the reserved pool" in found.lines[0]
    assert found.lines[1] == (
        f"Its newest Event ({vocab.REASON_WAITING_FOR_RESERVATION}, below) was written before "
        "it was placed and no longer applies."
    )
    assert found.lines[2] == (
        "To run under your booking res-2 instead, delete the pod and create it again once it "
        "opens, 2026-01-05 10:10 UTC (in 10 min): a pod created while its booking is open "
        "with room is admitted at creation."
    )
    assert found.lines[-1].startswith("The reservation system said")
    rows = explain.pods([scene(running(gpu_pod(), node="h100-o1"), (later,))])
    assert rows.splitlines()[1].split() == ["p", "running-outside-bookings"]


@pytest.mark.parametrize(
    ("bookings", "advice"),
    [
        ((), None),
        ((reservation(1),), "create it again now:"),
        ((reservation(1, gpus=1),), None),  # too small for the 2-GPU pod: no advice
    ],
    ids=["no-booking", "open-booking", "too-small-booking"],
)
def test_a_placed_pod_is_told_how_to_run_under_a_booking_only_when_one_could_take_it(
    bookings: tuple[GPUReservation, ...], advice: str | None
) -> None:
    raw = running(gpu_pod(gpus=2), node="h100-o1")
    raw["status"]["phase"] = "Pending"  # bound, containers not started yet
    said = Said(vocab.REASON_NO_RESERVATION, "No reservation matches this pod.", NOW)
    found = explain.explain(scene(raw, bookings, said=(said,)))
    assert found.state == "running-outside-bookings"
    assert found.headline.endswith("(Pending): not admitted, not waiting")
    told = [line for line in found.lines if line.startswith("To run under")]
    assert len(told) == (0 if advice is None else 1)
    assert all(advice is not None and advice in line for line in told)
    assert not any("no longer applies" in line for line in found.lines)  # still true


def test_a_placed_pod_with_a_declared_reservation_toleration_is_told_it_is_evicted() -> None:
    raw = running(gpu_pod().reservation_toleration(), node="h100-r1")
    found = explain.explain(scene(raw, None, unreadable="Forbidden: no"))
    assert found.state == "running-outside-bookings"
    assert "outside the reserved pool" not in found.lines[0]
    assert vocab.REASON_UNADMITTED_TOLERATION in found.lines[1]
    assert not any(line.startswith("To run under") for line in found.lines)
    assert found.lines[-1] == "Your GPUReservations could not be read: Forbidden: no."


def test_running_past_its_guarantee_is_overstay() -> None:
    raw = running(
        admitted(gpu_pod(), until=format_utc(NOW - HOUR)).annotate(
            vocab.GUARANTEE_STATUS, vocab.GUARANTEE_STATUS_OVERSTAY
        )
    )
    found = explain.explain(scene(raw, (reservation(1),)))
    assert found.state == "admitted"
    assert "may be preempted" in found.lines[0]
    assert found.estimate is None


def test_a_termination_warning_is_added_to_any_state() -> None:
    raw = running(
        admitted(gpu_pod())
        .annotate(vocab.TERMINATION_WARNING_AT, format_utc(NOW + timedelta(minutes=20)))
        .annotate(vocab.TERMINATION_WARNING_RISK, "0.50")
        .annotate(vocab.TERMINATION_WARNING_MESSAGE, "Booking res-9 needs the GPUs.")
    )
    found = explain.explain(scene(raw, (reservation(1),)))
    assert found.lines[-1] == (
        "At risk of preemption from 2026-01-05 10:20 UTC (in 20 min) (risk 0.50): "
        "checkpoint before then. Booking res-9 needs the GPUs."
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (vocab.GUARANTEED_UNTIL, "tomorrow"),
        (vocab.GUARANTEED_UNTIL, "2026-01-05T12:00:00"),
        (vocab.TERMINATION_WARNING_AT, "soon"),
    ],
    ids=["words", "naive-instant", "warning-words"],
)
def test_malformed_annotations_read_as_unknown(key: str, value: str) -> None:
    raw = running(admitted(gpu_pod()).annotate(key, value))
    found = explain.explain(scene(raw, (reservation(1),)))
    assert found.state == "admitted"
    assert not any(line.startswith("At risk") for line in found.lines)


def test_unreadable_reservations_fall_back_to_the_events() -> None:
    said = Said(vocab.REASON_WAITING_FOR_RESERVATION, "Waiting for res-2.", NOW)
    found = explain.explain(
        scene(gpu_pod().build(), None, unreadable="Forbidden: no", said=(said,))
    )
    assert found.state == "reservations-unreadable"
    assert found.lines[-2] == (
        "The reservation system said (2026-01-05 10:00 UTC): WaitingForReservation: "
        "Waiting for res-2."
    )
    assert found.lines[-1] == "Your GPUReservations could not be read: Forbidden: no."


def test_finished_deleting_and_not_gpu_pods() -> None:
    done = gpu_pod().build()
    done["status"] = {"phase": "Succeeded"}
    assert explain.explain(scene(done)).state == "finished"
    going = gpu_pod().build()
    going["metadata"]["deletionTimestamp"] = "2026-01-05T10:00:00Z"
    assert explain.explain(scene(going)).state == "deleting"
    plain = PodBuilder("web").build()
    assert explain.explain(scene(plain)).state == "not-a-gpu-pod"


def test_every_state_is_reachable_from_the_table() -> None:
    assert [s.name for s in STATES][-1] == "no-booking"
    assert len({s.name for s in STATES}) == len(STATES)


def test_list_shows_bookings_and_estimates() -> None:
    later = reservation(2, gpus=1, start=NOW + timedelta(minutes=10))
    text = explain.bookings((later,), NOW, None)
    assert text.splitlines()[1].split() == [
        "res-2", "H100", "booking", "0/1", "2026-01-05", "10:10", "UTC",
        "2026-01-05", "12:00", "UTC", "Upcoming",
    ]  # fmt: skip
    rows = explain.pods([scene(gpu_pod().build(), (later,))])
    assert rows.splitlines()[1].split() == [
        "p", "queued-for-window", "res-2", "starts", "2026-01-05", "10:10", "UTC",
    ]  # fmt: skip


# --- the shell's readers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [("nb", ("alice", "nb")), ("bob/nb", ("bob", "nb"))],
)
def test_target(given: str, expected: tuple[str, str]) -> None:
    assert cli.target(given, "alice") == expected


@pytest.mark.parametrize("given", ["", "bob/", "/nb", "a/b/c"])
def test_a_malformed_target_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match="not a pod name"):
        cli.target(given, "alice")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("current-context: c\ncontexts: [{name: c, context: {namespace: bob}}]\n", "bob"),
        ("current-context: c\ncontexts: [{name: c, context: {}}]\n", "default"),
        ("contexts: 7\n", "default"),
        ("{{{ not yaml", "default"),
        ("- a list\n", "default"),
    ],
    ids=["namespace", "none-set", "malformed-contexts", "not-yaml", "not-a-mapping"],
)
def test_context_namespace(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "config"
    path.write_text(text, encoding="utf-8")
    assert cli.context_namespace(str(path)) == expected


def test_a_missing_kubeconfig_reads_as_default(tmp_path: Path) -> None:
    assert cli.context_namespace(str(tmp_path / "absent")) == "default"


def test_only_our_well_formed_events_are_kept_oldest_first() -> None:
    ours = {"source": {"component": vocab.PRODUCT_NAME}}
    events: list[dict[str, Any]] = [
        {**ours, "reason": "B", "message": "second", "lastTimestamp": "2026-01-05T10:05:00Z"},
        {**ours, "reason": "A", "message": "first", "lastTimestamp": "2026-01-05T10:00:00Z"},
        {"source": {"component": "kubelet"}, "reason": "Pulled", "message": "x"},
        {**ours, "reason": 7, "message": "not a string reason"},
        {**ours, "reason": "C", "message": "no time", "lastTimestamp": "garbage"},
        {"reportingComponent": vocab.PRODUCT_NAME, "reason": "D", "message": "new API"},
    ]
    assert [s.reason for s in cli.ours(events)] == ["C", "D", "A", "B"]


def test_a_bad_target_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: k, cluster: "
        "{server: 'https://127.0.0.1:9'}}]\ncontexts: [{name: c, context: {cluster: k, "
        "user: u}}]\nusers: [{name: u, user: {token: t}}]\n",
        encoding="utf-8",
    )
    assert cli.main(["--kubeconfig", str(config), "explain", "a/b/c"]) == 2
    assert "not a pod name" in capsys.readouterr().err


def test_an_unloadable_kubeconfig_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.write_text("kind: Config\n", encoding="utf-8")
    assert cli.main(["--kubeconfig", str(config), "list"]) == 1
    assert "cannot load kubeconfig" in capsys.readouterr().err
