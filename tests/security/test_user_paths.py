"""Issue 25 acceptance 1, the paths an ordinary user takes with the webhook up: each
case of the issue's "Why" replayed in one shared sandbox as alice, bob, carol or dave
with their own kubeconfig (``tests.security.kit``), asserting the fixed behaviour.

Who uses what, so the cases do not meet: alice's open h100 booking of the default
scenario (cases 5 and 6), bob's h100 booking opening in ten minutes (case 3), carol has
no booking (cases 4, 9, 10), fresh a100 bookings for alice (2), bob (8) and dave (10).
Each test records every breach it sees and fails on the list, so one run shows all.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sandbox.release import RELEASE_NAME
from shared import model, vocab
from shared.policy.tolerations import granted_toleration
from shared.resources import GPU_RESERVATIONS, PODS
from tests.policy.builders import PodBuilder
from tests.reconciler.test_integration import kubectl_sandbox_marks
from tests.security.kit import (
    Stage,
    admitted,
    class_toleration,
    declares_reservation,
    gpus,
    notes,
    pod,
    reservation_toleration,
    waits,
)
from tests.webhook.helpers import review

pytest.importorskip("sandbox.kube.component")
pytestmark = kubectl_sandbox_marks(240)

#: A resource of a GPU's MIG profile (named in full, never the whole-GPU resource).
MIG = vocab.GPU_RESOURCE.replace("gpu", "mig-1g.10gb")
#: "A 1.6 MiB pod is enough" (issue 25, case 3): its UPDATE review carries it twice.
BIG_POD_BYTES = 1_677_722
#: etcd's default object limit, which a real API server enforces on what it stores.
STORED_LIMIT_BYTES = 1_572_864
DEEP = 100_000
#: Pairs of an admitted pod and a copy of its claim (issue 25: 2 to 4 in 10 got through).
COPY_TRIALS = 2


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    s = Stage(tmp_path_factory.mktemp("user-paths"))
    try:
        yield s
    finally:
        s.close()


async def owned(stage: Stage, owner: str, gpu_class: str) -> int:
    """The id of ``owner``'s (only) ``gpu_class`` booking the mirror holds."""
    items = (await stage.world.gateway.list_all(GPU_RESERVATIONS, stage.world.ctx.namespace)).items
    found = [model.from_object(o).facts for o in items]
    ids = [f.id for f in found if (f.owner, f.gpu_class) == (owner, gpu_class)]
    assert len(ids) == 1, found
    return ids[0]


async def unused(stage: Stage, rid: int) -> None:
    """Wait until booking ``rid`` holds nothing (an earlier test's pods are gone)."""

    async def empty() -> bool:
        res = await stage.reservation(rid)
        return res is not None and res.used_gpus == 0

    await waits(empty, 5)


def test_case_2_a_hand_made_admission_review_spends_no_booking_for_long(stage: Stage) -> None:
    """Case 2: anyone who reaches ``/mutate`` sends an AdmissionReview naming alice's
    namespace for a pod that is never created. The hold it wrote is released within a
    few seconds (LEDGER_UNSEEN_HOLD_SECONDS, 2 here; the claim's TTL is 120 s), and
    alice's next pod is admitted."""

    async def scenario() -> None:
        rid = await stage.book("alice", 1, "a100")
        try:
            ghost = pod("ghost", gpu_class="a100", limits=gpus(1))
            ghost["metadata"]["namespace"] = "alice"
            async with httpx.AsyncClient(verify=False, timeout=10) as http:
                answer = await http.post(
                    await stage.webhook_url(), json=review(ghost, user="alice")
                )
            assert answer.status_code == 200, answer.text
            res = await stage.reservation(rid)
            assert res is not None
            print(f"after the hand-made review: {res.used_gpus} of {res.facts.gpu_count} held")

            async def released() -> bool:
                got = await stage.reservation(rid)
                return got is not None and got.used_gpus == 0

            await waits(released, 2 + 2)
            done = await stage.create("alice", pod("real", gpu_class="a100", limits=gpus(1)))
            assert done.code == 0, done.err
            assert admitted(await stage.pod("alice", "real")), "alice's pod was not admitted"
        finally:
            await stage.cancel(rid)
            await stage.clear("alice")

    stage.run(scenario())


def test_case_3_an_oversized_update_review_lets_nothing_through(stage: Stage) -> None:
    """Case 3: bob's pod, queued for his booking that opens in ten minutes, is so large
    that an UPDATE review (old and new pod) passes 3 MiB. He patches it to add the
    reservation toleration, a reference to his booking and a reserved node, and to
    drop the scheduling gate. The patch is refused, or the pod is evicted within 2 s.

    The pod is 1.6 MiB as in the issue; where the API server refuses to store that
    (etcd's 1.5 MiB default), as large as it stores."""

    async def scenario() -> None:
        rid = await owned(stage, "bob", "h100")
        try:
            done = await stage.create("bob", big_pod(BIG_POD_BYTES))
            if done.code != 0 and "too large" in done.err.lower():
                done = await stage.create("bob", big_pod(STORED_LIMIT_BYTES - 4096))
            assert done.code == 0, done.err
            before = await stage.pod("bob", "big")
            assert before is not None
            assert not admitted(before)
            patch = json.dumps(sneak_in(before, model.reference(rid)))
            args = ("patch", "pod", "big", "-n", "bob", "--type=json", "-p", patch)
            patched = await stage.as_user("bob", *args)
            print(f"bob's patch: exit {patched.code} {patched.err.strip()[:300]}")
            if patched.code == 0:
                try:
                    await waits(lambda: stage.gone("bob", "big"), 2)
                except AssertionError:
                    got = await stage.pod("bob", "big") or {}
                    on = got.get("spec", {}).get("nodeName")
                    phase = got.get("status", {}).get("phase")
                    raise AssertionError(f"patched through; the pod is {phase} on {on}") from None
            else:
                assert not declares_reservation(await stage.pod("bob", "big"))
        finally:
            await stage.clear("bob")

    stage.run(scenario())


def big_pod(size: int) -> dict[str, Any]:
    """An h100 pod of one GPU whose JSON is about ``size`` bytes (an env value)."""
    body = pod("big", gpu_class="h100", limits=gpus(1))
    pad = size - len(json.dumps(body, separators=(",", ":"))) - 40
    body["spec"]["containers"][0]["env"] = [{"name": "PAD", "value": "x" * pad}]
    return body


def sneak_in(live: dict[str, Any], ref: str) -> list[dict[str, Any]]:
    """The JSON Patch that declares an admission bob was never given."""
    added = [reservation_toleration("h100"), class_toleration("h100")]
    had = live["spec"].get("tolerations")
    ops: list[dict[str, Any]] = (
        [{"op": "add", "path": "/spec/tolerations/-", "value": t} for t in added]
        if had
        else [{"op": "add", "path": "/spec/tolerations", "value": added}]
    )
    key = vocab.BOOKING_REFERENCE.replace("/", "~1")
    ops.append({"op": "add", "path": f"/metadata/annotations/{key}", "value": ref})
    ops.append(
        {"op": "add", "path": "/spec/nodeSelector", "value": {"kubernetes.io/hostname": "h100-r2"}}
    )
    if live["spec"].get("schedulingGates"):
        ops.append({"op": "remove", "path": "/spec/schedulingGates"})
    return ops


def test_case_4_a_pod_asking_for_no_gpu_never_carries_the_reservation(stage: Stage) -> None:
    """Case 4: carol (no booking) creates pods that ask for no GPU — no gpu-class
    label and no GPU request, or ``nvidia.com/gpu: "0"`` — declaring the reservation
    toleration: stripped at create (or refused). A plain pod patched to add it later:
    denied. A no-GPU pod pinned by ``nodeName`` to a reserved node: denied at create,
    or evicted within 2 s."""
    declared = [reservation_toleration("h100"), class_toleration("h100")]
    breaches: list[str] = []

    async def scenario() -> None:
        try:
            for made in (
                pod("plain", tolerations=declared),
                pod("zero", limits=gpus(0), tolerations=declared),
            ):
                name = made["metadata"]["name"]
                done = await stage.create("carol", made)
                if done.code == 0 and declares_reservation(await stage.pod("carol", name)):
                    breaches.append(f"{name}: created with the reservation toleration")
            assert (await stage.create("carol", pod("later"))).code == 0
            add = [{"op": "add", "path": "/spec/tolerations", "value": declared}]
            args = ("patch", "pod", "later", "-n", "carol", "--type=json", "-p", json.dumps(add))
            patched = await stage.as_user("carol", *args)
            if patched.code == 0:
                breaches.append("later: the toleration was added by a patch")
            pinned = await stage.create("carol", pod("pinned", node="h100-r1"))
            if pinned.code == 0 and not await gone_soon(stage, "carol", "pinned"):
                breaches.append("pinned: runs on reserved node h100-r1")
        finally:
            await stage.clear("carol")

    stage.run(scenario())
    assert not breaches, "; ".join(breaches)


async def gone_soon(stage: Stage, ns: str, name: str) -> bool:
    """Whether the pod is gone (evicted) before the suite's patience runs out; how
    soon is what ``waits`` logs against 2 s."""
    try:
        await waits(lambda: stage.gone(ns, name), 2)
    except AssertionError:
        return False
    return True


def test_case_5_no_gpu_and_mig_pods_are_not_admitted(stage: Stage) -> None:
    """Case 5: alice's open h100 booking (2 GPUs) is full; her pod asking for no GPU
    (no request, or ``nvidia.com/gpu: "0"``) is not admitted. A pod asking for
    ``nvidia.com/mig-1g.10gb: 1`` is refused at create with a message naming it."""
    breaches: list[str] = []

    async def scenario() -> None:
        await unused(stage, await owned(stage, "alice", "h100"))
        try:
            done = await stage.create("alice", pod("fill", gpu_class="h100", limits=gpus(2)))
            assert done.code == 0, done.err
            assert admitted(await stage.pod("alice", "fill"))
            for made in (
                pod("no-request", gpu_class="h100"),
                pod("zero", gpu_class="h100", limits=gpus(0)),
            ):
                name = made["metadata"]["name"]
                done = await stage.create("alice", made)
                got = await stage.pod("alice", name)
                if done.code == 0 and (admitted(got) or declares_reservation(got)):
                    breaches.append(f"{name}: admitted under the full booking")
            mig = await stage.create("alice", pod("mig", gpu_class="h100", limits={MIG: "1"}))
            print(f"MIG pod: exit {mig.code} {mig.err.strip()[:300]}")
            if mig.code == 0:
                got = await stage.pod("alice", "mig")
                breaches.append(f"mig: created (admitted: {admitted(got)})")
            elif MIG not in mig.err:
                breaches.append(f"mig: refused without naming {MIG}: {mig.err.strip()}")
        finally:
            await stage.clear("alice")

    stage.run(scenario())
    assert not breaches, "; ".join(breaches)


def test_case_6_the_gpu_class_of_an_admitted_pod_cannot_be_changed(stage: Stage) -> None:
    """Case 6 (the label): removing or changing the gpu-class label of alice's admitted
    pod is denied (403); the label stays. (Preemption by the admission's class:
    ``test_preemption_class.py``.)"""
    breaches: list[str] = []

    async def scenario() -> None:
        await unused(stage, await owned(stage, "alice", "h100"))
        try:
            done = await stage.create("alice", pod("mine", gpu_class="h100", limits=gpus(1)))
            assert done.code == 0, done.err
            assert admitted(await stage.pod("alice", "mine"))
            label = vocab.GPU_CLASS_LABEL
            for change in (f"{label}-", f"{label}=a100"):
                args = ("label", "--overwrite", "pod", "mine", "-n", "alice", change)
                done = await stage.as_user("alice", *args)
                print(f"kubectl label {change}: exit {done.code} {done.err.strip()[:200]}")
                if done.code == 0:
                    breaches.append(f"{change}: allowed")
                elif "denied" not in done.err and "Forbidden" not in done.err:
                    breaches.append(f"{change}: refused, but not by a denial: {done.err}")
            got = await stage.pod("alice", "mine")
            assert got is not None
            if (got["metadata"].get("labels") or {}).get(label) != "h100":
                breaches.append("the label changed")
        finally:
            await stage.clear("alice")

    stage.run(scenario())
    assert not breaches, "; ".join(breaches)


def test_case_8_a_copied_claim_admits_one_pod(stage: Stage) -> None:
    """Case 8: with the webhook up, bob creates a 1-GPU a100 pod under his booking with
    ``generateName`` (as a Job's pods are made) and, right after (his own client, no
    kubectl start-up in between), a second ``generateName`` pod carrying the first's
    booking reference and claim and the toleration it was granted — two such pairs,
    while the reconciler is paused (so no hold is bound to its pod yet). A copy may be
    queued, refused, or admitted and then evicted; once the reconciler runs, no claim is
    carried by two live admitted pods, and neither the ledger nor the live admitted
    pods ever go over the booking's budget."""

    async def scenario() -> None:
        rid = await stage.book("bob", 2 * COPY_TRIALS, "a100")  # room for a copy each
        ref = model.reference(rid)
        try:
            # The reconciler binds a hold to its pod within tens of milliseconds; the
            # copy must come before that (2 to 4 in 10 made it in the issue). Paused,
            # as during a leader handover or a restart, it binds none: every copy
            # comes in time.
            stage.reconciler.signal(signal.SIGSTOP)
            try:
                async with stage.client("bob") as http:
                    for i in range(COPY_TRIALS):
                        await copy_pair(http, i)
            finally:
                stage.reconciler.signal(signal.SIGCONT)
            over: list[str] = []

            async def settled() -> bool:
                listed = (await stage.world.gateway.list_all(PODS, "bob")).items
                mine = [
                    p
                    for p in listed
                    if not p["metadata"].get("deletionTimestamp")
                    and notes(p).get(vocab.BOOKING_REFERENCE) == ref
                ]
                res = await stage.reservation(rid)
                assert res is not None
                if res.used_gpus > res.facts.gpu_count:
                    over.append(f"ledger {res.used_gpus}")
                if len(mine) > res.facts.gpu_count:  # one GPU each
                    over.append(f"{len(mine)} live admitted pods")
                claims = [notes(p).get(vocab.ADMISSION_CLAIM) for p in mine]
                return len(claims) == len(set(claims))

            first = await settled()
            print(f"right after the creates, every claim on one live pod: {first}")
            await waits(settled, 2)
            began = time.monotonic()
            while time.monotonic() - began < 3:  # and it stays so
                assert await settled(), "a claim is carried by two live pods again"
                await asyncio.sleep(0.2)
            assert over == [], f"over the budget of {2 * COPY_TRIALS}: {sorted(set(over))}"
        finally:
            await stage.cancel(rid)
            await stage.clear("bob")

    stage.run(scenario())


async def copy_pair(http: httpx.AsyncClient, i: int) -> None:
    """A ``generateName`` pod, then at once a second one carrying its reference, claim
    and granted toleration."""
    path = "/api/v1/namespaces/bob/pods"
    made = PodBuilder(namespace="bob").generate_name(f"orig-{i}-").cls("a100").gpus("1")
    made.annotate(vocab.SANDBOX_RUN_SECONDS, "3600")
    first = await http.post(path, json=made.build())
    assert first.status_code == 201, first.text
    found = notes(first.json())
    assert vocab.ADMISSION_CLAIM in found, found
    copy = PodBuilder(namespace="bob").generate_name(f"copy-{i}-").cls("a100").gpus("1")
    copy.annotate(vocab.SANDBOX_RUN_SECONDS, "3600")
    copy.notes({k: found[k] for k in (vocab.BOOKING_REFERENCE, vocab.ADMISSION_CLAIM)})
    copy.tolerate(**granted_toleration("a100"))
    second = await http.post(path, json=copy.build())
    print(f"copy-{i}: {second.status_code}")


def test_case_9_a_user_reading_a_reservation_sees_claim_keys_never_claim_ids(
    stage: Stage,
) -> None:
    """Every authenticated user may read every GPUReservation (userAccess). What carol
    reads of bob's booking while his pod runs holds its claim's key (``sha256:``), never
    the claim id the pod carries, so reading the ledger gives nothing to copy onto a
    pod."""

    async def scenario() -> None:
        rid = await stage.book("bob", 1, "a100")
        try:
            async with stage.client("bob") as http:
                made = PodBuilder(namespace="bob").generate_name("keyed-").cls("a100")
                made.gpus("1").annotate(vocab.SANDBOX_RUN_SECONDS, "3600")
                created = await http.post("/api/v1/namespaces/bob/pods", json=made.build())
                assert created.status_code == 201, created.text
            claim_id = notes(created.json())[vocab.ADMISSION_CLAIM]
            path = GPU_RESERVATIONS.path(stage.world.ctx.namespace, model.reference(rid))
            async with stage.client("carol") as http:

                async def read() -> dict[str, Any] | None:
                    got = await http.get(path)
                    assert got.status_code == 200, got.text
                    obj: dict[str, Any] = got.json()
                    return obj if (obj.get("status") or {}).get("holds") else None

                obj = await waits(read, 5)
            assert obj is not None
            claims = [h["claim"] for h in obj["status"]["holds"]]
            assert claims == [model.claim_key(claim_id)]
            assert claim_id not in json.dumps(obj)
        finally:
            await stage.cancel(rid)
            await stage.clear("bob")

    stage.run(scenario())


def test_a_users_rights_are_the_threat_models(stage: Stage) -> None:
    """docs/operator/threat-model.md, "Who can do what", as ``kubectl auth can-i`` answers
    it for carol (a namespace editor) on the installed chart: pods in her namespace, read
    of the release's GPUReservations (``userAccess``); no write of a GPUReservation or its
    ledger, no pod binding or pod status, nothing in another user's or the release's
    namespace; no acting as the controller's service accounts."""
    release = stage.world.ctx.namespace
    plural = GPU_RESERVATIONS.plural
    expected = {
        ("create", "pods", "-n", "carol"): "yes",
        ("patch", "pods", "-n", "carol"): "yes",
        ("list", plural, "-n", release): "yes",
        ("watch", plural, "-n", release): "yes",
        ("create", plural, "-n", release): "no",
        ("patch", plural, "-n", release): "no",
        ("delete", plural, "-n", release): "no",
        ("patch", plural, "--subresource=status", "-n", release): "no",
        ("create", plural, "-n", "carol"): "no",
        ("create", "pods", "--subresource=binding", "-n", "carol"): "no",
        ("patch", "pods", "--subresource=status", "-n", "carol"): "no",
        ("create", "pods", "-n", "alice"): "no",
        ("create", "pods", "-n", release): "no",
        ("get", "secrets", "-n", release): "no",
    }

    async def answers() -> dict[tuple[str, ...], str]:
        found = {}
        for asked in expected:
            done = await stage.as_user("carol", "auth", "can-i", *asked)
            found[asked] = f"{done.out.strip()} (exit {done.code})"
        return found

    got = stage.run(answers())
    want = {k: f"{v} (exit {0 if v == 'yes' else 1})" for k, v in expected.items()}
    assert got == want
    controller = f"system:serviceaccount:{release}:{RELEASE_NAME}-reconciler"
    acting = stage.run(stage.as_user("carol", "get", plural, "-n", release, f"--as={controller}"))
    assert acting.code == 1
    assert 'User "carol" cannot impersonate resource "serviceaccounts"' in acting.err


def test_case_9_forged_keys_on_a_no_gpu_pod_and_deep_bodies(stage: Stage) -> None:
    """Case 9: forged controller-owned ``galends/*`` annotations on carol's pod that
    asks for no GPU are removed at create; a 100,000-deep JSON body to the webhook's
    ``/mutate`` and to the reconciler's push endpoint gets a 4xx, never a 500."""
    forged = {vocab.BOOKING_REFERENCE: model.reference(1), vocab.ADMISSION_CLAIM: "forged"}
    breaches: list[str] = []

    async def scenario() -> None:
        try:
            done = await stage.create("carol", pod("forger", annotations=forged))
            assert done.code == 0, done.err
            kept = sorted(set(forged) & set(notes(await stage.pod("carol", "forger"))))
            if kept:
                breaches.append(f"forged keys kept: {kept}")
        finally:
            await stage.clear("carol")
        deep = b"[" * DEEP + b"]" * DEEP
        json_type = {"Content-Type": "application/json"}
        async with httpx.AsyncClient(verify=False, timeout=20) as http:
            to_webhook = await http.post(await stage.webhook_url(), content=deep, headers=json_type)
            token = {"Authorization": f"Bearer {stage.world.ctx.inbound_token}", **json_type}
            push = f"{stage.reconciler.url}/api/reservations/push"
            to_push = await http.post(push, content=deep, headers=token)
        for where, answer in (("/mutate", to_webhook), ("push", to_push)):
            if not 400 <= answer.status_code < 500:
                breaches.append(f"{where}: {answer.status_code}")

    stage.run(scenario())
    assert not breaches, "; ".join(breaches)


def test_case_10_the_emulator_serves_what_users_do(stage: Stage) -> None:
    """Case 10 (the emulator): a webhook warning with "…" (carol's GPU pod with three
    forged keys: "removed a, b …") — the pod is created and kubectl shows the warning, no
    500; ``kubectl debug`` adds an ephemeral container; dave's Deployment and Job make
    their pods through the controllers (generateName, ownerReferences), and those pods
    are admitted under his booking as his hand-made pods are."""
    forged = {
        vocab.BOOKING_REFERENCE: model.reference(1),
        vocab.ADMISSION_CLAIM: "forged",
        vocab.ADMITTED_AT: "2020-01-01T00:00:00Z",
    }
    breaches: list[str] = []

    async def scenario() -> None:
        try:
            made = pod("warned", gpu_class="h100", limits=gpus(1), annotations=forged)
            done = await stage.create("carol", made)
            print(f"create with three forged keys: exit {done.code} {done.err.strip()[:300]}")
            stored = await stage.pod("carol", "warned")
            if done.code != 0 or "Warning:" not in done.err or stored is None:
                breaches.append(f"warned create: exit {done.code}, stored: {stored is not None}")
            assert (await stage.create("carol", pod("target"))).code == 0
            args = ("debug", "-n", "carol", "target", "--image=busybox", "-c", "dbg")
            debugged = await stage.as_user("carol", *args)
            got = await stage.pod("carol", "target")
            names = [c["name"] for c in (got or {}).get("spec", {}).get("ephemeralContainers", [])]
            if debugged.code != 0 or names != ["dbg"]:
                breaches.append(f"kubectl debug: exit {debugged.code}: {debugged.err.strip()}")
        finally:
            await stage.clear("carol")
        rid = await stage.book("dave", 2, "a100")
        try:
            await workloads(stage, model.reference(rid), breaches)
        finally:
            await stage.as_user("dave", "delete", "-n", "dave", "deployment/serve", "job/train")
            await stage.cancel(rid)
            await stage.clear("dave")

    stage.run(scenario())
    assert not breaches, "; ".join(breaches)


async def workloads(stage: Stage, ref: str, breaches: list[str]) -> None:
    template = pod("x", gpu_class="a100", limits=gpus(1))
    template["metadata"].pop("name")
    template["metadata"]["labels"]["app"] = "serve"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "serve"}},
            "template": template,
        },
    }
    job_template = json.loads(json.dumps(template))
    job_template["metadata"]["labels"]["app"] = "train"
    job_template["spec"]["restartPolicy"] = "Never"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"template": job_template, "backoffLimit": 0},
    }
    for obj in (deployment, job):
        done = await stage.create("dave", obj)
        if done.code != 0:
            breaches.append(f"{obj['kind']}: exit {done.code}: {done.err.strip()}")
            return

    async def made() -> list[dict[str, Any]] | None:
        items = (await stage.world.gateway.list_all(PODS, "dave")).items
        owned = [p for p in items if p["metadata"].get("ownerReferences")]
        return owned if len(owned) == 2 else None

    try:
        pods = await waits(made, 5)
    except AssertionError:
        breaches.append("the controllers made no pods")
        return
    for p in pods or []:
        meta = p["metadata"]
        if not meta.get("generateName"):
            breaches.append(f"{meta['name']}: no generateName")
        if notes(p).get(vocab.BOOKING_REFERENCE) != ref:
            breaches.append(f"{meta['name']}: not admitted under {ref}")
