"""Issue 6 acceptance through the sandbox with the real kubectl (points 1–6).

GPUReservation objects are written directly (what the reconciler's mirror would write);
the webhook replicas are the chart's Deployment, run by the process kubelet under the
chart's service account, reached by the emulator's admission dispatch over TLS through
the one Service.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from shared import model, vocab
from shared.clock import utc
from shared.policy.tolerations import tolerates_reservation
from tests.policy.builders import PodBuilder
from tests.tlskit import presented
from tests.webhook.helpers import patch_of, review
from tests.webhook.sandbox_thread import SandboxThread

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]
GATE = vocab.SANDBOX_SCHEDULING_GATE


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxThread]:
    thread = SandboxThread(tmp_path_factory.mktemp("sandbox"), replicas=3)
    try:
        yield thread
    finally:
        thread.close()


def booking(
    sb: SandboxThread, rid: int, owner: str, gpus: int, start: datetime, end: datetime
) -> model.GPUReservation:
    facts = model.ReservationFacts(
        id=rid,
        owner=owner,
        gpu_class="h100",
        gpu_class_name="H100",
        gpu_count=gpus,
        kind=model.Kind.BOOKING,
        start=start,
        end=end,
        state=model.State.ACTIVE,
        updated_at=utc(2026, 1, 1),
    )
    res = model.GPUReservation(facts)
    sb.put_reservation(res)
    seen_by_every_replica(sb, res)
    return res


def seen_by_every_replica(sb: SandboxThread, res: model.GPUReservation) -> None:
    """Wait until every running replica's cache holds ``res`` (a pod created next may
    meet any of them): a dry-run review of a pod of its owner, which claims nothing,
    is answered naming it."""
    probe = review(gpu_pod("probe", res.facts.owner).build(), dry_run=True)
    deadline = time.monotonic() + 30
    with httpx.Client(verify=False, timeout=10) as http:  # loopback, a test certificate
        for replica in sb.webhook_replicas():
            while replica.running:
                answer = http.post(f"https://{replica.ip}:{replica.port}/mutate", json=probe)
                doc = answer.json()
                if res.name in json.dumps([doc["response"], patch_of(doc)]):
                    break
                assert time.monotonic() < deadline, f"{replica.name} never saw {res.name}"
                time.sleep(0.05)


def gpu_pod(name: str, namespace: str = "alice", gpus: int = 1) -> PodBuilder:
    return PodBuilder(name, namespace).cls("h100").gpus(str(gpus))


def tolerated(pod: dict[str, Any]) -> bool:
    return any(
        t.get("key") == vocab.RESERVATION_TAINT_KEY for t in pod["spec"].get("tolerations") or []
    )


def restart_with(sb: SandboxThread, *sets: str) -> None:
    """``python -m sandbox upgrade --set …``: the webhook's pods roll onto the new
    environment; returns once only pods of the new template run, all Ready. The upgrade
    sets the reconciler back to the chart's one replica, as helm's would: scaled to 0
    again."""
    sb.run(sb.release.upgrade(sets, settle=False))
    sb.run(sb.release.scale("reconciler", 0), timeout=120)


def test_1_admission_until_the_booking_is_full(sandbox: SandboxThread) -> None:
    now = sandbox.now()
    booking(sandbox, 101, "alice", 2, now - timedelta(hours=1), now + timedelta(hours=2))
    outs = [sandbox.apply(gpu_pod(f"a1-{i}").build()) for i in range(3)]
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    assert "admitted under reservation res-101, guaranteed until" in outs[0].stderr
    pods = [sandbox.pod("alice", f"a1-{i}") for i in range(3)]
    assert [tolerated(p) for p in pods] == [True, True, False]
    notes = pods[0]["metadata"]["annotations"]
    assert set(notes) >= vocab.CONTROLLER_OWNED_ANNOTATIONS - {
        vocab.TERMINATION_WARNING_AT,
        vocab.TERMINATION_WARNING_RISK,
        vocab.TERMINATION_WARNING_MESSAGE,
    }
    assert notes[vocab.BOOKING_REFERENCE] == "res-101"
    assert "res-101 is full" in outs[2].stderr
    holds = sandbox.reservation("res-101").holds
    assert sorted(h.claim for h in holds) == sorted(
        model.claim_key(p["metadata"]["annotations"][vocab.ADMISSION_CLAIM]) for p in pods[:2]
    )


def test_2_forty_concurrent_pods_three_replicas_six_gpus(sandbox: SandboxThread) -> None:
    now = sandbox.now()
    booking(sandbox, 102, "carol", 6, now - timedelta(hours=1), now + timedelta(hours=2))
    with ThreadPoolExecutor(40) as pool:
        outs = list(
            pool.map(lambda i: sandbox.apply(gpu_pod(f"c-{i}", "carol").build()), range(40))
        )
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs if o.returncode]
    pods = [sandbox.pod("carol", f"c-{i}") for i in range(40)]
    admitted = [p for p in pods if tolerated(p)]
    assert len(admitted) == 6
    claims = sorted(
        model.claim_key(p["metadata"]["annotations"][vocab.ADMISSION_CLAIM]) for p in admitted
    )
    holds = sandbox.reservation("res-102").holds
    assert sorted(h.claim for h in holds) == claims
    assert sum(h.gpus for h in holds) == 6


def test_3_tolerations_and_annotations_cannot_be_forged(sandbox: SandboxThread) -> None:
    forged = (
        gpu_pod("b-1", "bob").reservation_toleration().annotate(vocab.BOOKING_REFERENCE, "res-101")
    )
    out = sandbox.apply(forged.build())
    assert out.returncode == 0, out.stderr
    assert "toleration removed" in out.stderr
    pod = sandbox.pod("bob", "b-1")
    assert not tolerated(pod)
    assert vocab.BOOKING_REFERENCE not in (pod["metadata"].get("annotations") or {})
    exists = gpu_pod("b-2", "bob").tolerate(operator="Exists")
    assert sandbox.apply(exists.build()).returncode == 0
    kept = sandbox.pod("bob", "b-2")["spec"].get("tolerations") or []
    assert not any(tolerates_reservation(t) for t in kept)

    toleration = json.dumps(
        [
            {
                "op": "add",
                "path": "/spec/tolerations/-",
                "value": {
                    "key": vocab.RESERVATION_TAINT_KEY,
                    "operator": "Equal",
                    "value": "h100",
                    "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
                },
            }
        ]
    )
    refused = sandbox.kubectl("-n", "bob", "patch", "pod", "b-1", "--type=json", "-p", toleration)
    assert refused.returncode != 0
    assert "granted with a reservation, never declared" in refused.stderr
    # the chart's reconciler service account (CONTROLLER_SERVICE_ACCOUNTS)
    controller = sandbox.user_kubeconfig(
        f"system:serviceaccount:{sandbox.namespace}:{vocab.PRODUCT_NAME}-reconciler",
        ["system:masters", "system:serviceaccounts"],
    )
    allowed = sandbox.kubectl(
        "-n",
        "bob",
        "patch",
        "pod",
        "b-1",
        "--type=json",
        "-p",
        toleration,
        token_kubeconfig=controller,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert tolerated(sandbox.pod("bob", "b-1"))

    restart_with(sandbox, "webhook.tolerationPolicy=deny")  # RESERVATION_TOLERATION_POLICY
    try:
        denied = sandbox.apply(gpu_pod("b-3", "bob").reservation_toleration().build())
        assert denied.returncode != 0
        assert "denied the request" in denied.stderr
    finally:
        restart_with(sandbox, "webhook.tolerationPolicy=strip")


def test_4_a_future_booking_gates_only_with_a_gate_name(sandbox: SandboxThread) -> None:
    """The sandbox runs with a gate name (``matching.podSchedulingGateName`` of
    sandbox/values.yaml); without one, the queued pod is left ungated."""
    now = sandbox.now()
    booking(sandbox, 104, "dave", 2, now + timedelta(minutes=10), now + timedelta(hours=1))
    gated = sandbox.apply(gpu_pod("d-1", "dave").build())
    assert "queued for reservation res-104, opens at" in gated.stderr
    assert "held by a scheduling gate" in gated.stderr
    assert sandbox.pod("dave", "d-1")["spec"]["schedulingGates"] == [{"name": GATE}]
    restart_with(sandbox, "matching.podSchedulingGateName=")  # no POD_SCHEDULING_GATE_NAME
    try:
        plain = sandbox.apply(gpu_pod("d-2", "dave").build())
        assert "queued for reservation res-104" in plain.stderr
        assert "scheduling gate" not in plain.stderr
        assert not sandbox.pod("dave", "d-2")["spec"].get("schedulingGates")
    finally:
        restart_with(sandbox, f"matching.podSchedulingGateName={GATE}")


def test_5_pods_are_created_while_every_replica_is_down(sandbox: SandboxThread) -> None:
    now = sandbox.now()
    booking(sandbox, 105, "dave", 4, now - timedelta(hours=1), now + timedelta(hours=1))
    count = len(sandbox.webhook_replicas())
    sandbox.run(sandbox.release.scale("webhook", 0))  # kubectl scale --replicas=0
    assert sandbox.webhook_replicas() == []
    try:
        out = sandbox.apply(gpu_pod("e-1", "dave").build())
        assert out.returncode == 0, out.stderr
        assert not tolerated(sandbox.pod("dave", "e-1"))
    finally:
        sandbox.run(sandbox.release.scale("webhook", count))
    replicas = sandbox.webhook_replicas()
    assert len(replicas) == count
    for replica in replicas:
        # Ready (the scale waits for it) only after its one cache sync was logged
        assert replica.log_path.read_text().count("cache.synced") == 1


def test_6_rotation_without_restart_or_failed_admission(sandbox: SandboxThread) -> None:
    now = sandbox.now()
    booking(sandbox, 106, "carol", 40, now - timedelta(hours=1), now + timedelta(hours=1))
    replica = sandbox.webhook_replicas()[0]
    pid = replica.pid
    before = presented(replica.port, replica.ip)
    new = sandbox.release.rotate()
    outs = [sandbox.apply(gpu_pod(f"f-{i}", "carol").build()) for i in range(6)]
    deadline = time.monotonic() + 30  # liveness: the replica rereads its files
    while presented(replica.port, replica.ip) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    from cryptography.hazmat.primitives.serialization import Encoding

    assert presented(replica.port, replica.ip) == new.certificate.public_bytes(Encoding.DER)
    assert replica.running
    assert sandbox.webhook_replicas()[0].pid == pid
    assert all("admitted under reservation res-106" in o.stderr for o in outs), [
        o.stderr for o in outs
    ]


def test_7_a_burst_of_job_pods_gets_one_claim_per_admitted_pod(sandbox: SandboxThread) -> None:
    """Forty concurrent ``kubectl create`` of ``generateName`` pods (as a Job's come) on
    a booking of 200 GPUs through three replicas: every pod is created, each admitted
    one with a claim of its own that is a hold of the booking (bob has no other
    booking: the forgery test's pods named none). A pod whose claim missed the ledger
    deadline on a loaded machine is created unadmitted (the reconciler admits it)."""
    now = sandbox.now()
    booking(sandbox, 107, "bob", 200, now - timedelta(hours=1), now + timedelta(hours=1))
    manifest = gpu_pod("unused", "bob").build()
    del manifest["metadata"]["name"]
    manifest["metadata"]["generateName"] = "job-"
    body = json.dumps(manifest)
    with ThreadPoolExecutor(40) as pool:
        outs = list(
            pool.map(
                lambda _: sandbox.kubectl("create", "-f", "-", "-o", "name", stdin=body), range(40)
            )
        )
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    admitted = [o for o in outs if "admitted under reservation res-107" in o.stderr]
    assert len(admitted) >= 20, [o.stderr for o in outs]
    names = {o.stdout.strip().removeprefix("pod/") for o in admitted}
    pods = [sandbox.pod("bob", name) for name in names]
    claims = [model.claim_key(p["metadata"]["annotations"][vocab.ADMISSION_CLAIM]) for p in pods]
    assert len(set(claims)) == len(admitted)
    holds = {h.claim: h for h in sandbox.reservation("res-107").holds}
    assert set(claims) <= set(holds)
    assert all(holds[c].pod is None for c in claims)  # a generateName pod's hold names none


def test_8_a_pod_pinned_to_a_reserved_node_is_refused_unless_admitted(
    sandbox: SandboxThread,
) -> None:
    """erin, with no booking, creates an 8-GPU pod with ``spec.nodeName`` naming a
    reserved node (no scheduler would ever place it there): refused with a message
    saying how to create it instead. Once erin's booking is open, her pinned pod is
    admitted."""
    from shared.resources import NAMESPACES, NODES

    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "erin"}}
    sandbox.run(sandbox.gateway.create(NAMESPACES, namespace))
    taint = {
        "key": vocab.RESERVATION_TAINT_KEY,
        "value": "h100",
        "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
    }
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "h100-pinned"}}
    node["spec"] = {"taints": [taint]}
    sandbox.run(sandbox.gateway.create(NODES, node))
    pinned = gpu_pod("pinned", "erin", gpus=8).build()
    pinned["spec"]["nodeName"] = "h100-pinned"
    body = json.dumps(pinned)
    deadline = time.monotonic() + 30  # every replica's node cache sees the new node
    while True:  # a server-side dry run is reviewed like a create and stores nothing
        tries = [
            sandbox.kubectl("create", "--dry-run=server", "-f", "-", stdin=body) for _ in range(6)
        ]
        if all("may not be pinned" in o.stderr for o in tries) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    outs = [sandbox.kubectl("create", "-f", "-", stdin=body)]
    assert all(o.returncode != 0 for o in outs), [o.stderr for o in outs]
    assert "may not be pinned to reserved node h100-pinned" in outs[0].stderr
    assert "without nodeName" in outs[0].stderr
    now = sandbox.now()
    booking(sandbox, 108, "erin", 2, now - timedelta(hours=1), now + timedelta(hours=1))
    allowed = gpu_pod("pinned-ok", "erin").build()
    allowed["spec"]["nodeName"] = "h100-pinned"
    out = sandbox.apply(allowed)
    assert out.returncode == 0, out.stderr
    assert "admitted under reservation res-108" in out.stderr
