"""The Starlette apps in-process: malformed reviews, random pods, health and metrics."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette

from shared import vocab
from shared.logs import fields_of
from tests.policy.builders import NOW, PodBuilder, gpu_pod, reservation
from tests.webhook.helpers import review, wired
from webhook.app import health_app, json_response, mutate_app
from webhook.patch import apply

pytestmark = pytest.mark.anyio
LIMIT = 64 * 1024


async def post(app: Any, body: bytes) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
        return await client.post("/mutate", content=body)


def with_request(**changes: Any) -> bytes:
    doc = review(gpu_pod(1).build())
    doc["request"].update(changes)
    return json.dumps(dict(doc.items())).encode()


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"not json", id="not JSON"),
        pytest.param(b"[1, 2]", id="a JSON list"),
        pytest.param(json.dumps({**review(None), "kind": "Pod"}).encode(), id="wrong kind"),
        pytest.param(
            json.dumps({**review(None), "apiVersion": "admission.k8s.io/v1beta1"}).encode(),
            id="wrong apiVersion",
        ),
        pytest.param(with_request(uid=""), id="missing uid"),
        pytest.param(with_request(uid=7), id="a numeric uid"),
        pytest.param(with_request(operation="PATCH"), id="an unknown operation"),
        pytest.param(with_request(operation=[]), id="an operation that is a list"),
        pytest.param(with_request(object="pod"), id="object not an object"),
        pytest.param(with_request(object={"metadata": "m"}), id="metadata not an object"),
        pytest.param(
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            id="no request",
        ),
        pytest.param(b"\xff\xfe", id="not UTF-8"),
        pytest.param(b"x" * (LIMIT + 1), id="a huge body"),
    ],
)
async def test_malformed_reviews_get_400(body: bytes) -> None:
    admission, _ = await wired(reservation(1))
    response = await post(mutate_app(admission, LIMIT), body)
    assert response.status_code == 400
    assert "error" in response.json()


@pytest.mark.parametrize(
    ("pod", "keys"),
    [
        pytest.param(PodBuilder().build(), {"uid", "allowed"}, id="a plain pod"),
        pytest.param(
            gpu_pod(1, namespace="nobody").build(), {"uid", "allowed", "warnings"}, id="no booking"
        ),
        pytest.param(
            gpu_pod(1).build(), {"uid", "allowed", "patchType", "patch", "warnings"}, id="admitted"
        ),
    ],
)
async def test_every_answer_is_sent_as_the_json_response_class_renders_it(
    pod: dict[str, Any], keys: set[str]
) -> None:
    """No-change answers take the memoised encoding; the bytes and headers are those of
    ``json_response`` for the same document."""
    admission, _ = await wired(reservation(1, gpus=2))
    response = await post(mutate_app(admission, LIMIT), json.dumps(review(pod)).encode())
    doc = response.json()
    wanted = json_response(doc)
    assert response.status_code == 200
    assert response.content == wanted.body
    assert response.headers["content-type"] == wanted.media_type
    assert response.headers["content-length"] == str(len(wanted.body))
    assert set(doc["response"]) == keys


def scope_of(method: str = "POST", path: str = "/mutate", length: int | None = None) -> Any:
    """An ASGI HTTP scope as uvicorn builds it."""
    headers = [(b"host", b"webhook"), (b"content-type", b"application/json")]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "scheme": "https",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "server": ("127.0.0.1", 8443),
        "client": ("127.0.0.1", 50000),
        "state": {},
    }


async def call(app: Any, scope: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages ``app`` sends for a request whose body arrives as ``messages``."""
    sent: list[dict[str, Any]] = []
    pending = list(messages)

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def test_the_mutate_route_answers_as_the_direct_path_does() -> None:
    """``POST /mutate`` skips Starlette's layers; the same endpoint reached through
    Starlette's own middleware and router (its route for ``/mutate``) sends the very
    same messages."""
    admission, _ = await wired(reservation(1, gpus=2))
    app = mutate_app(admission, LIMIT)
    no_change = (PodBuilder().build(), gpu_pod(1, namespace="x").build())
    for pod in (gpu_pod(1).build(), *no_change):
        body = json.dumps(review(pod, uid="same")).encode()
        request = [{"type": "http.request", "body": body, "more_body": False}]
        direct = await call(app, scope_of(length=len(body)), request)
        routed = await call(
            lambda *a: Starlette.__call__(app, *a), scope_of(length=len(body)), request
        )
        assert [m["type"] for m in direct] == [m["type"] for m in routed]
        assert direct[0]["status"] == routed[0]["status"] == 200
        sent, via_router = direct[1]["body"], routed[1]["body"]
        if pod in no_change:
            assert sent == via_router
            assert direct[0]["headers"] == routed[0]["headers"]
        else:  # each admission claims anew (its own claim id): the same shape
            assert json.loads(sent)["response"].keys() == json.loads(via_router)["response"].keys()
            assert direct[0]["headers"][1:] == routed[0]["headers"][1:]  # all but the length


async def test_other_methods_and_paths_get_starlettes_405_and_404() -> None:
    admission, _ = await wired(reservation(1))
    transport = httpx.ASGITransport(app=mutate_app(admission, LIMIT))
    async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
        get = await client.get("/mutate")
        put = await client.put("/mutate", content=b"{}")
        elsewhere = await client.post("/mutate/x", content=b"{}")
        root = await client.get("/")
    assert (get.status_code, get.headers["allow"]) == (405, "POST")
    assert put.status_code == 405
    assert elsewhere.status_code == 404
    assert root.status_code == 404
    assert admission.metrics.requests.labels("malformed")._value.get() == 0


async def test_an_exception_outside_the_reviews_own_handling_is_a_500_and_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The review answers its own internal errors fail-open; anything that still
    escapes it (or its encoding) is answered 500 without its text, logged with the
    traceback, and the app goes on answering."""
    admission, _ = await wired(reservation(1))
    app = mutate_app(admission, LIMIT)
    body = json.dumps(review(gpu_pod(1).build())).encode()

    async def broken(_: bytes) -> Any:
        raise RuntimeError("secret detail")

    async def unencodable(_: bytes) -> Any:
        return 200, {"response": {"uid": "\ud800"}}  # a lone surrogate, as a request may send

    with caplog.at_level(logging.ERROR):
        for fake in (broken, unencodable):
            with monkeypatch.context() as patched:
                patched.setattr(admission, "review", fake)
                response = await post(app, body)
            assert response.status_code == 500
            assert response.text == "Internal Server Error"
            assert response.headers["content-type"] == "text/plain; charset=utf-8"
    failed = [r for r in caplog.records if r.getMessage() == "webhook.request_failed"]
    assert len(failed) == 2
    assert "secret detail" in str(failed[0].exc_info)
    assert all(r.levelno == logging.ERROR for r in failed)
    assert fields_of(failed[0]) == {}
    assert (await post(app, body)).status_code == 200


async def test_a_client_gone_before_its_body_arrived_is_not_answered() -> None:
    admission, _ = await wired(reservation(1))
    app = mutate_app(admission, LIMIT)
    first = {"type": "http.request", "body": b'{"apiVersion"', "more_body": True}
    assert await call(app, scope_of(), [first, {"type": "http.disconnect"}]) == []
    assert await call(app, scope_of(length=100), [{"type": "http.disconnect"}]) == []
    assert admission.metrics.requests.labels("malformed")._value.get() == 0


def chunks_of(body: bytes, size: int) -> Any:
    """``body`` as a chunked upload (no Content-Length), ``size`` bytes a chunk."""

    async def parts() -> Any:
        for start in range(0, len(body), size):
            yield body[start : start + size]

    return parts()


async def test_a_chunked_body_is_read_whole_and_limited_while_reading() -> None:
    admission, _ = await wired(reservation(1))
    app = mutate_app(admission, LIMIT)
    body = json.dumps(review(gpu_pod(1).build())).encode()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
        fine = await client.post("/mutate", content=chunks_of(body, 100))
        huge = await client.post("/mutate", content=chunks_of(b"x" * (LIMIT + 1), 4096))
        declared = await client.post(
            "/mutate", content=b"{}", headers={"content-length": str(LIMIT + 1)}
        )
    assert "content-length" not in fine.request.headers
    assert fine.status_code == 200
    assert fine.json()["response"]["patchType"] == "JSONPatch"
    assert huge.status_code == 400
    assert huge.json() == {"error": "request body too large"}
    assert declared.status_code == 400


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(
            {"spec": {"containers": [{"resources": {"limits": {vocab.GPU_RESOURCE: "lots"}}}]}},
            id="garbage GPU quantity",
        ),
        pytest.param({"spec": {"containers": "x"}}, id="containers not a list"),
        pytest.param({"metadata": {"annotations": ["x"]}}, id="annotations a list"),
        pytest.param(
            {"metadata": {"labels": {vocab.GPU_CLASS_LABEL: 5}}}, id="a numeric class label"
        ),
        pytest.param({"spec": {"tolerations": "all"}}, id="tolerations a string"),
        pytest.param({}, id="an empty object"),
    ],
)
async def test_garbage_pods_are_answered_safely(garbage: dict[str, Any]) -> None:
    admission, _ = await wired(reservation(1))
    pod = {**gpu_pod(1).build(), **garbage}
    response = await post(mutate_app(admission, LIMIT), json.dumps(review(pod)).encode())
    assert response.status_code == 200
    assert_valid(response.json(), pod)


def assert_valid(doc: dict[str, Any], pod: dict[str, Any]) -> None:
    assert doc["apiVersion"] == "admission.k8s.io/v1"
    assert doc["kind"] == "AdmissionReview"
    answer = doc["response"]
    assert isinstance(answer["uid"], str)
    assert answer["uid"]
    assert ("patch" in answer) == ("patchType" in answer)
    if "patch" in answer:
        assert answer["allowed"] is True
        apply(pod, json.loads(base64.b64decode(answer["patch"])))
    for text in answer.get("warnings", []):
        assert len(text) <= 120


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
QUANTITY = st.sampled_from(["1", "2", 1, "0", "0.5", "x", None, -1, "2000m"]) | JSON
TOLERATION = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from([vocab.RESERVATION_TAINT_KEY, "", "other"]) | JSON,
        "operator": st.sampled_from(["Exists", "Equal", "", "Lt"]),
        "value": st.sampled_from(["h100", "a100", ""]),
        "effect": st.sampled_from([vocab.TAINT_EFFECT_NO_SCHEDULE, "", "NoExecute"]),
    },
)
CONTAINER = st.fixed_dictionaries(
    {"name": st.just("c")},
    optional={
        "resources": st.fixed_dictionaries(
            {},
            optional={
                "limits": st.fixed_dictionaries({vocab.GPU_RESOURCE: QUANTITY}) | JSON,
                "requests": st.dictionaries(st.just(vocab.GPU_RESOURCE), QUANTITY) | JSON,
            },
        )
        | JSON,
        "restartPolicy": st.sampled_from(["Always", "Never"]),
    },
)
POD = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"namespace": st.sampled_from(["alice", "bob"])},
            optional={
                "name": st.sampled_from(["p", "q"]),
                "labels": st.dictionaries(
                    st.sampled_from([vocab.GPU_CLASS_LABEL, "x"]),
                    st.sampled_from(["h100", "a100", ""]) | JSON,
                    max_size=2,
                )
                | JSON,
                "annotations": st.dictionaries(
                    st.sampled_from(
                        [*sorted(vocab.CONTROLLER_OWNED_ANNOTATIONS)[:4], "a/b", "x~y"]
                    ),
                    st.text(max_size=5) | JSON,
                    max_size=3,
                )
                | JSON,
            },
        ),
        "spec": st.fixed_dictionaries(
            {"containers": st.lists(CONTAINER, min_size=1, max_size=2) | JSON},
            optional={
                "initContainers": st.lists(CONTAINER, max_size=2),
                "tolerations": st.lists(TOLERATION, max_size=3) | JSON,
                "schedulingGates": st.lists(
                    st.fixed_dictionaries({"name": st.just("g/x")}), max_size=1
                )
                | JSON,
                "overhead": JSON,
            },
        )
        | JSON,
    }
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pod=POD, operation=st.sampled_from(["CREATE", "CREATE", "UPDATE"]), dry=st.booleans())
def test_every_answer_to_a_random_pod_is_a_valid_review_whose_patch_applies(
    pod: dict[str, Any], operation: str, dry: bool
) -> None:
    async def scenario() -> None:
        admission, _ = await wired(reservation(1, gpus=2), gate_name="g/y")
        old = gpu_pod(1).build() if operation == "UPDATE" else None
        body = json.dumps(review(pod, operation=operation, old=old, dry_run=dry)).encode()
        status, doc = await admission.review(body)
        assert status == 200
        assert_valid(doc, pod)

    asyncio.run(scenario())


async def test_health_readiness_and_metrics() -> None:
    admission, _ = await wired(reservation(1), synced=False)
    loaded = [False]
    app = health_app(admission, lambda: loaded[0])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://h") as client:
        assert (await client.get("/healthz")).status_code == 200
        not_ready = await client.get("/readyz")
        assert not_ready.status_code == 503
        assert "no certificate" in not_ready.text
        loaded[0] = True
        assert (await client.get("/readyz")).status_code == 503
        await admission.cache.relist()
        assert (await client.get("/readyz")).status_code == 200
        metrics = (await client.get("/metrics")).text
    assert "gpu_reservation_webhook_cache_age_seconds" in metrics
    assert "gpu_reservation_webhook_request_duration_seconds_bucket" in metrics


async def test_readiness_waits_for_the_node_cache() -> None:
    from shared.clock import ManualClock
    from webhook.nodes import NodeCache

    admission, store = await wired(reservation(1))
    admission.nodes = NodeCache(store, ManualClock(NOW))  # type: ignore[arg-type]
    app = health_app(admission, lambda: True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://h") as client:
        waiting = await client.get("/readyz")
        assert waiting.status_code == 503
        assert "node cache not synced" in waiting.text
        await admission.nodes.watched.relist()
        assert (await client.get("/readyz")).status_code == 200


# --- reviews the webhook cannot read, and reviews it must read ------------------------


MIB = 1024 * 1024


def refused(admission: Any, reason: str) -> float:
    value = admission.metrics.registry.get_sample_value(
        "gpu_reservation_webhook_reviews_refused_total", {"reason": reason}
    )
    return value or 0.0


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(b"[" * 100_000 + b"]" * 100_000, "too_deep", id="100000-deep"),
        pytest.param(
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":'
            + b"[" * 5000
            + b"]" * 5000
            + b"}",
            "too_deep",
            id="deep-inside-the-review",
        ),
        pytest.param(b"not json", "not_json", id="not-json"),
        pytest.param(b"[1]", "not_a_review", id="not-a-review"),
        pytest.param(b"x" * (MIB + 1), "too_large", id="too-large"),
    ],
)
async def test_a_review_not_read_is_400_logged_and_counted(
    body: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    from shared.logs import fields_of

    admission, _ = await wired(reservation(1))
    with caplog.at_level(logging.WARNING):
        response = await post(mutate_app(admission, MIB), body)
    assert response.status_code == 400
    assert refused(admission, reason) == 1
    lines = [fields_of(r) for r in caplog.records if r.getMessage() == "review.refused"]
    assert lines
    assert lines[-1]["reason"] == reason
    assert lines[-1]["size"] == len(body)


async def test_an_update_review_of_two_large_pods_is_read_under_the_default_limit() -> None:
    """The API server's request limit (3 MiB) and object limit (1.5 MiB): an UPDATE
    review carrying a 3 MiB pod and its 1.5 MiB old self is read and answered."""
    from webhook.settings import MAX_BODY_BYTES

    admission, _ = await wired(reservation(1))
    old = gpu_pod(1).annotate("blob", "x" * (3 * 1024 * 1024 // 2)).build()
    new = gpu_pod(1).annotate("blob", "y" * (3 * 1024 * 1024)).build()
    new["spec"]["tolerations"] = [{"operator": "Exists"}]
    body = json.dumps(review(new, operation="UPDATE", old=old)).encode()
    assert len(body) > 4.5 * 1024 * 1024
    response = await post(mutate_app(admission, MAX_BODY_BYTES), body)
    assert response.status_code == 200
    assert response.json()["response"]["allowed"] is False
