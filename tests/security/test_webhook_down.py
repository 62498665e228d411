"""Issue 25 acceptance 1, the paths past the webhook: case 1 (a ``spec.nodeName``
squatter, with the webhook up and with it down) and case 7 (the forms the backstop
missed, created while every webhook replica is down — as after an outage, or through
case 3). One shared sandbox (``tests.security.kit``); users act with their own
kubeconfig. Each wait expects the backstop's figure (evicted within 2 s of the
reconciler seeing the pod) and fails only after the suite's patience.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from shared import model, vocab
from tests.reconciler.test_integration import kubectl_sandbox_marks
from tests.security.kit import (
    Stage,
    class_toleration,
    gpus,
    kubectl,
    pod,
    reservation_toleration,
    survivors,
    waits,
)
from tests.security.test_user_paths import owned

pytest.importorskip("sandbox.kube.component")
pytestmark = kubectl_sandbox_marks(240)
HOST = "kubernetes.io/hostname"
#: One GPU, written in nano-units: a quantity the API server accepts (``n`` is a
#: decimal SI suffix, and the value is whole); the webhook and the reconciler read it as 1.
ODD = "1000000000n"


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    s = Stage(tmp_path_factory.mktemp("webhook-down"))
    try:
        yield s
    finally:
        s.close()


class WebhookDown:
    """Every webhook replica stopped for the block; started (and ready) again after."""

    def __init__(self, stage: Stage) -> None:
        self.release = stage.release

    async def __aenter__(self) -> None:
        await self.release.scale("webhook", 0)  # kubectl scale --replicas=0

    async def __aexit__(self, *exc: object) -> None:
        await self.release.scale("webhook", 1)


def squatter() -> dict[str, Any]:
    """carol's 8-GPU pod pinned to reserved node a100-r1, with no toleration at all."""
    return pod("squat", gpu_class="a100", limits=gpus(8), node="a100-r1")


def test_case_1_a_node_name_squatter_is_refused_with_the_webhook_up(stage: Stage) -> None:
    """Case 1, webhook up: carol has no booking; her pod naming a reserved node in
    ``spec.nodeName`` is denied at create (nothing is stored)."""

    async def scenario() -> None:
        try:
            done = await stage.create("carol", squatter())
            print(f"create: exit {done.code} {done.err.strip()[:300]}")
            assert done.code != 0, "the squatter was created"
            assert "denied" in done.err
            assert await stage.pod("carol", "squat") is None
        finally:
            await stage.clear("carol")

    stage.run(scenario())


def test_case_1_a_node_name_squatter_is_evicted_with_the_webhook_down(stage: Stage) -> None:
    """Case 1, webhook down: the squatter is created (the API server's failure policy
    lets it through) and evicted within 2 s of the reconciler seeing it, with an Event
    saying why."""

    async def scenario() -> None:
        try:
            async with WebhookDown(stage):
                done = await stage.create("carol", squatter())
                assert done.code == 0, done.err
            await waits(lambda: stage.gone("carol", "squat"), 2)
            reasons = await stage.events("carol", "squat")
            assert vocab.REASON_UNADMITTED_TOLERATION in reasons, reasons
        finally:
            await stage.clear("carol")

    stage.run(scenario())


def test_case_7_every_form_the_backstop_missed_is_evicted(stage: Stage) -> None:
    """Case 7, webhook down, one pod per form, each pinned to its own reserved node:
    carol's h100 pod tolerating the a100 reservation (another class); dave's 3-GPU pod
    referencing his own 2-GPU booking with a made-up claim (over budget); bob's pod
    referencing his booking that opens in ten minutes with a made-up claim (not open);
    carol's unlabelled pod asking for ``1000000000n`` GPUs (an odd quantity) and tolerating the
    h100 reservation. Each is evicted; dave's ledger is never over budget."""

    async def scenario() -> None:
        dave = await stage.book("dave", 2, "h100")
        bob = await owned(stage, "bob", "h100")

        def claimed(rid: int) -> dict[str, str]:
            made_up = str(uuid.uuid4())  # one per pod: a shared one would be a copy (case 8)
            return {vocab.BOOKING_REFERENCE: model.reference(rid), vocab.ADMISSION_CLAIM: made_up}

        h100 = [reservation_toleration("h100"), class_toleration("h100")]
        forms = {
            ("carol", "other-class"): pod(
                "other-class",
                gpu_class="h100",
                limits=gpus(1),
                tolerations=[reservation_toleration("a100"), class_toleration("a100")],
                node_selector={HOST: "a100-r2"},
            ),
            ("dave", "over-budget"): pod(
                "over-budget",
                gpu_class="h100",
                limits=gpus(3),
                tolerations=h100,
                annotations=claimed(dave),
                node_selector={HOST: "h100-r1"},
            ),
            ("bob", "not-open"): pod(
                "not-open",
                gpu_class="h100",
                limits=gpus(1),
                tolerations=h100,
                annotations=claimed(bob),
                node_selector={HOST: "h100-r2"},
            ),
            ("carol", "odd-quantity"): pod(
                "odd-quantity",
                limits=gpus(ODD),
                tolerations=h100,
                node_selector={HOST: "h100-r3"},
            ),
        }
        over: list[int] = []

        async def gone(key: str) -> bool:
            res = await stage.reservation(dave)
            if res is not None and res.used_gpus > res.facts.gpu_count:
                over.append(res.used_gpus)
            ns, name = key.split("/")
            return await stage.gone(ns, name)

        try:
            async with WebhookDown(stage):
                for (user, name), made in forms.items():
                    done = await stage.create(user, made)
                    assert done.code == 0, f"{name}: {done.err}"
            began = time.monotonic()
            left = await survivors(gone, [f"{u}/{n}" for u, n in forms])
            print(f"waited {time.monotonic() - began:.1f} s")
            for user, name in forms:
                print(f"{user}/{name}: Events {await stage.events(user, name)}")
            placed = {k: await where(stage, k) for k in left}
            most = max(over, default=None)
            assert left == [], f"still there (node): {placed}; dave's ledger peak over 2: {most}"
            assert over == [], f"dave's ledger over budget: {most} of 2"
        finally:
            await stage.cancel(dave)
            await stage.clear("bob", "carol", "dave")

    stage.run(scenario())


async def where(stage: Stage, key: str) -> str | None:
    ns, name = key.split("/")
    got = await stage.pod(ns, name)
    return None if got is None else got["spec"].get("nodeName")


def test_a_pod_naming_another_users_booking_is_unadmitted_and_learns_nothing(
    stage: Stage,
) -> None:
    """Issue 27, case 3, webhook down: dave's pod names alice's open booking in
    ``galends/booking-reference`` and tolerates its reservation taint. It never ran
    under that booking, so it is evicted as unadmitted (``UnadmittedToleration``), not
    told the booking "was reassigned", and no Event shows dave alice's booking times."""

    async def scenario() -> None:
        alice = await stage.book("alice", 1, "a100")
        facts = (await stage.reservation(alice)).facts  # type: ignore[union-attr]
        forged = pod(
            "forged2",
            gpu_class="a100",
            limits=gpus(1),
            tolerations=[reservation_toleration("a100"), class_toleration("a100")],
            annotations={vocab.BOOKING_REFERENCE: model.reference(alice)},
        )
        try:
            async with WebhookDown(stage):
                done = await stage.create("dave", forged)
                assert done.code == 0, done.err
            await waits(lambda: stage.gone("dave", "forged2"), 2)
            told = await events_of(stage, "dave", "forged2")
            reasons = [e["reason"] for e in told]
            assert vocab.REASON_UNADMITTED_TOLERATION in reasons, reasons
            assert vocab.REASON_RESERVATION_REASSIGNED not in reasons, reasons
            for event in told:
                for instant in (facts.start, facts.end):
                    assert instant.strftime("%H:%M") not in event["message"], event["message"]
                assert "alice" not in event["message"], event["message"]
        finally:
            await stage.cancel(alice)
            await stage.clear("dave")

    stage.run(scenario())


async def events_of(stage: Stage, ns: str, name: str) -> list[dict[str, Any]]:
    """The Events about pod ``name``, as ``kubectl get events`` lists them."""
    done = await asyncio.to_thread(kubectl, stage.admin, "get", "events", "-n", ns, "-o", "json")
    items: list[dict[str, Any]] = json.loads(done.out)["items"] if done.out else []
    return [e for e in items if e["involvedObject"].get("name") == name]
