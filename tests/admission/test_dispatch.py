"""The dispatcher over a mocked network: policies, denials, warnings, reinvocation."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from sandbox.kube.admission import MemorySource, WebhookDispatcher
from sandbox.kube.admission import dispatcher as dispatcher_module
from sandbox.kube.admission.config import webhooks_in_order
from sandbox.kube.admission.hook import AdmissionError, AdmissionResult
from sandbox.kube.admission.source import StoreSource
from sandbox.kube.store import Store
from tests.admission.builders import answer, attrs, configuration, pod, webhook

pytestmark = pytest.mark.anyio

Handler = Callable[[dict[str, Any]], dict[str, Any] | httpx.Response]
GROUP = "admissionregistration.k8s.io"
CONFIGS = "mutatingwebhookconfigurations"


class FakeWebhooks:
    """Answers per webhook host; records every review received."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.source = MemorySource()

    def add(self, config: str, raw: dict[str, Any], handler: Handler) -> None:
        existing = self.source.objects.get((GROUP, CONFIGS, "", config))
        hooks = [*(existing or {}).get("webhooks", []), raw]
        self.source.put(GROUP, CONFIGS, configuration(config, *hooks))
        self.handlers[raw["name"]] = handler

    def transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            review = json.loads(request.content)
            self.calls.append((request.url.host, review))
            result = self.handlers[request.url.host](review)
            return (
                result if isinstance(result, httpx.Response) else httpx.Response(200, json=result)
            )

        return httpx.MockTransport(handle)

    async def admit(self, request: Any = None) -> AdmissionResult:
        dispatcher = WebhookDispatcher(self.source, transport=self.transport())
        return await dispatcher.admit(request or attrs(pod("p")))

    def called(self) -> list[str]:
        return [host for host, _ in self.calls]


def add_annotation(key: str) -> Handler:
    """A webhook adding one annotation unless present (idempotent)."""

    def handle(review: dict[str, Any]) -> dict[str, Any]:
        obj = review["request"]["object"]
        annotations = obj["metadata"].get("annotations")
        if annotations is None:
            ops = [{"op": "add", "path": "/metadata/annotations", "value": {key: "1"}}]
        elif key not in annotations:
            ops = [{"op": "add", "path": f"/metadata/annotations/{key}", "value": "1"}]
        else:
            ops = []
        return answer(review, patch=ops)

    return handle


def allow(review: dict[str, Any]) -> dict[str, Any]:
    return answer(review)


@pytest.fixture
def hooks() -> FakeWebhooks:
    return FakeWebhooks()


async def test_patch_and_warnings_are_returned(hooks: FakeWebhooks) -> None:
    """Rule: the webhook's JSON Patch is applied; its warnings are returned (Warning headers)."""

    def handle(review: dict[str, Any]) -> dict[str, Any]:
        ops = [{"op": "add", "path": "/metadata/labels", "value": {"seen": "yes"}}]
        return answer(review, patch=ops, warnings=["hello from the webhook"])

    hooks.add("a", webhook("a.example.com"), handle)
    result = await hooks.admit()
    assert result.object is not None
    assert result.object["metadata"]["labels"] == {"seen": "yes"}
    assert result.warnings == ["hello from the webhook"]


async def test_failure_policy(hooks: FakeWebhooks) -> None:
    """Rule: a failed call is skipped under Ignore and fails the request under Fail with 500
    ``Internal error occurred: failed calling webhook "<name>": ...``."""
    hooks.add("a", webhook("a.example.com", failurePolicy="Ignore"), lambda r: httpx.Response(500))
    assert (await hooks.admit()).object == pod("p")
    hooks.add("b", webhook("b.example.com"), lambda r: {"not": "a review"})
    with pytest.raises(AdmissionError) as info:
        await hooks.admit()
    assert info.value.code == 500
    assert info.value.status["message"].startswith(
        'Internal error occurred: failed calling webhook "b.example.com": '
        "received invalid webhook response"
    )


async def test_an_unappliable_patch_fails_even_under_ignore(hooks: FakeWebhooks) -> None:
    """Rule: a JSON Patch that cannot be applied fails the request with 500 whatever the
    failurePolicy."""
    bad = [{"op": "add", "path": "/metadata/annotations/x", "value": "1"}]
    raw = webhook("a.example.com", failurePolicy="Ignore")
    hooks.add("a", raw, lambda r: answer(r, patch=bad))
    with pytest.raises(AdmissionError) as info:
        await hooks.admit()
    assert info.value.code == 500


async def test_a_denial_carries_the_webhooks_code(hooks: FakeWebhooks) -> None:
    """Rule: allowed:false gives the webhook's status code (raised to at least 400) and ``admission
    webhook "<name>" denied the request: <message>``."""
    status = {"code": 200, "message": "no GPUs for you"}
    hooks.add("a", webhook("a.example.com"), lambda r: answer(r, allowed=False, status=status))
    with pytest.raises(AdmissionError) as info:
        await hooks.admit()
    assert info.value.code == 400
    assert info.value.status["message"] == (
        'admission webhook "a.example.com" denied the request: no GPUs for you'
    )


async def test_dry_run_needs_side_effect_free_webhooks(hooks: FakeWebhooks) -> None:
    """Rule: a dry-run request reaching a webhook with sideEffects Some/Unknown fails with 400
    ``admission webhook "<name>" does not support dry run`` and the webhook is not called."""
    hooks.add("a", webhook("a.example.com", sideEffects="Some"), allow)
    with pytest.raises(AdmissionError) as info:
        await hooks.admit(attrs(pod("p"), dry_run=True))
    assert info.value.code == 400
    assert (
        info.value.status["message"] == 'admission webhook "a.example.com" does not support dry run'
    )
    assert hooks.calls == []


async def test_condition_error_under_fail_is_forbidden(hooks: FakeWebhooks) -> None:
    """Rule: a matchCondition evaluation error rejects the request under Fail (403) and skips the
    webhook under Ignore."""
    conditions = [{"name": "broken", "expression": "object.spec.missing == 1"}]
    hooks.add("a", webhook("a.example.com", matchConditions=conditions), allow)
    with pytest.raises(AdmissionError) as info:
        await hooks.admit()
    assert info.value.code == 403
    assert info.value.status["message"].startswith('pods "p" is forbidden: expression')
    ignored = webhook("a.example.com", matchConditions=conditions, failurePolicy="Ignore")
    hooks.source.put(GROUP, CONFIGS, configuration("a", ignored))
    assert (await hooks.admit()).object == pod("p")
    assert hooks.calls == []


async def test_configurations_run_by_name_then_list_order(hooks: FakeWebhooks) -> None:
    """Rule: configurations are called in order of metadata.name, webhooks inside one in list
    order."""
    hooks.add("b", webhook("b1.example.com"), allow)
    hooks.add("a", webhook("a1.example.com"), allow)
    hooks.add("a", webhook("a2.example.com"), allow)
    await hooks.admit()
    assert hooks.called() == ["a1.example.com", "a2.example.com", "b1.example.com"]


async def test_reinvocation_calls_earlier_if_needed_webhooks_once_more(hooks: FakeWebhooks) -> None:
    """Rule: one extra round at most, only for IfNeeded webhooks already called whose object
    changed after their call, each call with a new uid."""
    hooks.add("a", webhook("first.example.com", reinvocationPolicy="IfNeeded"), add_annotation("a"))
    hooks.add(
        "b", webhook("second.example.com", reinvocationPolicy="IfNeeded"), add_annotation("b")
    )
    hooks.add("c", webhook("never.example.com"), allow)
    result = await hooks.admit()
    # first changed, second changed after it; round 2 calls first (changed after its call)
    # but not second (only its own change followed it) and never the Never webhook.
    assert hooks.called() == [
        "first.example.com",
        "second.example.com",
        "never.example.com",
        "first.example.com",
    ]
    uids = {review["request"]["uid"] for _, review in hooks.calls}
    assert len(uids) == 4
    assert result.object is not None
    assert result.object["metadata"]["annotations"] == {"a": "1", "b": "1"}


async def test_no_reinvocation_without_a_change(hooks: FakeWebhooks) -> None:
    """Rule: no second round when no webhook changed the object."""
    hooks.add("a", webhook("first.example.com", reinvocationPolicy="IfNeeded"), allow)
    await hooks.admit()
    assert hooks.called() == ["first.example.com"]


async def test_a_webhook_skipped_in_round_one_is_not_reinvoked(hooks: FakeWebhooks) -> None:
    """Rule: a webhook skipped in round 1 (selector mismatch) is not called in round 2."""
    selector = {"matchLabels": {"late": "yes"}}
    skipped = webhook("skip.example.com", reinvocationPolicy="IfNeeded", objectSelector=selector)
    hooks.add("a", skipped, allow)

    def label(review: dict[str, Any]) -> dict[str, Any]:
        return answer(
            review, patch=[{"op": "add", "path": "/metadata/labels", "value": {"late": "yes"}}]
        )

    hooks.add("b", webhook("labeller.example.com"), label)
    await hooks.admit()
    assert hooks.called() == ["labeller.example.com"]


async def test_subresources_and_exempt_objects_skip_pod_webhooks(hooks: FakeWebhooks) -> None:
    """Rule: a ``pods`` rule does not match a subresource request (pods/status)."""
    hooks.add("a", webhook("a.example.com"), allow)
    await hooks.admit(attrs(pod("p"), "UPDATE", old=pod("p"), subresource="status"))
    assert hooks.calls == []


async def test_passes_over_exactly_the_requests_no_webhook_is_called_for(
    hooks: FakeWebhooks,
) -> None:
    """The server skips the dispatcher (and its copies of the objects) when ``passes_over``
    says so: that must hold exactly when ``admit`` would call no webhook — judged on the
    rules alone, before selectors and conditions — for every shape of request."""
    hooks.add("a", webhook("a.example.com"), add_annotation("seen"))
    hooks.add(
        "b",
        webhook(
            "b.example.com",
            rules=[
                {
                    "operations": ["UPDATE"],
                    "apiGroups": ["example.com"],
                    "apiVersions": ["*"],
                    "resources": ["tallies/status"],
                }
            ],
        ),
        allow,
    )
    dispatcher = WebhookDispatcher(hooks.source, transport=hooks.transport())
    other: dict[str, Any] = {
        "group": "example.com",
        "version": "v1",
        "kind": "Tally",
        "resource": "tallies",
    }
    requests = [
        attrs(pod("p")),
        attrs(pod("p"), "UPDATE", old=pod("p")),
        attrs(pod("p"), "UPDATE", old=pod("p"), subresource="status"),
        attrs(None, "DELETE", old=pod("p")),
        attrs(pod("p"), "CONNECT"),
        dataclasses.replace(attrs(pod("p"), "UPDATE", old=pod("p")), **other),
        dataclasses.replace(attrs(pod("p"), "UPDATE", old=pod("p"), subresource="status"), **other),
        dataclasses.replace(attrs(pod("p")), group=GROUP, resource=CONFIGS),
    ]
    skipped = []
    for request in requests:
        bare = dataclasses.replace(request, object=None, old_object=None, options=None)
        passes = await dispatcher.passes_over(bare)
        before = len(hooks.calls)
        result = await dispatcher.admit(request)
        called = len(hooks.calls) > before
        assert passes is not called, request
        if passes:
            assert (result.object, result.warnings) == (request.object, [])
        skipped.append(passes)
    assert skipped == [False, False, True, True, True, True, False, True]


async def test_parsed_webhooks_follow_every_change_of_the_stored_configurations(
    hooks: FakeWebhooks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the server's own store the parsed webhooks are reused while the
    configurations are unchanged, and a change, a deletion or a re-creation under the
    same name is seen by the very next request."""
    parsed: list[int] = []

    def counted(configurations: Any) -> Any:
        parsed.append(1)
        return webhooks_in_order(configurations)

    monkeypatch.setattr(dispatcher_module, "webhooks_in_order", counted)
    store = Store()
    dispatcher = WebhookDispatcher(StoreSource(store), transport=hooks.transport())
    hooks.handlers["a.example.com"] = allow
    key = (GROUP, CONFIGS, "", "a")

    def put(rule_resource: str) -> None:
        raw = webhook("a.example.com")
        raw["rules"][0]["resources"] = [rule_resource]
        obj = configuration("a", raw)
        obj["metadata"]["uid"] = str(len(hooks.calls))
        store.put(key, obj)

    put("pods")
    assert not await dispatcher.passes_over(attrs(None))
    await dispatcher.admit(attrs(pod("p")))
    await dispatcher.admit(attrs(pod("p")))
    assert len(hooks.calls) == 2
    assert len(parsed) == 1
    put("services")
    assert await dispatcher.passes_over(attrs(None))
    await dispatcher.admit(attrs(pod("p")))
    assert len(hooks.calls) == 2
    store.remove(key)
    assert await dispatcher.passes_over(attrs(None))
    put("pods")
    await dispatcher.admit(attrs(pod("p")))
    assert len(hooks.calls) == 3
    assert len(parsed) == 4


async def test_the_dispatch_counts_requests_and_calls_for_benchmarks(hooks: FakeWebhooks) -> None:
    """``times`` counts the requests that reached the webhooks and the calls made (a
    changing patch makes the IfNeeded webhook before it run twice)."""
    hooks.add("a", webhook("a.example.com", reinvocationPolicy="IfNeeded"), allow)
    hooks.add("b", webhook("b.example.com"), add_annotation("b"))
    dispatcher = WebhookDispatcher(hooks.source, transport=hooks.transport())
    await dispatcher.admit(attrs(pod("p")))
    assert (dispatcher.times.requests, dispatcher.times.calls) == (1, 3)
    await dispatcher.admit(attrs(pod("p"), operation="CONNECT"))  # matched, no call
    assert (dispatcher.times.requests, dispatcher.times.calls) == (2, 3)
    assert dispatcher.times.matching_s >= 0.0
    assert dispatcher.times.calls_s >= 0.0


@pytest.mark.parametrize(("policy", "evaluations"), [("Ignore", 1), ("Fail", 2)])
async def test_conditions_of_a_webhook_not_due_are_evaluated_only_where_they_could_fail(
    hooks: FakeWebhooks, monkeypatch: pytest.MonkeyPatch, policy: str, evaluations: int
) -> None:
    """Round 2 re-checks every webhook before asking whether it is due (as the
    apiserver does): a condition error would fail the request under Fail. Under Ignore
    a webhook that is not due is skipped whatever its conditions say, so they are not
    evaluated again."""
    from sandbox.kube.admission import cel

    calls: list[int] = []
    real = cel.match

    def counted(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(cel, "match", counted)
    conditions = [{"name": "always", "expression": "object.kind == 'Pod'"}]
    raw = webhook("a.example.com", failurePolicy=policy, matchConditions=conditions)
    hooks.add("a", raw, add_annotation("a"))  # its own change starts round 2; not due
    result = await hooks.admit()
    assert result.object is not None
    assert result.object["metadata"]["annotations"] == {"a": "1"}
    assert hooks.called() == ["a.example.com"]
    assert len(calls) == evaluations
