"""EVICTION_GRACE_SECONDS: how long a pod the reconciler deletes, or finds terminating on
a reserved node, may take to stop (``reconciler.backstop.lingering``, ``PodView.stop_grace``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from reconciler.backstop.lingering import SLACK_S, Lingerer, Lingering, lingers, message
from reconciler.base.pods import grace_of, project_pod
from shared import vocab
from shared.clock import format_utc
from shared.policy.matching import MatchRules
from shared.resources import PODS
from tests.reconciler.builders import NS
from tests.reconciler.test_backstop_placement import NOW, SCOPE, Placed, squatter
from tests.reconciler.test_sweep import BOUNDARY
from tests.reconciler.test_sweep import World as SweepWorld
from tests.reconciler.upholdkit import run

DAY_S = 86_400


def deleting(raw: dict[str, Any], left_s: float, grace_s: int = DAY_S) -> dict[str, Any]:
    """``raw`` as the API shows it after a delete whose grace leaves ``left_s`` to run."""
    raw["metadata"]["deletionTimestamp"] = format_utc(NOW + timedelta(seconds=left_s))
    raw["metadata"]["deletionGracePeriodSeconds"] = grace_s
    return raw


def lingering(w: Placed, counted: list[str] | None = None) -> Lingering:
    on_shortened = None if counted is None else (lambda: counted.append("shortened"))
    return Lingering(w.context, scope=SCOPE, nodes=w.nodes, tick_s=300.0, on_shortened=on_shortened)


@pytest.mark.parametrize(
    ("value", "grace"),
    [(None, 30), (0, 0), (7, 7), (DAY_S, DAY_S), (-5, 1), ("600", 30), (True, 30), (2.5, 30)],
)
def test_a_pods_own_grace_reads_as_a_delete_without_options_applies_it(
    value: Any, grace: int
) -> None:
    assert grace_of(value) == grace


def test_a_deletion_deadline_is_kept_on_the_view() -> None:
    raw = deleting(squatter("sq"), 100)
    view = project_pod(raw, MatchRules())
    assert view is not None
    assert view.deleting
    assert view.deletion_at == raw["metadata"]["deletionTimestamp"]
    assert view.stop_grace(60) == 30  # the pod's own (absent: 30) when it is shorter


def test_a_pod_deleted_with_a_day_of_grace_on_a_reserved_node_is_deleted_again() -> None:
    w = Placed()
    w.kube.add(PODS, deleting(squatter("sq"), DAY_S), "carol")
    counted: list[str] = []
    done = run(lingering(w, counted).once())
    assert done == 1
    assert counted == ["shortened"]
    assert w.kube.graces[("carol", "sq")] == w.grace_s
    sent = [(k, r) for k, r, _ in w.emit.sent]
    assert sent == [("carol/sq", vocab.REASON_TERMINATION_GRACE_SHORTENED)]
    assert vocab.REASON_TERMINATION_GRACE_SHORTENED in vocab.WARNING_REASONS


def test_the_event_says_how_long_was_left_the_rule_and_what_was_done() -> None:
    w = Placed()
    view = project_pod(deleting(squatter("sq"), 3_600), MatchRules())
    assert view is not None
    text = message(view, w.nodes(), NOW, 60)
    assert "3600 s left to stop" in text
    assert "node a1, which is reserved for GPU class a100" in text
    assert "deleted again with a grace period of 60 s" in text


@pytest.mark.parametrize(
    ("left_s", "node", "ns", "expected"),
    [
        (60 + SLACK_S + 1, "a1", "carol", True),  # just past what is allowed
        (60 + SLACK_S, "a1", "carol", False),  # within the allowed grace
        (DAY_S, "plain", "carol", False),  # an ordinary node
        (DAY_S, "a1", NS, False),  # the controller's own namespace
    ],
)
def test_only_pods_on_reserved_nodes_with_more_than_the_grace_left_linger(
    left_s: float, node: str, ns: str, expected: bool
) -> None:
    w = Placed()
    view = project_pod(deleting(squatter("sq", node, ns=ns), left_s), MatchRules())
    assert view is not None
    assert lingers(view, w.nodes(), SCOPE, NOW, 60) is expected


def test_a_pod_not_being_deleted_or_with_an_unreadable_deadline_does_not_linger() -> None:
    w = Placed()
    live = project_pod(squatter("live"), MatchRules())
    odd = squatter("odd")
    odd["metadata"]["deletionTimestamp"] = "next week"
    unreadable = project_pod(odd, MatchRules())
    assert live is not None
    assert unreadable is not None
    assert not lingers(live, w.nodes(), SCOPE, NOW, 60)
    assert not lingers(unreadable, w.nodes(), SCOPE, NOW, 60)


def test_a_deadline_already_shortened_when_read_again_is_left_alone() -> None:
    w = Placed()
    stale = project_pod(deleting(squatter("sq"), DAY_S), MatchRules())
    w.kube.add(PODS, deleting(squatter("sq"), 30, grace_s=30), "carol")  # as it stands now
    assert stale is not None
    pass_ = lingering(w)
    assert not run(pass_._handle(Lingerer(stale), NOW, {}))
    assert ("carol", "sq") not in w.kube.graces
    assert w.emit.sent == []


@pytest.mark.parametrize(("own", "sent"), [(DAY_S, 60), (5, 5), (None, 30)])
def test_the_backstop_evicts_with_the_pods_grace_at_most_the_allowed_one(
    own: int | None, sent: int
) -> None:
    w = Placed()
    raw = squatter("sq")
    if own is not None:
        raw["spec"]["terminationGracePeriodSeconds"] = own
    w.kube.add(PODS, raw, "carol")
    assert run(w.backstop().once()) == 1
    assert w.kube.graces[("carol", "sq")] == sent


def test_preemption_deletes_its_victims_with_the_allowed_grace_at_most() -> None:
    w = SweepWorld()
    w.full()
    w.book(3, "dave", BOUNDARY, BOUNDARY + timedelta(hours=1), 2)
    for name in ("b1", "b2"):
        w.kube.objects[(PODS.plural, "bob", name)]["spec"]["terminationGracePeriodSeconds"] = DAY_S
    run(w.sweeper.once())
    assert w.alive("bob") == []
    assert w.kube.graces[("bob", "b1")] == w.sweeper.settings.grace_s == 60
