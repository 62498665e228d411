"""Property: over random pod populations and placements — reserved and plain nodes of
two classes, bookings open, ended, upcoming or cancelled with random holds, claims
copied within and across namespaces, zero-GPU pods, DaemonSets, mirror pods — the
backstop evicts exactly the pods on reserved nodes (or declaring a reservation
toleration) that are not admitted there, for the reason a straightforward reference
implementation written here gives, and never an admitted one. Its verdicts do not
change when upkeep writes the ledgers it simulates."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.admission.evicting import held_by, hold_index
from reconciler.backstop.backstop import judged_again
from reconciler.backstop.rules import Breach, Ledgers, Scope, Times, findings, group_from
from reconciler.base.pods import PodView, project_pod
from shared import model, vocab
from shared.clock import format_utc
from shared.ledger import rebuild
from shared.policy.inventory import NodeFacts, project_node_facts
from shared.policy.matching import MatchRules
from tests.reconciler.builders import NS, START
from tests.reconciler.upholdkit import H

NOW = START + timedelta(minutes=30)
OWNERS = ("alice", "bob")
NAMESPACES = (*OWNERS, "kube-system", NS)
CLASSES = ("a100", "h100")
CLAIMS = ("c0", "c1", "c2", "c3")
TIMES = Times(ttl_s=120.0, unseen_s=10.0)
SCOPE = Scope(NS, frozenset({"kube-system"}))
#: The second a pod was created in (few values: same-second pairs are common).
SECONDS = (-300, -60, -1, 0)


@st.composite
def nodes(draw: st.DrawFn) -> dict[str, NodeFacts]:
    out = {}
    for i in range(4):
        taint = draw(st.sampled_from([None, *CLASSES]))
        taints = (
            []
            if taint is None
            else [
                {
                    "key": vocab.RESERVATION_TAINT_KEY,
                    "value": taint,
                    "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
                }
            ]
        )
        raw = {"metadata": {"name": f"n{i}"}, "spec": {"taints": taints}, "status": {}}
        facts = project_node_facts(raw)
        if facts is not None:
            out[facts.name] = facts
    return out


@st.composite
def reservations(draw: st.DrawFn) -> dict[str, model.GPUReservation]:
    out = {}
    for rid in range(1, draw(st.integers(1, 3)) + 1):
        offset = draw(st.integers(-2, 1))  # ended, open, open, upcoming
        state = draw(
            st.sampled_from([model.State.ACTIVE, model.State.ACTIVE, model.State.CANCELLED])
        )
        start = START + offset * H
        f = model.ReservationFacts(
            rid,
            draw(st.sampled_from(OWNERS)),
            draw(st.sampled_from(CLASSES)),
            "GPU",
            draw(st.integers(1, 3)),
            model.Kind.BOOKING,
            start,
            start + H,
            state,
            START,
        )
        out[f.name] = model.GPUReservation(f, ())
    return out


def raw_pod(
    i: int,
    ns: str,
    node: str | None,
    ref: str | None,
    claim: str | None,
    gpus: int,
    toleration: str,
    label: str | None,
    second: int,
    version: int,
    daemon: bool,
    mirror: bool,
    phase: str,
) -> dict[str, Any]:
    notes: dict[str, str] = {}
    if ref is not None:
        notes[vocab.BOOKING_REFERENCE] = ref
    if claim is not None:
        notes[vocab.ADMISSION_CLAIM] = claim
    if mirror:
        notes[vocab.MIRROR_POD_ANNOTATION] = "x"
    tolerations: list[dict[str, str]] = {
        "plain": [],
        "blanket": [{"operator": "Exists"}],
        "a100": [
            {
                "key": vocab.RESERVATION_TAINT_KEY,
                "value": "a100",
                "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
            }
        ],
        "h100": [
            {
                "key": vocab.RESERVATION_TAINT_KEY,
                "value": "h100",
                "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
            }
        ],
    }[toleration]
    meta: dict[str, Any] = {
        "name": f"p{i}",
        "namespace": ns,
        "uid": f"uid-{i}",
        "resourceVersion": str(version),
        "creationTimestamp": format_utc(NOW + timedelta(seconds=second)),
        "annotations": notes,
        "labels": {vocab.GPU_CLASS_LABEL: label} if label else {},
    }
    if daemon:
        meta["ownerReferences"] = [
            {"kind": "DaemonSet", "name": "ds", "uid": "d", "controller": True, "apiVersion": "v1"}
        ]
    limits = {vocab.GPU_RESOURCE: str(gpus)} if gpus else {}
    spec: dict[str, Any] = {
        "tolerations": tolerations,
        "containers": [{"name": "c", "resources": {"limits": limits}}],
    }
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


@st.composite
def worlds(
    draw: st.DrawFn, *, unique: bool = True
) -> tuple[dict[str, NodeFacts], dict[str, model.GPUReservation], list[PodView]]:
    found_nodes = draw(nodes())
    pool = draw(reservations())
    refs = [*sorted(pool), "res-99"]
    count = draw(st.integers(0, 9))
    versions = draw(st.permutations(list(range(100, 100 + max(count, 1)))))
    pods = []
    for i in range(count):
        raw = raw_pod(
            i,
            draw(st.sampled_from(NAMESPACES)),
            draw(st.sampled_from([None, "n0", "n1", "n2", "n3"])),
            draw(st.sampled_from([None, *refs])),
            draw(st.sampled_from([None, *CLAIMS])),
            draw(st.integers(0, 2)),
            draw(st.sampled_from(["plain", "plain", "blanket", "a100", "h100"])),
            draw(st.sampled_from([None, *CLASSES])),
            draw(st.sampled_from(SECONDS)),
            versions[i],
            draw(st.booleans()),
            draw(st.integers(0, 9)) == 0,
            draw(st.sampled_from(["Pending", "Running", "Running", "Succeeded"])),
        )
        view = project_pod(raw, MatchRules())
        if view is not None:
            pods.append(view)
    # Holds: unique claims per ledger (unless ``unique`` is off: a malformed ledger),
    # bound to one of the pods, to a gone pod, or none.
    for name, res in list(pool.items()):
        pool[name] = replace(res, holds=draw(ledgers(pods, unique=unique)))
    return found_nodes, pool, pods


@st.composite
def ledgers(draw: st.DrawFn, pods: list[PodView], *, unique: bool = True) -> tuple[model.Hold, ...]:
    uids = [p.uid for p in pods] + ["uid-gone"]
    holds = []
    # Shared claims are drawn from two, so that two holds of one claim are common.
    claims = st.sampled_from(CLAIMS if unique else CLAIMS[:2])
    for claim in draw(st.lists(claims, unique=unique, max_size=3)):
        bound = draw(st.sampled_from([None, *uids]))
        age = draw(st.sampled_from([1, 5, 30, 300]))
        gpus = draw(st.integers(1, 2))
        holds.append(model.Hold(claim, gpus, NOW - timedelta(seconds=age), None, bound))
    return tuple(holds)


# --- the reference implementation ------------------------------------------------------


def persisted(p: PodView) -> tuple[Any, ...]:
    when = p.created_at
    assert when is not None
    return (when, int(p.resource_version), p.uid)


def held_uids(res: model.GPUReservation, pods: list[PodView]) -> dict[str, str]:
    """The pods under ``res`` that keep or get a hold: uid → the hold's claim id
    (DESIGN §3.2, written out)."""
    live = [p for p in pods if p.uid and not p.finished and p.reference == res.name]
    live.sort(key=persisted)
    live_uids = {p.uid for p in live}
    owner = res.facts.owner
    held: dict[str, str] = {}
    used_claims: set[str] = set()
    gpus_used = 0
    orphans = []
    for p in live:
        mine = [h for h in res.holds if h.pod_uid == p.uid]
        if not mine and p.claim and p.namespace == owner:
            mine = [
                h
                for h in res.holds
                if h.claim == p.claim and (h.pod_uid is None or h.pod_uid not in live_uids)
            ]
        if mine and mine[0].claim not in used_claims:
            held[p.uid] = mine[0].claim
            used_claims.add(mine[0].claim)
            gpus_used += p.gpus
        else:
            orphans.append(p)
    for h in res.holds:
        young = h.at >= NOW - timedelta(seconds=TIMES.unseen_s)
        if h.pod_uid is None and h.claim not in used_claims and young:
            used_claims.add(h.claim)
            gpus_used += h.gpus
    f = res.facts
    if f.state is model.State.ACTIVE and f.start <= NOW < f.end:
        for p in orphans:
            claim = p.claim or f"pod-{p.uid}"
            if p.namespace != owner or p.gpus < 1 or claim in used_claims:
                continue
            if gpus_used + p.gpus <= f.gpu_count:
                held[p.uid] = claim
                used_claims.add(claim)
                gpus_used += p.gpus
    return held


def expected(
    found_nodes: dict[str, NodeFacts], pool: dict[str, model.GPUReservation], pods: list[PodView]
) -> dict[str, Breach]:
    """pod key → why it must go, for every pod that must go."""
    out: dict[str, Breach] = {}
    held = {name: held_uids(res, pods) for name, res in pool.items()}
    for p in pods:
        if not p.uid or p.finished or p.deleting:
            continue
        if p.namespace == NS or p.mirror or (p.daemon and p.namespace == "kube-system"):
            continue
        node = found_nodes.get(p.node) if p.node else None
        place = node.classes if node is not None else ()
        tolerated = p.declared_classes
        if not place and not tolerated:
            continue  # on no reserved node and declaring nothing: out of scope
        if p.reference is None:
            out[p.key] = Breach.NO_REFERENCE if tolerated else Breach.NO_ADMISSION
            continue
        res = pool.get(p.reference)
        if res is None:
            out[p.key] = Breach.UNKNOWN_RESERVATION
            continue
        f = res.facts
        in_window = f.start <= NOW < f.end
        mine = p.namespace == f.owner and p.claim is not None
        ran_under = any(h.pod_uid == p.uid or (mine and h.claim == p.claim) for h in res.holds)
        if in_window and ran_under and (f.state is model.State.CANCELLED or p.namespace != f.owner):
            continue  # the evictor's: it ran under the booking
        if p.namespace != f.owner:
            out[p.key] = Breach.NOT_OWNER
        elif (f.gpu_class not in place) if place else any(c != f.gpu_class for c in tolerated):
            out[p.key] = Breach.WRONG_CLASS
        elif p.gpus == 0:
            out[p.key] = Breach.NO_GPUS
        elif p.uid in held[res.name]:
            continue
        elif p.claim in held[res.name].values():
            out[p.key] = Breach.SHARED_CLAIM
        elif f.state is model.State.CANCELLED or not in_window:
            out[p.key] = Breach.NOT_OPEN
        else:
            out[p.key] = Breach.OVER_BUDGET
    return out


World = tuple[dict[str, NodeFacts], dict[str, model.GPUReservation], list[PodView]]


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_the_backstop_evicts_exactly_the_pods_not_admitted_where_they_are(world: World) -> None:
    found_nodes, pool, pods = world
    found = findings(pods, pool, SCOPE, NOW, mirror_current=True, nodes=found_nodes, times=TIMES)
    assert {f.pod.key: f.breach for f in found} == expected(found_nodes, pool, pods)


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_upkeep_writing_the_ledgers_it_simulates_changes_no_verdict(world: World) -> None:
    """The rule reads the holds upkeep would write now; once it has written them (or a
    wiped status was rebuilt), the verdicts are the same."""
    found_nodes, pool, pods = world
    before = findings(pods, pool, SCOPE, NOW, mirror_current=True, nodes=found_nodes, times=TIMES)
    written = {}
    for name, res in pool.items():
        uses = [p.use() for p in pods if p.uid and not p.finished and p.reference == name]
        written[name] = rebuild(res, uses, NOW, TIMES.ttl_s, TIMES.unseen_s)
    after = findings(pods, written, SCOPE, NOW, mirror_current=True, nodes=found_nodes, times=TIMES)
    assert [(f.pod.key, f.breach) for f in after] == [(f.pod.key, f.breach) for f in before]


@settings(max_examples=300, deadline=None)
@given(worlds(unique=False))
def test_a_malformed_ledger_of_shared_claims_gets_the_same_verdicts(world: World) -> None:
    """Two holds of one claim (a ledger no writer makes): a pod bound by uid is not
    taken as held without the rebuild; the verdicts are the reference's."""
    found_nodes, pool, pods = world
    found = findings(pods, pool, SCOPE, NOW, mirror_current=True, nodes=found_nodes, times=TIMES)
    assert {f.pod.key: f.breach for f in found} == expected(found_nodes, pool, pods)


def verdicts(
    found_nodes: dict[str, NodeFacts], pool: dict[str, model.GPUReservation], pods: list[PodView]
) -> dict[str, tuple[Breach, str | None]]:
    found = findings(pods, pool, SCOPE, NOW, mirror_current=True, nodes=found_nodes, times=TIMES)
    return {f.pod.key: (f.breach, f.holder) for f in found}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_ledger_change_moves_no_verdict_of_a_pod_it_does_not_judge_again(
    data: st.DataObject,
) -> None:
    """Holds of R changed alone (some kept, some dropped or re-bound, new ones, claims
    shared or not): every pod of R the backstop does not judge again
    (``judged_again``) is found in breach after only if it was before, for the same
    reason — a pass over the pods judged again finds every new finding a pass over
    every pod finds."""
    found_nodes, pool, pods = data.draw(worlds(unique=data.draw(st.booleans())))
    name = data.draw(st.sampled_from(sorted(pool)))
    old = pool[name]
    kept = data.draw(st.lists(st.sampled_from(old.holds), unique=True)) if old.holds else []
    fresh = data.draw(ledgers(pods, unique=data.draw(st.booleans())))
    new = replace(old, holds=tuple(data.draw(st.permutations([*kept, *fresh]))))
    before = verdicts(found_nodes, pool, pods)
    after = verdicts(found_nodes, {**pool, name: new}, pods)
    charged = [p for p in pods if p.uid and not p.finished and p.reference == name]
    again = {p.key for p in judged_again(charged, old, new)}
    for pod in charged:
        if pod.key not in again and pod.key in after:
            assert after[pod.key] == before.get(pod.key)


@settings(max_examples=300, deadline=None)
@given(st.booleans(), st.data())
def test_the_ledgers_shortcuts_answer_as_the_rebuild_does(
    unique: bool, data: st.DataObject
) -> None:
    """Every live pod under a reservation, asked of the rule's ledgers with their
    shortcuts (a pod bound by uid, the first taker of an unbound hold of its claim) and
    without them (a rebuild): the same standing, in well-formed and malformed ledgers."""
    _, pool, pods = data.draw(worlds(unique=unique))
    group = group_from(pods)
    fast = Ledgers(group, NOW, TIMES)
    slow = Ledgers(group, NOW, TIMES, shortcuts=False)
    for pod in pods:
        res = pool.get(pod.reference or "")
        if res is not None and pod.uid and not pod.finished:
            assert fast.standing(pod, res) == slow.standing(pod, res), pod.key


@settings(max_examples=200, deadline=None)
@given(st.booleans(), st.data())
def test_the_hold_index_finds_the_holds_a_scan_finds(unique: bool, data: st.DataObject) -> None:
    """``held_by`` through a ledger's index (a pass over many pods of one booking)
    answers as the scan of its holds, for every pod and every reservation."""
    _, pool, pods = data.draw(worlds(unique=unique))
    for res in pool.values():
        index = hold_index(res)
        for pod in pods:
            assert held_by(pod, res, index) == held_by(pod, res), (pod.key, res.name)


def test_a_reservation_object_is_indexed_once_a_changed_one_afresh() -> None:
    """The passes of every pod event under one cached reservation read one index; the
    reservation's next object (a new ledger) gets its own."""
    f = model.ReservationFacts(
        1,
        "alice",
        "a100",
        "GPU",
        2,
        model.Kind.BOOKING,
        START,
        START + H,
        model.State.ACTIVE,
        START,
    )
    res = model.GPUReservation(f, (model.Hold("c0", 1, NOW, None, "uid-0"),))
    first = hold_index(res)
    assert hold_index(res) is first
    moved = replace(res, holds=(model.Hold("c0", 1, NOW, None, "uid-1"),))
    assert hold_index(moved).uids == {"uid-1"}
    assert hold_index(res) is first  # a change's listeners read the old object too
    assert hold_index(moved) is hold_index(moved)
    assert hold_index(replace(moved)).uids == {"uid-1"}  # an equal object: indexed anew
