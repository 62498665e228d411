"""The backstop by placement: every breach and exemption of the rule, the fresh reads
before acting (node included), the Event text, and the wake-ups. Each case is one
that got past the rule keyed on declared tolerations alone."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from reconciler.backstop.backstop import Backstop, wire
from reconciler.backstop.rules import Breach, Finding, Scope, findings, message
from reconciler.base.pods import project_pod
from shared import vocab
from shared.clock import format_utc
from shared.policy.inventory import NodeFacts, project_node_facts
from shared.policy.matching import MatchRules
from shared.resources import GPU_RESERVATIONS, NODES
from tests.reconciler.builders import NS, START
from tests.reconciler.upholdkit import H, World, facts, raw_pod, run

NOW = START + timedelta(minutes=10)
SCOPE = Scope(NS, frozenset({"kube-system"}))


def raw_node(name: str, cls: str | None) -> dict[str, Any]:
    taints = (
        [
            {
                "key": vocab.RESERVATION_TAINT_KEY,
                "value": cls,
                "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
            }
        ]
        if cls is not None
        else []
    )
    return {"metadata": {"name": name}, "spec": {"taints": taints}, "status": {}}


class Placed(World):
    """The upholders' world plus nodes: ``a1`` reserved for a100, ``h1`` for h100,
    ``plain`` untainted, ``blank`` tainted with an empty class."""

    def __init__(self) -> None:
        super().__init__(NOW)
        for name, cls in (("a1", "a100"), ("h1", "h100"), ("plain", None), ("blank", "")):
            self.kube.add(NODES, raw_node(name, cls))
        self.book(facts(1))  # alice's a100 booking, 2 GPUs, open

    def nodes(self) -> dict[str, NodeFacts]:
        found = (project_node_facts(o) for o in self.kube.items(NODES))
        return {f.name: f for f in found if f is not None}

    def backstop(self, counted: list[str] | None = None) -> Backstop:
        return Backstop(
            self.context,
            NS,
            scope=SCOPE,
            mirror_current=lambda: True,
            on_evicted=None if counted is None else counted.append,
            nodes=self.nodes,
        )

    def findings(self) -> dict[str, Breach]:
        found = findings(
            self.pods().values(),
            self.reservations(),
            SCOPE,
            self.clock.now(),
            mirror_current=True,
            nodes=self.nodes(),
        )
        return {f.pod.key: f.breach for f in found}


def squatter(name: str, node: str = "a1", *, ns: str = "carol", gpus: int = 8) -> dict[str, Any]:
    """A pod pinned by nodeName that declares nothing (no toleration, no reference)."""
    raw = raw_pod(name, None, ns=ns, node=node, gpus=gpus)
    raw["spec"]["tolerations"] = []
    raw["metadata"]["creationTimestamp"] = format_utc(NOW)
    return raw


def plain(name: str, node: str | None = "a1", *, ns: str = "carol") -> dict[str, Any]:
    """A pod with no gpu-class label and no GPU request."""
    raw = squatter(name, node or "a1", ns=ns, gpus=0)
    del raw["metadata"]["labels"][vocab.GPU_CLASS_LABEL]
    raw["spec"]["containers"][0]["resources"] = {}
    if node is None:
        del raw["spec"]["nodeName"]
    return raw


def admitted(name: str, node: str | None = "a1", **kw: Any) -> dict[str, Any]:
    raw = raw_pod(name, "res-1", node=node, **kw)
    raw["metadata"]["creationTimestamp"] = format_utc(NOW)
    return raw


def test_a_pod_pinned_to_a_reserved_node_without_admission_is_evicted_with_the_why() -> None:
    w = Placed()
    w.add_pod(squatter("squat"))
    counted: list[str] = []
    assert run(w.backstop(counted).once()) == 1
    assert not w.exists("squat", "carol")
    [(pod, reason, text)] = w.emit.sent
    assert (pod, reason) == ("carol/squat", vocab.REASON_UNADMITTED_TOLERATION)
    assert counted == [Breach.NO_ADMISSION]
    assert "on node a1, which is reserved for GPU class a100" in text
    assert "spec.nodeName" in text


def test_a_pod_asking_for_no_gpu_counts_pinned_or_declaring() -> None:
    w = Placed()
    w.add_pod(plain("zero"))
    declaring = plain("tolerating", node=None)
    declaring["spec"]["tolerations"] = [{"operator": "Exists"}]
    w.add_pod(declaring)
    w.add_pod(plain("elsewhere", node="plain"))  # a plain node: none of our business
    assert w.findings() == {
        "carol/zero": Breach.NO_ADMISSION,
        "carol/tolerating": Breach.NO_REFERENCE,
    }


def test_a_zero_gpu_pod_under_its_own_open_booking_is_not_admitted() -> None:
    w = Placed()
    w.add_pod(admitted("zero", gpus=0), hold_on="res-1")
    assert w.findings() == {"alice/zero": Breach.NO_GPUS}


def test_a_booking_of_another_class_than_the_node_or_the_toleration_is_wrong_class() -> None:
    w = Placed()
    w.add_pod(admitted("on-h100", node="h1"), hold_on="res-1")
    other = admitted("tolerates-h100", node=None)
    other["spec"]["tolerations"].append(
        {
            "key": vocab.RESERVATION_TAINT_KEY,
            "value": "h100",
            "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
        }
    )
    w.add_pod(other, hold_on="res-1")
    blanket = admitted("blanket", node=None)
    blanket["spec"]["tolerations"].append({"operator": "Exists"})
    w.add_pod(blanket, hold_on="res-1")
    w.add_pod(admitted("right", node="a1"), hold_on="res-1")
    assert w.findings() == {
        "alice/on-h100": Breach.WRONG_CLASS,
        "alice/tolerates-h100": Breach.WRONG_CLASS,
        "alice/blanket": Breach.WRONG_CLASS,
    }


def test_a_made_up_claim_before_the_window_opens_is_not_open() -> None:
    w = Placed()
    w.book(facts(2, START + H, START + 2 * H))  # alice's, opens in 50 min
    raw = raw_pod("early", "res-2", node="a1", claim="made-up")
    w.add_pod(raw)
    assert w.findings() == {"alice/early": Breach.NOT_OPEN}
    run(w.backstop().once())
    assert "res-2 holds no GPUs for it and is not open now" in w.emit.sent[0][2]


def test_a_made_up_claim_over_the_budget_is_over_budget_the_earlier_pods_stay() -> None:
    """Three 1-GPU pods of alice's on a 2-GPU booking, none with a hold (the webhook
    was down): the first two persisted are adopted, the third goes."""
    w = Placed()
    for name in ("p1", "p2", "p3"):
        w.add_pod(admitted(name, claim=f"made-up-{name}"))
    assert w.findings() == {"alice/p3": Breach.OVER_BUDGET}


def test_a_held_pod_overstaying_its_window_is_left_to_preemption() -> None:
    w = Placed()
    w.add_pod(admitted("long"), hold_on="res-1")
    w.clock = type(w.clock)(START + 5 * H)
    assert w.findings() == {}


def test_a_wiped_ledger_of_an_open_booking_evicts_nobody() -> None:
    w = Placed()
    w.add_pod(admitted("a"), hold_on="res-1")
    w.add_pod(admitted("b"), hold_on="res-1")
    obj = w.kube.objects[(GPU_RESERVATIONS.plural, NS, "res-1")]
    obj["status"] = {}
    assert w.findings() == {}


def test_exemptions_controller_namespace_daemonsets_in_exempt_namespaces_mirror_pods() -> None:
    w = Placed()
    w.add_pod(squatter("ours", ns=NS))
    ds = squatter("plugin", ns="kube-system")
    ds["metadata"]["ownerReferences"] = [
        {"kind": "DaemonSet", "name": "d", "uid": "d", "controller": True, "apiVersion": "v1"}
    ]
    w.add_pod(ds)
    user_ds = squatter("agent", ns="carol")
    user_ds["metadata"]["ownerReferences"] = ds["metadata"]["ownerReferences"]
    w.add_pod(user_ds)
    static = squatter("static", ns="carol")
    static["metadata"]["annotations"][vocab.MIRROR_POD_ANNOTATION] = "abc"
    w.add_pod(static)
    w.add_pod(squatter("bare", ns="kube-system"))
    assert w.findings() == {
        "carol/agent": Breach.NO_ADMISSION,
        "kube-system/bare": Breach.NO_ADMISSION,
    }


def test_a_node_tainted_with_an_empty_class_reserves_nothing() -> None:
    w = Placed()
    w.add_pod(squatter("there", node="blank"))
    assert w.findings() == {}


def test_a_taint_removed_before_the_fresh_read_saves_the_pod() -> None:
    w = Placed()
    w.add_pod(squatter("squat"))
    cached = w.nodes()
    w.kube.objects[(NODES.plural, None, "a1")]["spec"]["taints"] = []
    b = w.backstop()
    b._nodes = lambda: cached
    assert run(b.once()) == 0
    assert w.exists("squat", "carol")


def test_the_message_never_names_another_users_booking() -> None:
    """carol's pod references alice's booking (opening later): the text names the
    reference the pod carries, never alice or the window."""
    w = Placed()
    w.book(facts(2, START + H, START + 2 * H))
    w.add_pod(raw_pod("sneak", "res-2", ns="carol", node="a1"))
    [found] = findings(
        w.pods().values(), w.reservations(), SCOPE, NOW, mirror_current=True, nodes=w.nodes()
    )
    text = message(found)
    assert found.breach is Breach.NOT_OWNER
    assert "alice" not in text
    assert "res-2" in text
    assert format_utc(START)[:10] not in text
    assert "UTC" not in text


def test_every_breach_has_a_message() -> None:
    pod = project_pod(squatter("x"), MatchRules())
    assert pod is not None
    for breach in Breach:
        assert len(message(Finding(pod, breach, "res-1", "carol/y", ("a100",)))) <= 1024


def wired(b: Backstop, nodes: dict[str, NodeFacts], under: list[Any]) -> Any:
    caches = SimpleNamespace(
        pods=SimpleNamespace(listeners=[]),
        nodes=SimpleNamespace(listeners=[], items=nodes),
        reservations=SimpleNamespace(listeners=[]),
        by_reference=SimpleNamespace(pods=lambda name: under),
    )
    wire(b, caches)  # type: ignore[arg-type]
    return caches


def test_pods_on_reserved_nodes_taint_changes_and_ledger_moves_wake_it() -> None:
    w = Placed()
    w.add_pod(squatter("squat"))
    w.add_pod(squatter("elsewhere", node="plain"))
    w.add_pod(admitted("held"), hold_on="res-1")
    pods = w.pods()
    b = w.backstop()
    caches = wired(b, w.nodes(), [pods["alice/held"]])
    [on_pod] = caches.pods.listeners
    [on_node] = caches.nodes.listeners
    [on_reservation] = caches.reservations.listeners
    b.dirty.take()
    on_pod("carol/elsewhere", None, pods["carol/elsewhere"])
    assert not b.dirty.wake.is_set()
    on_pod("carol/squat", None, pods["carol/squat"])
    assert b.dirty.take() == {"carol/squat"}
    node = w.nodes()["a1"]
    on_node("a1", node, replace(node, allocatable=4))  # no taint change
    assert not b.dirty.wake.is_set()
    on_node("a1", node, replace(node, classes=("h100",)))
    assert b.dirty.take() is None
    on_node("plain", None, node)  # a node newly tainted
    assert b.dirty.take() is None
    res = w.reservations()["res-1"]
    on_reservation("res-1", res, replace(res, holds=(), resource_version="99"))
    assert b.dirty.take() == {"alice/held"}
