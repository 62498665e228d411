"""Guard 1a (R16): the scheduler verdict parse, from real message formats.

Two sources: messages the emulated scheduler writes (``sandbox.cluster.scheduling``
over built nodes and pods, so a change of its wording shows up here), and the real
kube-scheduler formats quoted in ``kubernetes-facts.md`` (old and new taint wording).
"""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.cluster.scheduling import node_infos, place
from shared import vocab
from shared.policy.verdict import Scheduled, filters_part, lease_can_help, named_taints
from tests.cluster.builders import node, pod, reservation_taint

CLASS_TAINT = {
    "key": vocab.GPU_CLASS_LABEL,
    "value": "a100",
    "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
}
CLASS_TOLERATION = {**CLASS_TAINT, "operator": "Equal"}


def unschedulable(message: str) -> Scheduled:
    return Scheduled("False", "Unschedulable", message)


def emulated(nodes: list[dict[str, Any]], the_pod: dict[str, Any]) -> str:
    """The message the emulated scheduler writes for ``the_pod`` on ``nodes``."""
    placement = place(the_pod, node_infos(nodes, []))
    assert placement.node is None, "the pod was expected not to fit"
    assert placement.message is not None
    return placement.message


def reserved(name: str, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    return node(name, gpus=gpus, taints=[reservation_taint("a100"), CLASS_TAINT], **kw)


def ordinary(name: str, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    return node(name, gpus=gpus, taints=[CLASS_TAINT], **kw)


def candidate(gpus: int = 1, **kw: Any) -> dict[str, Any]:
    return pod("job", gpus=gpus, tolerations=[CLASS_TOLERATION], **kw)


def test_emulated_reserved_nodes_only_name_our_taint_a_lease_helps() -> None:
    message = emulated([reserved("r1"), reserved("r2")], candidate())
    assert lease_can_help("Pending", unschedulable(message)) is True


def test_emulated_ordinary_pool_full_and_reserved_tainted_a_lease_helps() -> None:
    message = emulated([reserved("r1"), ordinary("o1", gpus=0)], candidate())
    assert "Insufficient nvidia.com/gpu" in message
    assert lease_can_help("Pending", unschedulable(message)) is True


def test_emulated_cpu_shortage_on_the_ordinary_pool_is_not_for_a_lease() -> None:
    message = emulated([reserved("r1"), ordinary("o1", cpu="1")], candidate(cpu="4"))
    assert "Insufficient cpu" in message
    assert lease_can_help("Pending", unschedulable(message)) is False


def test_emulated_only_other_taints_named_is_not_for_a_lease() -> None:
    infra = node("i1", taints=[{"key": "dedicated", "value": "infra", "effect": "NoExecute"}])
    message = emulated([infra], candidate())
    assert named_taints(message) == [("dedicated", "infra")]
    assert lease_can_help("Pending", unschedulable(message)) is False


def test_emulated_own_class_cordoned_still_names_a_reservation_taint() -> None:
    """Guard 1b (drained) must see this pod: its own nodes say "unschedulable"."""
    h100 = node("h1", taints=[reservation_taint("h100")])
    message = emulated([h100, reserved("r1", unschedulable=True)], candidate())
    assert "were unschedulable" in message
    assert lease_can_help("Pending", unschedulable(message)) is True


OLD = (
    "0/5 nodes are available: 2 node(s) had untolerated taint {gpu-class-reservation: a100}, "
    "3 Insufficient nvidia.com/gpu. preemption: 0/5 nodes are available: "
    "5 Preemption is not helpful for scheduling."
)
NEW = (
    "0/5 nodes are available: 2 node(s) had untolerated taint(s), 3 Insufficient "
    "nvidia.com/gpu. preemption: 0/5 nodes are available: 5 Preemption is not helpful "
    "for scheduling."
)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param(OLD, True, id="facts example, older taint wording"),
        pytest.param(NEW, True, id="same cluster, 1.35 anonymous taint wording"),
        pytest.param(
            "0/3 nodes are available: 3 node(s) had untolerated taint(s). preemption: "
            "0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
            True,
            id="anonymous taints only",
        ),
        pytest.param(
            "0/2 nodes are available: 2 node(s) had taint {gpu-class-reservation: a100}, "
            "that the pod didn't tolerate.",
            True,
            id="1.18-1.24 wording naming our taint",
        ),
        pytest.param(
            "0/2 nodes are available: 2 node(s) had taints that the pod didn't tolerate.",
            True,
            id="1.17 anonymous wording",
        ),
        pytest.param(
            "0/4 nodes are available: 2 Insufficient memory, 2 node(s) had untolerated taint "
            "{gpu-class-reservation: a100}.",
            False,
            id="memory short somewhere: a lease cannot fix it",
        ),
        pytest.param(
            "0/4 nodes are available: 2 Insufficient cpu, 2 Insufficient nvidia.com/gpu.",
            False,
            id="cpu short even though GPUs are short too",
        ),
        pytest.param(
            "0/2 nodes are available: 2 node(s) had untolerated taint {dedicated: infra}.",
            False,
            id="only somebody else's taint",
        ),
        pytest.param(
            "0/3 nodes are available: 2 node(s) had untolerated taint "
            "{gpu-class-reservation: h100}, 1 node(s) were unschedulable.",
            True,
            id="another class's reservation taint: guard 1b decides",
        ),
        pytest.param(
            "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
            False,
            id="affinity only",
        ),
        pytest.param(
            "0/1 nodes are available: 1 node(s) were unschedulable.", False, id="cordoned only"
        ),
        pytest.param("no nodes available to schedule pods", False, id="no nodes at all"),
        pytest.param(
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
            "available: 3 No preemption victims found for incoming pod.",
            True,
            id="GPUs short, PostFilter text ignored",
        ),
    ],
)
def test_real_kube_scheduler_formats(message: str, expected: bool) -> None:
    assert lease_can_help("Pending", unschedulable(message)) is expected


@pytest.mark.parametrize(
    ("phase", "scheduled"),
    [
        pytest.param("Pending", None, id="no condition yet"),
        pytest.param("Running", unschedulable(OLD), id="not pending"),
        pytest.param("Pending", Scheduled("True", "", ""), id="scheduled"),
        pytest.param("Pending", Scheduled("False", "SchedulingGated", "gated"), id="gated"),
        pytest.param("Pending", Scheduled("False", "Unschedulable", ""), id="empty message"),
        pytest.param("Pending", Scheduled("Unknown", "Unschedulable", OLD), id="status unknown"),
    ],
)
def test_no_verdict_yet(phase: str, scheduled: Scheduled | None) -> None:
    assert lease_can_help(phase, scheduled) is None


def test_postfilter_text_is_cut_off() -> None:
    assert filters_part(OLD).endswith("3 Insufficient nvidia.com/gpu.")


@pytest.mark.parametrize(
    "garbage",
    ["{", "{}", "Insufficient", "{gpu-class-reservation}", "x" * 5000, "\x00{a: b}"],
)
def test_malformed_messages_never_raise(garbage: str) -> None:
    assert lease_can_help("Pending", unschedulable(garbage)) in {True, False}
