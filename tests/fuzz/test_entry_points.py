"""Issue 14 acceptance 4: fuzz everything that comes from outside with Hypothesis.

Entry points: AdmissionReviews (the webhook's whole request path), pods as the
reconciler projects and polices them, push bodies, the reservation app's answers,
nodes, GPUReservation objects, and the environment of both processes. Each target
asserts the documented outcome for bad input — a 400 or a valid review, a typed
refusal (``BadPush``, ``Failure``, ``ValueError``, ``SettingsError``) — and never a
crash, a 5xx or a hang (every example runs under the suite's timeout).

``FUZZ_EXAMPLES`` sets the examples per target: small in ``make test``, large in
``make fuzz`` (eight targets × 13,000 = 104,000 inputs). A failure Hypothesis finds is
kept as an ``@example`` on its target (a regression case), besides Hypothesis' own
example database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from datetime import timedelta
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reconciler.backstop.rules import Scope, findings, message
from reconciler.base import settings as reconciler_settings
from reconciler.base.pods import project_pod
from reconciler.mirror import push
from shared import model, vocab
from shared.appclient import AppClient, Failure, Fetched
from shared.appclient.backoff import PageRetryPolicy
from shared.clock import utc
from shared.policy.inventory import NodeFacts, project_node_facts
from shared.policy.matching import MatchRules
from shared.settings import SettingsError
from tests.policy.builders import reservation
from tests.webhook.helpers import review, wired
from tests.webhook.test_app import JSON, POD, assert_valid
from webhook import settings as webhook_settings

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
#: The suite's per-test timeout, scaled to the examples (a hang still fails).
pytestmark = pytest.mark.timeout(max(60, EXAMPLES // 10))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NOW = utc(2026, 1, 5, 10)
TEXT = st.text(max_size=12)

# --- AdmissionReviews -----------------------------------------------------------------

OPERATION = st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "", "create"]) | JSON
USER = st.sampled_from(["alice", "system:serviceaccount:gpu-reservation:reconciler", ""]) | JSON
REQUEST_CHANGES = st.fixed_dictionaries(
    {},
    optional={
        "uid": TEXT | JSON,
        "operation": OPERATION,
        "dryRun": st.booleans() | JSON,
        "userInfo": st.fixed_dictionaries({"username": USER}) | JSON,
        "namespace": st.sampled_from(["alice", "bob", ""]) | JSON,
        "oldObject": POD | JSON,
        "kind": JSON,
    },
)


@FUZZ
@given(pod=POD | JSON, changes=REQUEST_CHANGES, top=st.dictionaries(TEXT, JSON, max_size=2))
@example(pod={}, changes={"uid": ""}, top={})
@example(pod=None, changes={"operation": []}, top={})  # found: an unhashable operation was a 500
def test_any_admission_review_gets_a_400_or_a_valid_answer(
    pod: Any, changes: dict[str, Any], top: dict[str, Any]
) -> None:
    async def scenario() -> None:
        admission, _ = await wired(reservation(1, gpus=2), gate_name="g/y")
        doc = review(pod if isinstance(pod, dict) else None)
        doc["request"].update(changes)
        doc.update({k: v for k, v in top.items() if k not in ("apiVersion", "kind")})
        status, answer = await admission.review(json.dumps(doc).encode())
        assert status in (200, 400), answer
        create = doc["request"].get("operation") == "CREATE"
        if status == 200 and isinstance(pod, dict) and "oldObject" not in changes and create:
            assert_valid(answer, pod)

    asyncio.run(scenario())


@FUZZ
@given(body=st.binary(max_size=256))
def test_any_bytes_as_an_admission_review(body: bytes) -> None:
    async def scenario() -> None:
        admission, _ = await wired(reservation(1))
        status, _answer = await admission.review(body)
        assert status in (200, 400)

    asyncio.run(scenario())


# --- pods and nodes, as the reconciler projects and polices them -----------------------

OWNERS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "kind": st.sampled_from(["DaemonSet", "ReplicaSet"]) | JSON,
            "controller": st.booleans() | JSON,
        },
    )
    | JSON,
    max_size=2,
)
REFERENCE = st.sampled_from(["res-1", "res-2", "res-x", "", "res-99999999999999999999"]) | TEXT
POLICED_POD = st.tuples(
    POD,
    st.fixed_dictionaries(
        {},
        optional={
            "uid": st.sampled_from(["u1", "u2", ""]) | JSON,
            "creationTimestamp": st.sampled_from(
                ["2026-01-05T09:00:00Z", "2026-01-05T09:00:00", "yesterday", ""]
            )
            | JSON,
            "ownerReferences": OWNERS | JSON,
            "deletionTimestamp": st.none() | TEXT,
            "resourceVersion": st.sampled_from(["7", "12", "²", "", "-3"]) | JSON,
        },
    ),
    st.dictionaries(
        st.sampled_from([vocab.BOOKING_REFERENCE, vocab.ADMISSION_CLAIM, vocab.ADMITTED_AT]),
        REFERENCE,
        max_size=3,
    ),
)


def _assemble(parts: tuple[dict[str, Any], dict[str, Any], dict[str, str]]) -> dict[str, Any]:
    original, meta, notes = parts
    pod: dict[str, Any] = json.loads(json.dumps(original))
    target = pod.get("metadata")
    if isinstance(target, dict):
        target.update(meta)
        if isinstance(target.get("annotations"), dict):
            target["annotations"].update(notes)
    return pod


@FUZZ
@given(pods=st.lists(POLICED_POD, max_size=4), mirror_current=st.booleans())
@example(  # found: a pod part that is not an object crashed the projection
    pods=[({"metadata": {"namespace": "alice"}, "spec": True}, {}, {})], mirror_current=True
)
@example(
    pods=[({"metadata": {"namespace": "alice"}, "spec": {"schedulingGates": True}}, {}, {})],
    mirror_current=True,
)
def test_the_backstop_over_any_pods_never_raises(
    pods: list[tuple[dict[str, Any], dict[str, Any], dict[str, str]]], mirror_current: bool
) -> None:
    views = [v for v in (project_pod(_assemble(p), MatchRules()) for p in pods) if v is not None]
    res = model.GPUReservation(reservation(1).facts, ())
    reserved = {
        name: NodeFacts(name, ("a100",), 8, None, True, True, False)
        for name in {v.node for v in views if v.node}
    }
    scope = Scope(vocab.PRODUCT_NAME, frozenset({"kube-system"}))
    found = findings(views, {"res-1": res}, scope, NOW, mirror_current=mirror_current)
    for finding in found:
        assert finding.pod.declared
        assert len(message(finding)) <= 1024
    # Every node reserved: pods on one are judged too, never a crash.
    placed = findings(
        views, {"res-1": res}, scope, NOW, mirror_current=mirror_current, nodes=reserved
    )
    for finding in placed:
        assert finding.pod.declared or finding.pod.node in reserved
        assert len(message(finding)) <= 1024


NODE = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "name": TEXT | JSON,
                "labels": st.dictionaries(st.just(vocab.GPU_CLASS_LABEL), TEXT | JSON) | JSON,
                "annotations": st.dictionaries(
                    st.just(vocab.FORCE_NODE_CAPACITY),
                    st.sampled_from(["4", "-1", "x", "", "1e9"]) | JSON,
                )
                | JSON,
            },
        )
        | JSON,
        "spec": st.fixed_dictionaries({}, optional={"unschedulable": JSON}) | JSON,
        "status": st.fixed_dictionaries(
            {},
            optional={
                "allocatable": st.dictionaries(
                    st.just(vocab.GPU_RESOURCE), st.sampled_from(["8", "x", "-2"]) | JSON
                )
                | JSON
            },
        )
        | JSON,
    },
)


@FUZZ
@given(node=NODE)
def test_any_node_projects_or_is_skipped(node: dict[str, Any]) -> None:
    project_node_facts(node)


@FUZZ
@given(obj=st.dictionaries(st.sampled_from(["metadata", "spec", "status"]), JSON | POD))
@example(obj={"metadata": {}, "spec": {"gpuCount": "lots"}})
def test_any_gpureservation_object_reads_or_is_refused(obj: dict[str, Any]) -> None:
    with contextlib.suppress(ValueError):
        model.from_object(obj)


# --- push bodies ------------------------------------------------------------------------

ROW = st.fixed_dictionaries(
    {},
    optional={
        "id": st.integers(-2, 10**20) | JSON,
        "user": st.fixed_dictionaries({}, optional={"username": TEXT}) | JSON,
        "gpu_class": st.fixed_dictionaries({}, optional={"label_value": TEXT}) | JSON,
        "start_utc": st.sampled_from(["2026-01-05T09:00:00Z", "2026-01-05T09:00:00", "x"]),
        "end_utc": st.sampled_from(["2026-01-05T12:00:00Z", "soon"]),
        "gpu_count": st.integers(-1, 9) | JSON,
        "status": st.sampled_from(["active", "cancelled", "gone"]) | JSON,
        "kind": st.sampled_from(["booking", "on_demand", "mystery"]) | JSON,
    },
)


@FUZZ
@given(
    body=st.one_of(
        st.binary(max_size=128),
        st.builds(lambda rows: json.dumps({"reservations": rows}).encode(), st.lists(ROW)),
        st.builds(lambda doc: json.dumps(doc).encode(), JSON),
    )
)
@example(body=b'{"reservations": [{"id": 1}]}')
def test_any_push_body_is_entries_or_bad_push(body: bytes) -> None:
    with contextlib.suppress(push.BadPush):
        push.parse_body(body)


# --- the reservation app's answers -------------------------------------------------------

ANSWER = st.tuples(
    st.sampled_from([200, 200, 200, 204, 301, 400, 401, 404, 409, 422, 429, 500, 503]),
    st.one_of(
        st.binary(max_size=64),
        st.builds(lambda doc: json.dumps(doc).encode(), JSON),
        st.builds(lambda rows: json.dumps(rows).encode(), st.lists(ROW, max_size=3)),
        st.builds(lambda rows: json.dumps({"items": rows}).encode(), st.lists(ROW, max_size=3)),
    ),
    st.dictionaries(st.sampled_from(["Retry-After", "Content-Type"]), TEXT, max_size=2),
)


@FUZZ
@given(answer=ANSWER)
def test_any_app_answer_is_data_or_a_failure(answer: tuple[int, bytes, dict[str, str]]) -> None:
    status, body, headers = answer
    safe = {k: v for k, v in headers.items() if v.isascii() and v.isprintable()}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers=safe)

    async def scenario() -> None:
        client = AppClient(
            "http://app",
            "gpures_fuzz",
            transport=httpx.MockTransport(handler),
            page_retry=PageRetryPolicy(pauses=()),
        )
        async with client:
            day = NOW.date()
            for got in (
                await client.list_reservations(day, day + timedelta(days=1)),
                await client.list_gpu_classes(),
            ):
                assert isinstance(got, Fetched | Failure)

    asyncio.run(scenario())


# --- the environment ----------------------------------------------------------------------

VARIABLES = [
    "RESERVATION_API_URL",
    "RESERVATION_API_KEY",
    "RESERVATION_FETCH_INTERVAL",
    "LEDGER_CLAIM_TTL_SECONDS",
    "LEADER_ELECTION_LEASE_SECONDS",
    "LEADER_ELECTION_RENEW_SECONDS",
    "LEADER_ELECTION_ENABLED",
    "UNADMITTED_EXEMPT_NAMESPACES",
    "EVENT_DISPLAY_TIMEZONE",
    "TZ",
    "LOG_LEVEL",
    "CLOCK_EPOCH",
    "POD_NAMESPACE",
    "TLS_CERT_FILE",
    "TLS_KEY_FILE",
    "WEBHOOK_PORT",
    "WEBHOOK_LEDGER_DEADLINE_MS",
    "RESERVATION_TOLERATION_POLICY",
    "GPU_RESOURCE_WEIGHTS",
    "GPU_RESOURCE_PREFIXES",
    "REQUIRED_GROUP_LABEL",
    "NOSHOW_TIMEOUT_MINUTES",
]
VALUE = st.sampled_from(["", "0", "-1", "1e400", "nan", "yes", "Europe/Berlin", "America"]) | TEXT


@FUZZ
@given(env=st.dictionaries(st.sampled_from(VARIABLES), VALUE, max_size=8))
@example(env={"EVENT_DISPLAY_TIMEZONE": "America"})
def test_any_environment_loads_or_is_refused_in_one_message(env: dict[str, str]) -> None:
    for load in (reconciler_settings.load, webhook_settings.load):
        refusal = ""
        try:
            load(env)
        except SettingsError as exc:
            refusal = str(exc)
            assert refusal, "a refusal names the problem"


def test_the_budget() -> None:
    """Eight targets share ``FUZZ_EXAMPLES`` each; ``make fuzz`` sets 13,000."""
    assert EXAMPLES >= 1
