"""The proof-of-admission backstop: who is evicted with UnadmittedToleration, who never."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from reconciler.backstop.backstop import Backstop, wire
from reconciler.backstop.rules import (
    Breach,
    Group,
    Ledgers,
    Scope,
    Times,
    findings,
    group_from,
    message,
)
from reconciler.base.upkeep import Keeper, uses_by_reservation
from shared import model, vocab
from shared.clock import format_utc
from shared.errors import ServerError
from shared.ledger import PodUse
from shared.resources import GPU_RESERVATIONS
from tests.reconciler.builders import NS, START
from tests.reconciler.upholdkit import H, World, facts, raw_pod, run

NOW = START + timedelta(minutes=10)
SCOPE = Scope(NS, frozenset({"kube-system"}))


def backstop(
    w: World,
    *,
    mirror_current: bool = True,
    reservations: Any = None,
    counted: list[str] | None = None,
) -> Backstop:
    return Backstop(
        replace(w.context, reservations=reservations or w.reservations),
        NS,
        scope=SCOPE,
        mirror_current=lambda: mirror_current,
        on_evicted=None if counted is None else counted.append,
    )


def created(raw: dict[str, Any], at: datetime) -> dict[str, Any]:
    raw["metadata"]["creationTimestamp"] = format_utc(at)
    return raw


def declared(
    name: str, *, ns: str = "alice", tolerations: list[Any] | None = None
) -> dict[str, Any]:
    """A GPU pod created while the webhook was down: its own toleration, no reference."""
    raw = raw_pod(name, None, ns=ns)
    if tolerations is not None:
        raw["spec"]["tolerations"] = tolerations
    return created(raw, NOW - timedelta(minutes=1))


def wired(b: Backstop, charged: Group = lambda name: []) -> Any:
    """Stand-ins for the caches' listener lists, with the backstop's listeners on them
    (``charged``: the index of live pods by reservation)."""
    caches = SimpleNamespace(
        pods=SimpleNamespace(listeners=[]),
        nodes=SimpleNamespace(listeners=[], items={}),
        reservations=SimpleNamespace(listeners=[]),
        by_reference=SimpleNamespace(pods=charged),
    )
    wire(b, caches)  # type: ignore[arg-type]
    return caches


def daemon(raw: dict[str, Any]) -> dict[str, Any]:
    raw["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "plugin",
            "uid": "d",
            "controller": True,
        }
    ]
    return raw


def open_world() -> World:
    w = World(NOW)
    w.book(facts(1))
    return w


def test_a_pod_declaring_the_toleration_without_a_reference_is_evicted_with_a_warning() -> None:
    w = open_world()
    w.add_pod(declared("job"))
    counted: list[str] = []
    assert run(backstop(w, counted=counted).once()) == 1
    assert not w.exists("job")
    [(pod, reason, text)] = w.emit.sent
    assert (pod, reason) == ("alice/job", vocab.REASON_UNADMITTED_TOLERATION)
    assert vocab.REASON_UNADMITTED_TOLERATION in vocab.WARNING_REASONS
    assert "never admitted" in text
    assert "gpu-class-reservation=a100:NoSchedule" in text
    assert "Create it again without that toleration" in text
    assert counted == [Breach.NO_REFERENCE]


def test_any_form_of_the_toleration_counts_a_blanket_one_and_another_class_too() -> None:
    w = open_world()
    w.add_pod(declared("blanket", tolerations=[{"operator": "Exists"}]))
    w.add_pod(
        declared("exists", tolerations=[{"key": vocab.RESERVATION_TAINT_KEY, "operator": "Exists"}])
    )
    w.add_pod(
        declared("other-taint", tolerations=[{"key": vocab.GPU_CLASS_LABEL, "operator": "Exists"}])
    )
    w.add_pod(
        declared("other-class", tolerations=[{"key": vocab.RESERVATION_TAINT_KEY, "value": "h100"}])
    )
    run(backstop(w).once())
    assert not w.exists("blanket")
    assert not w.exists("exists")
    assert w.exists("other-taint")
    assert not w.exists("other-class")  # a toleration of any reservation class


def test_a_reference_to_no_reservation_is_evicted_once_the_mirror_is_current() -> None:
    w = open_world()
    w.add_pod(created(raw_pod("forged", "res-99"), NOW))
    assert run(backstop(w, mirror_current=False).once()) == 0
    assert w.exists("forged")
    b = backstop(w)
    assert run(b.once()) == 1
    assert b.evicted == {Breach.UNKNOWN_RESERVATION: 1}
    assert "res-99, which does not exist" in w.emit.sent[0][2]


def test_a_malformed_reservation_object_is_unknown_state_never_a_reason() -> None:
    w = open_world()
    w.add_pod(created(raw_pod("job", "res-1"), NOW))
    w.kube.objects[(GPU_RESERVATIONS.plural, NS, "res-1")]["spec"]["gpuCount"] = "lots"
    # the cache skips the malformed object, so the pass sees an unknown reference
    assert run(backstop(w, reservations=dict).once()) == 0
    assert w.exists("job")
    assert w.emit.sent == []


def test_a_reference_to_another_owners_reservation_is_evicted_outside_the_evictors_cases() -> None:
    w = World(NOW)
    w.book(facts(1, START + H, START + 2 * H))  # alice's, opens later
    w.add_pod(created(raw_pod("sneak", "res-1", ns="bob"), NOW))
    b = backstop(w)
    assert run(b.once()) == 1
    assert b.evicted == {Breach.NOT_OWNER: 1}
    assert "namespace bob does not own" in w.emit.sent[0][2]


def test_an_open_reassigned_booking_is_left_to_the_evictor_one_event_only() -> None:
    w = open_world()
    w.book(facts(1, owner="carol"))
    w.add_pod(created(raw_pod("job", "res-1"), NOW), hold_on="res-1")
    assert run(backstop(w).once()) == 0
    assert run(w.evictor.once()) == 1
    assert w.emit.reasons() == [vocab.REASON_RESERVATION_REASSIGNED]


def test_a_lagging_cache_never_evicts_the_fresh_reads_decide() -> None:
    w = open_world()
    w.add_pod(created(raw_pod("job", "res-1"), NOW))
    stale = {"res-1": model.GPUReservation(facts(1, owner="bob"), ())}
    assert run(backstop(w, reservations=lambda: stale).once()) == 0
    assert w.exists("job")
    assert w.emit.sent == []


def test_a_copy_sharing_an_earlier_pods_claim_is_evicted_the_original_stays() -> None:
    w = open_world()
    w.add_pod(created(raw_pod("first", "res-1", claim="c1"), NOW - timedelta(seconds=30)), "res-1")
    w.add_pod(created(raw_pod("copy", "res-1", claim="c1"), NOW - timedelta(seconds=5)))
    b = backstop(w)
    assert run(b.once()) == 1
    assert w.exists("first")
    assert not w.exists("copy")
    assert b.evicted == {Breach.SHARED_CLAIM: 1}
    assert "admission claim of pod alice/first" in w.emit.sent[0][2]


def test_a_pod_carrying_a_key_copied_from_the_ledger_is_no_holder_and_is_evicted() -> None:
    """The key a hold shows is no claim: a pod carrying it holds nothing and, the
    booking full with the original's hold, is evicted from the reserved node."""
    w = open_world()
    key = model.claim_key("c1")
    w.book(facts(1, gpus=1))  # full with the original's hold
    w.add_pod(created(raw_pod("first", "res-1", claim="c1"), NOW - timedelta(seconds=30)), "res-1")
    w.add_pod(created(raw_pod("copy", "res-1", claim=key), NOW - timedelta(seconds=5)))
    b = backstop(w)
    assert run(b.once()) == 1
    assert w.exists("first")
    assert not w.exists("copy")
    assert b.evicted == {Breach.OVER_BUDGET: 1}


def test_of_two_pods_of_one_claim_made_in_the_same_second_the_later_persisted_goes() -> None:
    """Same creation second, no hold bound yet: the pod persisted first (the lower
    resourceVersion — a watch delivers creations in that order) keeps the claim."""
    w = open_world()
    w.book(facts(1), (model.Hold("c1", 1, NOW),))
    w.add_pod(created(raw_pod("b", "res-1", claim="c1"), NOW))  # persisted first
    w.add_pod(created(raw_pod("a", "res-1", claim="c1"), NOW))
    b = backstop(w)
    assert run(b.once()) == 1
    assert w.exists("b")
    assert not w.exists("a")
    assert b.evicted == {Breach.SHARED_CLAIM: 1}
    assert "admission claim of pod alice/b" in w.emit.sent[0][2]


def test_a_claim_bound_to_a_pods_uid_stays_with_it_whatever_the_order() -> None:
    """Upkeep bound the hold to the later-persisted pod first: the binding decides."""
    w = open_world()
    w.add_pod(created(raw_pod("early", "res-1", claim="c1"), NOW))
    w.add_pod(created(raw_pod("late", "res-1", claim="c1"), NOW), hold_on="res-1")
    assert run(backstop(w).once()) == 1
    assert w.exists("late")
    assert not w.exists("early")


def test_the_copy_stays_when_the_original_left_before_the_fresh_read() -> None:
    w = open_world()
    w.add_pod(created(raw_pod("first", "res-1", claim="c1"), NOW - timedelta(seconds=30)))
    w.add_pod(created(raw_pod("copy", "res-1", claim="c1"), NOW))
    cached = w.pods()
    del w.kube.objects[("pods", "alice", "first")]
    b = backstop(w)
    b._pods = lambda: cached
    assert run(b.once()) == 0
    assert w.exists("copy")


def test_exemptions_controller_namespace_and_daemonsets_in_exempt_namespaces() -> None:
    w = open_world()
    w.add_pod(declared("ours", ns=NS))
    w.add_pod(daemon(declared("plugin", ns="kube-system")))
    w.add_pod(daemon(declared("plugin", ns="monitoring")))  # not an exempt namespace
    w.add_pod(declared("bare", ns="kube-system"))  # exempt namespace, but no DaemonSet
    run(backstop(w).once())
    assert w.exists("ours", NS)
    assert w.exists("plugin", "kube-system")
    assert not w.exists("plugin", "monitoring")
    assert not w.exists("bare", "kube-system")


def test_admitted_finished_terminating_and_undeclared_pods_are_never_touched() -> None:
    w = open_world()
    w.add_pod(created(raw_pod("admitted", "res-1"), NOW), "res-1")
    done = declared("done")
    done["status"]["phase"] = "Succeeded"
    w.add_pod(done)
    leaving = declared("leaving")
    leaving["metadata"]["deletionTimestamp"] = format_utc(NOW)
    w.add_pod(leaving)
    w.add_pod(declared("plain", tolerations=[]))
    assert run(backstop(w).once()) == 0
    assert w.emit.sent == []


def test_a_wiped_ledger_is_rebuilt_not_evicted() -> None:
    w = open_world()
    for i in range(2):
        w.add_pod(created(raw_pod(f"job-{i}", "res-1"), NOW), "res-1")
    obj = w.kube.objects[(GPU_RESERVATIONS.plural, NS, "res-1")]
    obj["status"] = {}

    def uses(name: str) -> list[PodUse]:
        return uses_by_reservation(w.pods().values()).get(name, [])

    keeper = Keeper(w.kube, NS, w.clock, 120, uses, w.reservations, lambda: True)
    assert run(keeper.once()) == ["res-1"]
    assert len(w.reservations()["res-1"].holds) == 2
    assert run(backstop(w).once()) == 0


def test_a_restart_between_the_event_and_the_delete_sends_no_second_event() -> None:
    w = open_world()
    w.add_pod(declared("job"))

    async def refuse(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise ServerError(503, "unavailable")

    real = w.kube.delete
    w.kube.delete = refuse  # type: ignore[method-assign]
    assert run(backstop(w).once()) == 0
    w.kube.delete = real  # type: ignore[method-assign]
    w.build()  # a restart
    assert run(backstop(w).once()) == 1
    assert w.emit.reasons() == [vocab.REASON_UNADMITTED_TOLERATION]


def test_a_second_pass_before_the_cache_shows_the_deletion_does_nothing() -> None:
    w = open_world()
    w.add_pod(declared("job"))
    cached = w.pods()
    b = backstop(w)
    b._pods = lambda: cached
    assert run(b.once()) == 1
    assert run(b.once()) == 0
    assert len(w.emit.sent) == 1


def test_the_message_names_the_pods_class_and_is_clipped() -> None:
    w = open_world()
    w.add_pod(declared("job"))
    [found] = findings(w.pods().values(), w.reservations(), SCOPE, NOW, mirror_current=True)
    text = message(found)
    assert len(text) <= 1024
    assert f"{vocab.RESERVATION_TAINT_KEY}=a100:{vocab.TAINT_EFFECT_NO_SCHEDULE}" in text


def test_a_declaring_pod_seen_by_the_cache_is_evicted_without_waiting_for_a_tick() -> None:
    """Acceptance 1's timing on virtual time: the pod event wakes the backstop, which
    evicts at the same instant (the tick is an hour away)."""
    w = open_world()
    b = backstop(w)
    caches = wired(b)

    async def scenario() -> None:
        task = asyncio.create_task(b.run(3600.0))
        await settle()
        w.add_pod(declared("job"))
        view = w.pods()["alice/job"]
        for listener in caches.pods.listeners:
            listener(view.key, None, view)
        await settle()
        assert not w.exists("job")
        assert w.clock.now() == NOW
        assert w.emit.reasons() == [vocab.REASON_UNADMITTED_TOLERATION]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(scenario())


def test_only_pods_declaring_the_toleration_and_reservations_wake_it() -> None:
    w = open_world()
    b = backstop(w)
    caches = wired(b)
    w.add_pod(declared("plain", tolerations=[]))
    w.add_pod(declared("job"))
    pods = w.pods()
    [on_pod] = caches.pods.listeners
    [on_reservation] = caches.reservations.listeners
    b.dirty.take()  # the first pass looks at everything
    on_pod("alice/plain", None, pods["alice/plain"])
    assert not b.dirty.wake.is_set()
    on_pod("alice/job", None, pods["alice/job"])
    assert b.dirty.wake.is_set()
    assert b.dirty.take() == {"alice/job"}  # a pod event: the next pass looks at that pod
    on_reservation("res-1", None, None)
    assert b.dirty.wake.is_set()
    assert b.dirty.take() is None  # a reservation event: at every pod
    res = w.reservations()["res-1"]
    claimed = replace(res, holds=(model.Hold("c", 1, NOW),), resource_version="9")
    on_reservation("res-1", res, claimed)  # its ledger alone moved: the rule reads no holds
    assert not b.dirty.wake.is_set()
    on_reservation("res-1", res, replace(res, facts=replace(res.facts, owner="bob")))
    assert b.dirty.take() is None


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


def test_a_pass_over_the_original_alone_still_finds_the_copy_seen_before_it() -> None:
    """A pass over touched pods decides on the pods sharing their claims too: the copy
    arrived in the cache first (and was left: no earlier holder yet); the original's
    event alone must get it evicted, with the holders taken from the whole cache."""
    w = open_world()
    w.add_pod(created(raw_pod("first", "res-1", claim="c1"), NOW - timedelta(seconds=30)), "res-1")
    w.add_pod(created(raw_pod("copy", "res-1", claim="c1"), NOW - timedelta(seconds=5)))
    w.add_pod(declared("other"))  # in breach too, but not touched: left to a full pass
    b = backstop(w)
    assert run(b.once({"alice/first"})) == 1
    assert not w.exists("copy")
    assert w.exists("first")
    assert w.exists("other")
    assert b.looked == 1


def test_a_burst_of_pod_events_costs_one_pass_over_the_pods_it_touched() -> None:
    """Many declaring pods appear while the backstop waits: their events coalesce into
    one pass, which decides on those pods only — not one full pass per event."""
    w = open_world()
    for i in range(30):
        w.add_pod(created(raw_pod(f"quiet{i}", "res-1"), NOW), "res-1")
    b = backstop(w)
    caches = wired(b)

    async def scenario() -> None:
        task = asyncio.create_task(b.run(3600.0))
        await settle()
        assert (b.passes, b.looked) == (1, 30)  # the first pass: every pod
        for i in range(20):
            w.add_pod(declared(f"job{i}"))
        pods = w.pods()
        for i in range(20):
            for listener in caches.pods.listeners:
                listener(f"alice/job{i}", None, pods[f"alice/job{i}"])
        for _ in range(10):
            await settle()
        assert (b.passes, b.looked) == (2, 20)
        assert not any(w.exists(f"job{i}") for i in range(20))
        assert all(w.exists(f"quiet{i}") for i in range(30))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(scenario())


def many_bound() -> tuple[World, Group]:
    """Booking res-1 with 40 pods its holds bind by uid, and one pod just admitted
    (its claim not in the ledger yet); the index of those pods by reservation."""
    w = open_world()
    w.book(facts(1, gpus=100))
    for i in range(40):
        w.add_pod(created(raw_pod(f"held{i}", "res-1"), NOW - timedelta(minutes=1)), "res-1")
    w.add_pod(created(raw_pod("new", "res-1"), NOW))
    return w, group_from(w.pods().values())


def test_a_ledger_change_judges_again_only_the_pods_whose_verdict_it_can_move() -> None:
    """On a booking of many bound pods, the webhook's claim for a new pod, its binding
    and its announcement mark each judge again the new pod alone (unbound, or its
    binding changed) — not the 40 pods whose holds are bound to their uids."""
    w, charged = many_bound()
    b = backstop(w)
    [on_reservation] = wired(b, charged).reservations.listeners
    b.dirty.take()
    res = w.reservations()["res-1"]
    kept = res.holds
    claimed = replace(res, holds=(*kept, model.Hold("claim-new", 1, NOW)))
    on_reservation("res-1", res, claimed)
    assert b.dirty.take() == {"alice/new"}
    bound = replace(claimed, holds=(*kept, model.Hold("claim-new", 1, NOW, "new", "uid-new")))
    on_reservation("res-1", claimed, bound)
    assert b.dirty.take() == {"alice/new"}  # its binding changed
    marked = replace(bound, holds=(*kept, replace(bound.holds[-1], announced=True)))
    on_reservation("res-1", bound, marked)
    assert not b.dirty.wake.is_set()  # nothing any verdict reads moved
    assert run(b.once({"alice/new"})) == 0
    assert b.looked == 1


def test_a_hold_moved_to_another_pod_judges_both_again() -> None:
    """A hold re-bound from one pod's uid to another's: the pod left without it and
    the pod that gained it are judged again; the other bound pods are not."""
    w, charged = many_bound()
    b = backstop(w)
    [on_reservation] = wired(b, charged).reservations.listeners
    b.dirty.take()
    res = w.reservations()["res-1"]
    first = res.holds[0]
    moved = replace(first, pod="new", pod_uid="uid-new")
    on_reservation("res-1", res, replace(res, holds=(moved, *res.holds[1:])))
    assert b.dirty.take() == {"alice/held0", "alice/new"}


def test_a_ledger_of_two_holds_of_one_claim_judges_every_pod_again() -> None:
    """Two holds of one claim bound to two pods (a malformed ledger): a bound uid is no
    longer sure to be held, so every pod of the booking is judged again."""
    w, charged = many_bound()
    b = backstop(w)
    [on_reservation] = wired(b, charged).reservations.listeners
    b.dirty.take()
    res = w.reservations()["res-1"]
    twin = model.Hold(res.holds[0].claim, 1, NOW, "new", "uid-new")
    on_reservation("res-1", res, replace(res, holds=(*res.holds, twin)))
    assert b.dirty.take() == {f"alice/held{i}" for i in range(40)} | {"alice/new"}


def test_a_pod_bound_by_uid_is_held_without_rebuilding_its_ledger() -> None:
    """The rule's ledger of R: a pod R's holds bind by uid is held at once; a pod
    without such a hold costs one rebuild of R (memoised for the pass)."""
    w, charged = many_bound()
    pods, res = w.pods(), w.reservations()["res-1"]
    ledgers = Ledgers(charged, NOW, Times())
    assert all(ledgers.standing(pods[f"alice/held{i}"], res) == (True, None) for i in range(40))
    assert ledgers.rebuilds == 0
    assert ledgers.standing(pods["alice/new"], res) == (True, None)  # adopted: room left
    assert ledgers.standing(pods["alice/held0"], res) == (True, None)
    assert ledgers.rebuilds == 1


def test_of_two_holds_of_one_claim_the_later_persisted_pod_holds_nothing() -> None:
    """A malformed ledger binding one claim to two live pods: the rule follows upkeep's
    rebuild (the first persisted keeps the claim), not the bindings alone."""
    w = open_world()
    w.book(facts(1, gpus=1))
    w.add_pod(created(raw_pod("a", "res-1", claim="c1"), NOW - timedelta(seconds=9)), "res-1")
    w.add_pod(created(raw_pod("b", "res-1", claim="c1"), NOW), "res-1")
    pods, res = w.pods(), w.reservations()["res-1"]
    assert [h.pod_uid for h in res.holds] == ["uid-a", "uid-b"]
    ledgers = Ledgers(group_from(pods.values()), NOW, Times())
    assert ledgers.standing(pods["alice/b"], res) == (False, "alice/a")
    assert ledgers.standing(pods["alice/a"], res) == (True, None)


def test_a_pass_over_touched_pods_reads_each_bookings_pods_once_for_copies() -> None:
    """The copies of the touched pods' claims are found from one index of each
    booking's pods by claim, not one scan of the booking per touched pod."""
    w, charged = many_bound()
    calls: list[str] = []

    def counting(name: str) -> list[Any]:
        calls.append(name)
        return charged(name)

    b = Backstop(w.context, NS, scope=SCOPE, mirror_current=lambda: True, group=counting)
    assert run(b.once({f"alice/held{i}" for i in range(20)})) == 0
    assert b.looked == 20
    assert calls == ["res-1"]  # the claim index; every touched pod is bound: no rebuild


def test_a_new_pod_taking_its_claims_unbound_hold_is_judged_without_a_rebuild() -> None:
    """The webhook's claim is in the ledger, unbound: the pod carrying it is the first
    (here the only) pod of the owner that can take it, so it is held — and a copy of it
    persisted later holds nothing, its holder named — without rebuilding the ledger of
    40 pods."""
    w, _ = many_bound()
    w.add_pod(created(raw_pod("copy", "res-1", claim="claim-new"), NOW + timedelta(seconds=1)))
    pods = w.pods()
    res = w.reservations()["res-1"]
    res = replace(res, holds=(*res.holds, model.Hold("claim-new", 1, NOW)))
    ledgers = Ledgers(group_from(pods.values()), NOW, Times())
    assert ledgers.standing(pods["alice/new"], res) == (True, None)
    assert ledgers.standing(pods["alice/copy"], res) == (False, "alice/new")
    assert ledgers.rebuilds == 0


def test_a_pod_bound_by_uid_to_another_hold_takes_no_hold_of_the_claim_it_carries() -> None:
    """An earlier pod carries claim c1 but R binds it by uid to another hold (a
    re-link, an edited annotation): it keeps that hold, so the unbound hold of c1 goes
    to the later pod carrying c1 — the shortcut answers as the rebuild does."""
    w = World(NOW)
    w.book(facts(1, gpus=4), (model.Hold("c1", 1, NOW), model.Hold("other", 1, NOW, "a", "uid-a")))
    w.add_pod(created(raw_pod("a", "res-1", claim="c1"), NOW - timedelta(seconds=9)))
    w.add_pod(created(raw_pod("b", "res-1", claim="c1"), NOW))
    pods, res = w.pods(), w.reservations()["res-1"]
    for shortcuts in (True, False):
        ledgers = Ledgers(group_from(pods.values()), NOW, Times(), shortcuts=shortcuts)
        assert ledgers.standing(pods["alice/b"], res) == (True, None)
        assert ledgers.standing(pods["alice/a"], res) == (True, None)
