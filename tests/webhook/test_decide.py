"""The pure decision: CREATE table and UPDATE rules (DESIGN §4)."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import vocab
from shared.model import GPUReservation, Hold
from shared.policy.tolerations import granted_toleration
from tests.policy.builders import HOUR, NOW, PodBuilder, gpu_pod, reservation
from tests.webhook.helpers import CONTROLLER_SA, GATE, policy
from tests.webhook.test_app import POD
from webhook.decide import Context, Outcome, admit, decide_create, decide_update
from webhook.patch import apply, diff
from webhook.settings import DENY


def ctx(**overrides: Any) -> Context:
    return Context(policy=policy(**overrides), now=NOW)


def create(pod: PodBuilder, *res: GPUReservation, **overrides: Any):
    return decide_create(pod.build(), "alice", res, ctx(**overrides))


def test_an_open_booking_with_budget_is_a_candidate_with_its_chained_guarantee() -> None:
    first = reservation(1, start=NOW - HOUR, end=NOW + HOUR)
    follow = reservation(2, start=NOW + HOUR, end=NOW + 3 * HOUR)
    verdict = create(gpu_pod(1), first, follow)
    assert verdict.outcome is Outcome.ADMIT
    assert [c.reservation.name for c in verdict.candidates] == ["res-1"]
    assert verdict.candidates[0].guaranteed_until == NOW + 3 * HOUR
    assert verdict.gpus == 1


def test_admit_stamps_toleration_annotations_and_lifts_the_gate() -> None:
    pod = gpu_pod(1).gate(GATE).gate("other").build()
    verdict = decide_create(pod, "alice", [reservation(1)], ctx(gate_name=GATE))
    stamped, text = admit(
        verdict.edited or pod, verdict.candidates[0], "claim-1", ctx(gate_name=GATE)
    )
    assert stamped["spec"]["tolerations"] == [granted_toleration("h100")]
    assert stamped["spec"]["schedulingGates"] == [{"name": "other"}]
    notes = stamped["metadata"]["annotations"]
    assert notes[vocab.BOOKING_REFERENCE] == "res-1"
    assert notes[vocab.ADMISSION_CLAIM] == "claim-1"
    assert notes[vocab.ADMITTED_AT] == "2026-01-05T10:00:00Z"
    assert text.startswith(
        "admitted under reservation res-1, guaranteed until 2026-01-05 12:00 UTC"
    )
    assert apply(pod, diff(pod, stamped)) == stamped


def test_a_full_booking_queues_with_the_full_warning_and_the_gate() -> None:
    verdict = create(gpu_pod(1), reservation(1, gpus=2, holds=(1, 1)), gate_name=GATE)
    assert verdict.outcome is Outcome.QUEUED
    assert verdict.edited is not None
    assert verdict.edited["spec"]["schedulingGates"] == [{"name": GATE}]
    assert "res-1 is full" in verdict.warnings[-1]


def test_a_future_booking_queues_gated_only_when_a_gate_is_configured() -> None:
    later = reservation(1, start=NOW + 2 * HOUR, end=NOW + 3 * HOUR)
    gated = create(gpu_pod(1), later, gate_name=GATE)
    plain = create(gpu_pod(1), later)
    assert gated.edited
    assert gated.edited["spec"]["schedulingGates"] == [{"name": GATE}]
    assert plain.edited
    assert "schedulingGates" not in plain.edited["spec"]
    assert "queued for reservation res-1, opens at 2026-01-05 12:00 UTC" in plain.warnings[-1]
    assert "scheduling gate" in gated.warnings[-1]


def test_a_booking_too_small_is_never_gated() -> None:
    verdict = create(gpu_pod(3), reservation(1, gpus=2), gate_name=GATE)
    assert verdict.outcome is Outcome.QUEUED
    assert verdict.edited
    assert "schedulingGates" not in verdict.edited["spec"]
    assert "holds 2 GPUs but the pod asks for 3" in verdict.warnings[-1]


def test_the_gate_is_not_added_twice() -> None:
    later = reservation(1, start=NOW + 2 * HOUR, end=NOW + 3 * HOUR)
    verdict = create(gpu_pod(1).gate(GATE), later, gate_name=GATE)
    assert verdict.edited
    assert verdict.edited["spec"]["schedulingGates"] == [{"name": GATE}]


def test_jit_eligible_pods_get_the_lease_warning_and_no_change() -> None:
    pod = gpu_pod(1).annotate(vocab.MINIMUM_RUNTIME_SECONDS, "600").annotate(vocab.USAGE_GROUP, "g")
    verdict = create(pod)
    assert verdict.outcome is Outcome.JIT
    assert verdict.edited == pod.build()
    assert "on-demand lease" in verdict.warnings[-1]


def test_no_match_says_why() -> None:
    verdict = create(gpu_pod(1), reservation(1, gpu_class="a100"))
    assert verdict.outcome is Outcome.NO_MATCH
    assert verdict.warnings == ("no reservation matches: your bookings are for another GPU class",)


@pytest.mark.parametrize(
    "toleration",
    [
        pytest.param(granted_toleration("h100"), id="the exact reservation toleration"),
        pytest.param({"operator": "Exists"}, id="operator Exists without a key"),
        pytest.param(
            {"key": vocab.RESERVATION_TAINT_KEY, "operator": "Exists"}, id="our key, Exists"
        ),
        pytest.param(granted_toleration("a100"), id="another class's toleration"),
    ],
)
def test_self_declared_reservation_tolerations_are_stripped(toleration: dict[str, Any]) -> None:
    keep = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    pod = PodBuilder(namespace="bob").cls().gpus("1").tolerate(**keep).tolerate(**toleration)
    verdict = decide_create(pod.build(), "bob", [reservation(1)], ctx())
    assert verdict.edited
    assert verdict.edited["spec"]["tolerations"] == [keep]
    assert verdict.warnings[0].startswith("toleration removed")
    assert verdict.notes == verdict.warnings[:1]


def test_deny_policy_refuses_instead() -> None:
    pod = PodBuilder(namespace="bob").cls().gpus("1").reservation_toleration()
    verdict = decide_create(pod.build(), "bob", [], ctx(toleration_policy=DENY))
    assert verdict.outcome is Outcome.DENIED
    assert vocab.RESERVATION_TAINT_KEY in verdict.message


def test_a_non_gpu_pod_loses_reservation_tolerations_and_forged_annotations() -> None:
    pod = (
        PodBuilder()
        .tolerate(operator="Exists")
        .tolerate(key="dedicated", operator="Exists")
        .reservation_toleration()
        .annotate(vocab.BOOKING_REFERENCE, "res-1")
    )
    verdict = create(pod)
    assert verdict.outcome is Outcome.PASS
    assert verdict.edited
    assert verdict.edited["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert verdict.edited["metadata"]["annotations"] == {}
    assert any("toleration removed" in w for w in verdict.warnings)


def test_a_non_gpu_pod_declaring_the_toleration_is_denied_under_the_deny_policy() -> None:
    verdict = create(PodBuilder().reservation_toleration(), toleration_policy=DENY)
    assert verdict.outcome is Outcome.DENIED
    assert vocab.RESERVATION_TAINT_KEY in verdict.message


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(PodBuilder().cls("h100"), id="labelled-no-request"),
        pytest.param(PodBuilder().cls("h100").gpus("0"), id="labelled-zero"),
        pytest.param(PodBuilder().cls("h100").gpus(0, "requests"), id="labelled-zero-int"),
    ],
)
def test_a_pod_asking_for_no_gpu_is_never_admitted_even_by_a_booking_owner(
    pod: PodBuilder,
) -> None:
    open_with_room = reservation(1)
    full = reservation(2, gpus=2, holds=(1, 1))
    for booking in (open_with_room, full):
        verdict = create(pod, booking)
        assert verdict.outcome is Outcome.NO_MATCH
        assert not verdict.candidates
        assert "asks for no GPU" in verdict.warnings[-1]


def test_a_pod_asking_for_no_gpu_still_loses_a_declared_toleration() -> None:
    verdict = create(PodBuilder().cls("h100").gpus("0").reservation_toleration(), reservation(1))
    assert verdict.outcome is Outcome.NO_MATCH
    assert verdict.edited is not None
    assert verdict.edited["spec"].get("tolerations") == []


def test_forged_controller_annotations_are_removed_and_the_pod_still_routed() -> None:
    pod = gpu_pod(1).annotate(vocab.BOOKING_REFERENCE, "res-9").annotate("team", "x")
    verdict = create(pod, reservation(1))
    assert verdict.outcome is Outcome.ADMIT
    assert verdict.edited
    assert verdict.edited["metadata"]["annotations"] == {"team": "x"}
    assert vocab.BOOKING_REFERENCE in verdict.warnings[0]


def own_hold(
    res: GPUReservation, claim: str, pod: str | None = "p", age_s: int = 1
) -> GPUReservation:
    hold = Hold(claim, 1, NOW - timedelta(seconds=age_s), pod=pod)
    return GPUReservation(res.facts, (hold,), "2")


def admitted_pod(claim: str = "c1") -> PodBuilder:
    return (
        gpu_pod(1)
        .reservation_toleration()
        .annotate(vocab.BOOKING_REFERENCE, "res-1")
        .annotate(vocab.ADMISSION_CLAIM, claim)
    )


def test_reinvocation_of_an_admitted_generate_name_pod_changes_nothing() -> None:
    pod = admitted_pod().generate_name("job-")
    verdict = create(pod, own_hold(reservation(1), "c1", pod=None))
    assert verdict.outcome is Outcome.ALREADY_ADMITTED
    assert verdict.edited is None


def test_reinvocation_of_an_admitted_pod_changes_nothing() -> None:
    verdict = create(admitted_pod(), own_hold(reservation(1), "c1"))
    assert verdict.outcome is Outcome.ALREADY_ADMITTED
    assert verdict.edited is None
    assert verdict.warnings[0].startswith("admitted under reservation res-1")


@pytest.mark.parametrize(
    ("res", "pod"),
    [
        pytest.param(own_hold(reservation(1), "other"), admitted_pod("c1"), id="unknown claim"),
        pytest.param(
            own_hold(reservation(1), "c1", pod="q"), admitted_pod(), id="another pod's hold"
        ),
        pytest.param(own_hold(reservation(1), "c1", age_s=600), admitted_pod(), id="an old hold"),
        pytest.param(
            own_hold(reservation(1, owner="bob"), "c1"), admitted_pod(), id="bob's booking"
        ),
        pytest.param(
            own_hold(reservation(1), "c1", pod=None),
            admitted_pod(),
            id="a copy of a generateName pod, named, before the hold is bound",
        ),
    ],
)
def test_copied_or_stale_claims_are_treated_as_forgeries(
    res: GPUReservation, pod: PodBuilder
) -> None:
    verdict = create(pod, res)
    assert verdict.outcome is not Outcome.ALREADY_ADMITTED
    assert verdict.edited is not None
    notes = verdict.edited["metadata"].get("annotations", {})
    assert vocab.BOOKING_REFERENCE not in notes
    assert verdict.edited["spec"]["tolerations"] == []


# --- UPDATE ---------------------------------------------------------------------------


def update(new: PodBuilder, old: PodBuilder, user: str = "alice", **overrides: Any):
    return decide_update(new.build(), old.build(), user, ctx(**overrides))


def test_adding_a_reservation_toleration_is_denied() -> None:
    verdict = update(gpu_pod(1).reservation_toleration(), gpu_pod(1))
    assert verdict.outcome is Outcome.DENIED
    assert vocab.RESERVATION_TAINT_KEY in verdict.message


def test_the_controller_may_add_it() -> None:
    assert (
        update(gpu_pod(1).reservation_toleration(), gpu_pod(1), CONTROLLER_SA).outcome
        is Outcome.PASS
    )


def test_a_configured_account_list_replaces_the_namespace_rule() -> None:
    accounts = frozenset({"system:serviceaccount:x:y"})
    new, old = gpu_pod(1).reservation_toleration(), gpu_pod(1)
    assert update(new, old, CONTROLLER_SA, controller_accounts=accounts).outcome is Outcome.DENIED
    assert (
        update(new, old, "system:serviceaccount:x:y", controller_accounts=accounts).outcome
        is Outcome.PASS
    )


@pytest.mark.parametrize(
    ("new", "old"),
    [
        pytest.param(gpu_pod().annotate(vocab.BOOKING_REFERENCE, "res-1"), gpu_pod(), id="adding"),
        pytest.param(gpu_pod(), gpu_pod().annotate(vocab.GUARANTEED_UNTIL, "x"), id="removing"),
        pytest.param(
            gpu_pod().annotate(vocab.ADMISSION_CLAIM, "a"),
            gpu_pod().annotate(vocab.ADMISSION_CLAIM, "b"),
            id="changing",
        ),
    ],
)
def test_changing_controller_owned_annotations_is_denied(new: PodBuilder, old: PodBuilder) -> None:
    verdict = update(new, old)
    assert verdict.outcome is Outcome.DENIED
    assert "reservation system only" in verdict.message


def test_ordinary_updates_pass() -> None:
    old = gpu_pod().reservation_toleration().annotate(vocab.BOOKING_REFERENCE, "res-1")
    new = (
        gpu_pod()
        .reservation_toleration()
        .annotate(vocab.BOOKING_REFERENCE, "res-1")
        .annotate("a", "b")
    )
    assert update(new, old).outcome is Outcome.PASS
    other = PodBuilder().tolerate(key="dedicated", operator="Exists")
    assert update(other, PodBuilder()).outcome is Outcome.PASS
    relabelled = PodBuilder().cls("a100")
    assert update(relabelled, PodBuilder().cls("h100")).outcome is Outcome.PASS  # not held


def test_a_booking_declared_a_no_show_admits_no_new_pod_and_chains_nothing() -> None:
    from shared.policy import noshow

    record = noshow.Record(NOW - HOUR / 2, NOW - HOUR / 2)
    declared = noshow.with_record(reservation(1), record)
    verdict = create(gpu_pod(1), declared)
    assert verdict.outcome is not Outcome.ADMIT
    first = reservation(2, start=NOW - HOUR, end=NOW + HOUR)
    follow = noshow.with_record(reservation(3, start=NOW + HOUR, end=NOW + 3 * HOUR), record)
    verdict = create(gpu_pod(1), first, follow)
    assert verdict.outcome is Outcome.ADMIT
    assert verdict.candidates[0].guaranteed_until == NOW + HOUR


def test_a_pod_with_nothing_to_remove_is_not_copied_and_never_edited_in_place() -> None:
    """Nothing forged to remove: the verdict carries the request's own pod (no copy,
    no patch); a queued pod's gate and an admitted pod's stamps go on copies, so the
    request's pod is never changed."""
    pod = gpu_pod(1).build()
    before = copy.deepcopy(pod)
    matched = decide_create(pod, "alice", [reservation(1)], ctx(gate_name=GATE))
    assert matched.outcome is Outcome.ADMIT
    assert matched.edited is pod
    admit(pod, matched.candidates[0], "claim-1", ctx(gate_name=GATE))
    nothing = decide_create(pod, "nobody", [], ctx())
    assert nothing.outcome is Outcome.NO_MATCH
    assert nothing.edited is pod
    full = reservation(1, gpus=2, holds=(1, 1))
    queued = decide_create(pod, "alice", [full], ctx(gate_name=GATE))
    assert queued.outcome is Outcome.QUEUED
    assert queued.edited is not None
    assert queued.edited["spec"]["schedulingGates"] == [{"name": GATE}]
    assert pod == before


#: Generating random pods is slow on a loaded machine; that is not a failure.
SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]


@settings(max_examples=150, deadline=None, suppress_health_check=SLOW_OK)
@given(pod=POD, gate=st.sampled_from([None, GATE]), dry=st.booleans())
def test_deciding_and_stamping_a_random_pod_never_edits_it(
    pod: dict[str, Any], gate: str | None, dry: bool
) -> None:
    """Edits copy only what they change and share the rest with the request's pod: the
    pod itself stays as it came, and the patch still takes it to the edited one."""
    before = json.dumps(pod, sort_keys=True)
    context = Context(policy=policy(gate_name=gate), now=NOW, dry_run=dry)
    pool = [reservation(1, gpus=4), reservation(2, gpus=1, holds=(1,))]
    verdict = decide_create(pod, "alice", pool, context)
    edited = verdict.edited
    if verdict.outcome is Outcome.ADMIT:
        edited, _ = admit(edited or pod, verdict.candidates[0], "claim-1", context)
    assert json.dumps(pod, sort_keys=True) == before
    if edited is not None:
        patched = apply(pod, diff(pod, edited))
        assert json.dumps(patched, sort_keys=True) == json.dumps(edited, sort_keys=True)


# --- adding the toleration, changing the class of a held pod ------------------------


@pytest.mark.parametrize(
    "toleration",
    [
        pytest.param({"operator": "Exists"}, id="exists-no-key"),
        pytest.param({"key": vocab.RESERVATION_TAINT_KEY, "operator": "Exists"}, id="our-key"),
    ],
)
def test_adding_a_reservation_toleration_to_any_pod_is_denied(toleration: dict[str, Any]) -> None:
    verdict = update(PodBuilder().tolerate(**toleration), PodBuilder())
    assert verdict.outcome is Outcome.DENIED
    assert vocab.RESERVATION_TAINT_KEY in verdict.message


def _admitted_old() -> PodBuilder:
    return gpu_pod().reservation_toleration().annotate(vocab.BOOKING_REFERENCE, "res-1")


@pytest.mark.parametrize(
    ("new_class", "held"),
    [
        pytest.param("a100", "admitted", id="changed"),
        pytest.param(None, "admitted", id="removed"),
    ],
)
def test_the_class_label_of_an_admitted_pod_cannot_change(new_class: str | None, held: str) -> None:
    new = _admitted_old()
    del new.obj["metadata"]["labels"][vocab.GPU_CLASS_LABEL]
    if new_class is not None:
        new.cls(new_class)
    verdict = update(new, _admitted_old())
    assert verdict.outcome is Outcome.DENIED
    assert vocab.GPU_CLASS_LABEL in verdict.message
    assert held in verdict.message


def test_the_class_label_of_a_queued_pod_cannot_change_even_with_the_gate_removed() -> None:
    old = gpu_pod().gate(GATE)
    new = gpu_pod(cls="a100")
    verdict = update(new, old, gate_name=GATE)
    assert verdict.outcome is Outcome.DENIED
    assert "queued" in verdict.message
    assert update(gpu_pod().gate(GATE), old, gate_name=GATE).outcome is Outcome.PASS


def test_the_group_label_is_held_only_when_groups_are_required() -> None:
    from shared.policy.matching import MatchRules

    old = _admitted_old().label("team", "ml")
    new = _admitted_old().label("team", "vision")
    assert update(new, old).outcome is Outcome.PASS
    grouped = update(new, old, rules=MatchRules(required_group_label="team"))
    assert grouped.outcome is Outcome.DENIED
    assert "team" in grouped.message


def test_the_controller_may_change_the_class_label() -> None:
    new = _admitted_old()
    new.cls("a100")
    assert update(new, _admitted_old(), user=CONTROLLER_SA).outcome is Outcome.PASS


# --- other GPU resources ------------------------------------------------------------


def _with(resources: dict[str, str], labelled: bool = True) -> PodBuilder:
    pod = PodBuilder().cls("h100") if labelled else PodBuilder()
    pod.obj["spec"]["containers"][0]["resources"] = {"limits": resources}
    return pod


def test_an_unlisted_gpu_resource_is_denied_naming_it_and_the_setting() -> None:
    for labelled in (True, False):
        verdict = create(_with({"nvidia.com/mig-1g.10gb": "1"}, labelled), reservation(1))
        assert verdict.outcome is Outcome.DENIED
        assert "nvidia.com/mig-1g.10gb" in verdict.message
        assert "GPU_RESOURCE_WEIGHTS" in verdict.message


def test_a_listed_resource_is_charged_by_its_weight() -> None:
    from shared.policy.gpus import GpuResources
    from shared.policy.matching import MatchRules

    weights = ((vocab.GPU_RESOURCE, 1), ("nvidia.com/mig-1g.10gb", 2))
    rules = MatchRules(gpu_resources=GpuResources(weights))
    pod = _with({"nvidia.com/mig-1g.10gb": "2", vocab.GPU_RESOURCE: "1"})
    verdict = create(pod, reservation(1, gpus=8), rules=rules)
    assert verdict.outcome is Outcome.ADMIT
    assert verdict.gpus == 5


def test_a_resource_outside_every_prefix_is_not_a_gpu() -> None:
    verdict = create(_with({"example.com/fpga": "1"}, labelled=False))
    assert verdict.outcome is Outcome.PASS


# --- pods pinned to a node ----------------------------------------------------------


def pinned(node: str = "a100-r1", classes: frozenset[str] = frozenset({"h100"})) -> Any:
    from webhook.decide import Pin

    return Pin(node, classes)


def create_pinned(pod: PodBuilder, *res: GPUReservation, pin: Any = None) -> Any:
    context = Context(policy=policy(), now=NOW, pinned=pin if pin is not None else pinned())
    return decide_create(pod.on("a100-r1").build(), "alice", res, context)


def test_a_pod_pinned_to_a_reserved_node_without_admission_is_denied() -> None:
    for pod in (PodBuilder(), gpu_pod(8), gpu_pod(1).gpus("0")):
        verdict = create_pinned(pod)
        assert verdict.outcome is Outcome.DENIED
        assert "may not be pinned to reserved node a100-r1" in verdict.message
        assert "without nodeName" in verdict.message


def test_a_pinned_pod_under_a_full_or_future_booking_is_denied_not_queued() -> None:
    full = reservation(1, gpus=2, holds=(1, 1))
    later = reservation(2, start=NOW + HOUR, end=NOW + 2 * HOUR)
    for booking in (full, later):
        assert create_pinned(gpu_pod(1), booking).outcome is Outcome.DENIED


def test_a_pinned_pod_admitted_now_under_a_booking_of_the_nodes_class_is_admitted() -> None:
    verdict = create_pinned(gpu_pod(1), reservation(1))
    assert verdict.outcome is Outcome.ADMIT
    assert [c.reservation.name for c in verdict.candidates] == ["res-1"]


def test_a_pinned_pod_of_another_class_is_denied() -> None:
    verdict = create_pinned(gpu_pod(1), reservation(1), pin=pinned(classes=frozenset({"a100"})))
    assert verdict.outcome is Outcome.DENIED


def test_an_unpinned_pod_on_an_ordinary_node_is_routed_as_usual() -> None:
    pod = gpu_pod(1).on("cpu-1")
    verdict = decide_create(pod.build(), "alice", [reservation(1)], ctx())
    assert verdict.outcome is Outcome.ADMIT
