"""The lease batch's vetting phases, on their own: who is due, and who may ask."""

from __future__ import annotations

from datetime import timedelta

from reconciler.base.pods import PodView, project_pod
from reconciler.base.settings import load
from reconciler.ondemand import vetting
from reconciler.ondemand.vetting import Context, Track
from shared import vocab
from shared.policy.matching import MatchRules
from shared.policy.ondemand import ClassNode, ClassState, Held
from tests.reconciler.builders import START
from tests.reconciler.test_ondemand import jit_pod

SETTINGS, _ = load(
    {
        "RESERVATION_API_URL": "http://app",
        "RESERVATION_API_KEY": "k",
        "ONDEMAND_LEASE_ENABLED": "true",
    }
)
NOW = START + timedelta(minutes=1)


def view(name: str, created_s: int = 0, gpus: int = 1) -> PodView:
    raw = jit_pod(name)
    raw["spec"]["containers"][0]["resources"]["limits"][vocab.GPU_RESOURCE] = str(gpus)
    raw["metadata"]["creationTimestamp"] = (START + timedelta(seconds=created_s)).isoformat()
    got = project_pod(raw, MatchRules())
    assert got is not None
    return got


def context(pods: list[PodView], free: int = 8) -> Context:
    nodes = (ClassNode("n1", (), free),)
    return Context(
        NOW,
        pods,
        [],
        {"a100": ClassState(nodes=nodes)},
        {"a100": nodes},
        {"a100": 2},
    )


def test_due_lists_the_jit_pods_oldest_first_and_keeps_one_track_each() -> None:
    young, old = view("young", created_s=30), view("old", created_s=10)
    tracks = {"uid-gone": Track(seen=START, due=START)}
    placed = {"uid-young", "uid-elsewhere"}
    due = vetting.due(context([young, old]), tracks, placed, SETTINGS)
    assert [p.name for p in due] == ["old"]  # young was placed by this process
    assert placed == {"uid-young"}  # the cache shows the other one admitted or gone
    assert set(tracks) == {"uid-old"}
    assert tracks["uid-old"] == Track(seen=NOW, due=NOW)


def test_due_leaves_a_candidate_whose_retry_has_not_come() -> None:
    pod = view("later")
    tracks = {"uid-later": Track(seen=START, due=NOW + timedelta(seconds=30))}
    assert vetting.due(context([pod]), tracks, set(), SETTINGS) == []
    assert "uid-later" in tracks  # still a candidate


def test_vet_counts_the_batchs_own_grants_against_the_free_block() -> None:
    """Guard 5 nets out what this batch granted already: with a block of three free
    GPUs, the first two-GPU pod may ask and the second is held, its hold recorded on
    its track at once."""
    first, second = view("first", gpus=2), view("second", created_s=5, gpus=2)
    tracks = {p.uid: Track(seen=NOW, due=NOW) for p in (first, second)}
    vetted = vetting.vet([first, second], context([first, second], free=3), tracks, SETTINGS)
    assert vetted.eligible == [first]
    assert [(p.name, pre.held) for p, pre in vetted.held] == [("second", Held.FRAGMENTED)]
    assert tracks["uid-second"].held is Held.FRAGMENTED
    assert tracks["uid-second"].due > NOW
    assert tracks["uid-first"].held is None


def test_vet_counts_paused_classes_for_the_gate_warning() -> None:
    pods = [view("a"), view("b", created_s=1)]
    ctx = context(pods)
    ctx.states["a100"] = ClassState(nodes=ctx.states["a100"].nodes, stuck=True)
    tracks = {p.uid: Track(seen=NOW, due=NOW) for p in pods}
    vetted = vetting.vet(pods, ctx, tracks, SETTINGS)
    assert vetted.eligible == []
    assert vetted.gated == {("a100", str(Held.STUCK_HOLDER)): 2}
