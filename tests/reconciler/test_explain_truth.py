"""``explain`` says only what will happen: a stopped controller, an app outage, a
missing toleration, and Events older than the state they sit beside.

Pure scenes on a fixed ``NOW`` (the builders of ``test_explain``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from reconciler.base.apphealth import Health
from reconciler.explain import explain
from reconciler.explain.scene import Controller, Said, Scene
from shared import vocab
from shared.clock import format_utc
from tests.policy.builders import HOUR, NOW, gpu_pod, reservation
from tests.reconciler.test_explain import admitted, named, scene

MINUTE = timedelta(minutes=1)
LIVE = Controller(holder="r-0", renewed=NOW - 3 * timedelta(seconds=1), duration_s=15)
TAINT = (
    "0/4 nodes are available: 1 node(s) had untolerated taint {gpu-class: h100}, "
    "3 node(s) had untolerated taint {gpu-class-reservation: h100}. preemption: 0/4 "
    "nodes are available: 4 Preemption is not helpful for scheduling."
)


def jit_pod() -> dict[str, Any]:
    builder = gpu_pod().annotate(vocab.MINIMUM_RUNTIME_SECONDS, "3600")
    return builder.annotate(vocab.USAGE_GROUP, "lab").build()


def full_booking() -> Scene:
    holder = admitted(named("big", gpus=2)).build()
    res = reservation(1, gpus=2, holds=(2,))
    return scene(named("small").build(), (res,), (holder,))


@pytest.mark.parametrize(
    ("controller", "since"),
    [
        pytest.param(Controller(found=False), "no leader has ever run", id="no-lease"),
        pytest.param(
            Controller(holder=None, renewed=NOW - 20 * MINUTE, duration_s=15),
            "no leader since 2026-01-05 09:40 UTC (20 min ago)",
            id="released",
        ),
        pytest.param(
            Controller(holder="r-0", renewed=NOW - timedelta(seconds=15), duration_s=15),
            "no leader since 2026-01-05 09:59 UTC (now)",
            id="lapsed",
        ),
        pytest.param(
            Controller(holder="r-0", renewed=None, duration_s=15),
            "no leader has renewed its Lease",
            id="never-renewed",
        ),
    ],
)
def test_no_live_leader_promises_nothing(controller: Controller, since: str) -> None:
    base = full_booking()
    before = explain.explain(base)
    assert before.state == "booking-full"
    assert "admitted at once" in "\n".join(before.lines)
    found = explain.explain(Scene(**{**vars(base), "controller": controller}))
    assert found.state == "controller-not-running"
    assert found.headline.endswith(f"the controller is not running ({since})")
    text = "\n".join(found.lines)
    assert "admitted at once" not in text
    assert f"Once it runs: {before.headline}." in found.lines
    assert found.reservation == "res-1"


def test_a_live_leader_changes_nothing_and_an_unread_lease_says_nothing() -> None:
    base = full_booking()
    for controller in (LIVE, None):
        found = explain.explain(Scene(**{**vars(base), "controller": controller}))
        assert found.state == "booking-full"
        assert not any("controller" in line for line in found.lines)


def test_an_admitted_pod_is_told_nothing_is_kept_up_while_no_controller_runs() -> None:
    raw = admitted(gpu_pod()).build()
    down = Controller(found=False)
    found = explain.explain(scene(raw, (reservation(1),), controller=down))
    assert found.state == "admitted-waiting-for-scheduler"
    assert any(line.startswith("The controller is not running") for line in found.lines)


def test_an_app_outage_published_by_the_leader_is_told_to_a_waiting_pod() -> None:
    raw = jit_pod()
    out = Controller(holder="r-0", renewed=NOW, duration_s=15, app=Health(False, NOW - 7 * MINUTE))
    found = explain.explain(scene(raw, (), controller=out))
    assert found.state == "on-demand"
    assert any(
        line.startswith("The reservation app has been unreachable since 2026-01-05 09:53 UTC")
        for line in found.lines
    )
    for quiet in (
        Controller(holder="r-0", renewed=NOW, duration_s=15, app=Health(True, NOW)),
        # A stopped controller's last word on the app is stale: not repeated.
        Controller(holder=None, renewed=NOW - HOUR, duration_s=15, app=out.app),
    ):
        found = explain.explain(scene(raw, (), controller=quiet))
        assert not any("unreachable" in line for line in found.lines)


def test_an_admitted_pod_missing_its_pool_toleration_is_told_to_add_it() -> None:
    raw = admitted(gpu_pod()).build()
    found = explain.explain(scene(raw, (reservation(1),), unschedulable=TAINT))
    text = "\n".join(found.lines)
    assert "a node of its class with enough free GPUs" not in text
    assert (
        "It does not tolerate the taint gpu-class=h100 that the nodes of its GPU class carry: "
        "add to the pod's spec.tolerations {key: gpu-class, operator: Equal, value: h100}"
    ) in text
    assert "Released by: that toleration" in text
    # The reservation taint is the system's to grant, never named as the user's to add.
    assert f"taint {vocab.RESERVATION_TAINT_KEY}=" not in text


def test_a_waiting_pod_missing_a_toleration_is_told_too() -> None:
    raw = jit_pod()
    found = explain.explain(scene(raw, (), unschedulable=TAINT))
    assert found.state == "on-demand"
    assert any("It does not tolerate the taint gpu-class=h100" in line for line in found.lines)


@pytest.mark.parametrize(
    "message",
    [
        "0/6 nodes are available: 6 Insufficient nvidia.com/gpu.",
        "0/2 nodes are available: 2 node(s) had untolerated taint {gpu-class-reservation: h100}.",
        "0/2 nodes are available: 2 node(s) had untolerated taint(s).",
        # Another class's pool and an unrelated taint: nodes it is not meant for.
        "0/3 nodes are available: 1 node(s) had untolerated taint {gpu-class: a100}, "
        "2 node(s) had untolerated taint {dedicated: infra}.",
        "{{{ garbage",
        "",
    ],
)
def test_no_named_foreign_taint_keeps_the_free_gpus_remedy(message: str) -> None:
    raw = admitted(gpu_pod()).build()
    found = explain.explain(scene(raw, (reservation(1),), unschedulable=message or None))
    text = "\n".join(found.lines)
    assert "a node of its class with enough free GPUs" in text
    assert "does not tolerate" not in text


def test_an_event_older_than_the_admission_is_marked_earlier() -> None:
    raw = admitted(gpu_pod()).annotate(vocab.ADMITTED_AT, format_utc(NOW - 5 * MINUTE)).build()
    old = Said(vocab.REASON_NO_RESERVATION, "no booking", NOW - 20 * MINUTE)
    found = explain.explain(scene(raw, (reservation(1),), said=(old,)))
    assert found.lines[-1].startswith(
        "Earlier — before it was admitted at 2026-01-05 09:55 UTC, no longer current — "
        "the reservation system said (2026-01-05 09:40 UTC): NoReservation"
    )
    new = Said(vocab.REASON_RUNTIME_GUARANTEED, "it runs", NOW - 4 * MINUTE)
    found = explain.explain(scene(raw, (reservation(1),), said=(old, new)))
    assert found.lines[-1].startswith("The reservation system said (2026-01-05 09:56 UTC)")


def test_an_event_older_than_the_booking_it_now_waits_for_is_marked_earlier() -> None:
    later = reservation(2, gpus=1, start=NOW + 10 * MINUTE)  # made 2026-01-01
    old = Said(vocab.REASON_NO_RESERVATION, "no booking", NOW - 200 * HOUR)
    found = explain.explain(scene(gpu_pod().build(), (later,), said=(old,)))
    assert found.state == "queued-for-window"
    assert found.lines[-1].startswith("Earlier — before booking res-2 was made or last changed")
    fresh = Said(vocab.REASON_WAITING_FOR_RESERVATION, "waits", NOW - MINUTE)
    found = explain.explain(scene(gpu_pod().build(), (later,), said=(fresh,)))
    assert found.lines[-1].startswith("The reservation system said")
