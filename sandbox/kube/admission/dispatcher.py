"""The MutatingAdmissionWebhook plugin: calls matching webhooks and applies their patches.

Order and reinvocation follow kubernetes/apiserver
``pkg/admission/plugin/webhook/mutating/dispatcher.go`` and ``reinvocationcontext.go``:
webhooks are called serially (configurations by name, webhooks in list order). When a
call changes the object, every ``IfNeeded`` webhook called before it becomes due for
reinvocation; when any call changed the object, one more round runs in which only the
due webhooks are called again (new uid, selectors and conditions re-checked). There is
never a third round. In-tree plugins are the server's business: this plugin runs the
second round itself, right after the first. kube-apiserver checks every webhook's
rules, selectors and conditions in the second round before asking whether it is due,
so a condition failing there fails the request under ``Fail``; under ``Ignore`` nothing
of a webhook that is not due can show, and its conditions are not evaluated (CEL is
the emulator's dearest step).

Each webhook is called through the client of its client configuration
(``transport.WebhookTransport``); re-reading the configurations closes the clients no
webhook uses any more, and ``aclose`` (the server's stop) closes them all.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from sandbox.kube.admission import cel
from sandbox.kube.admission.config import IF_NEEDED, Webhook, webhooks_in_order
from sandbox.kube.admission.endpoints import EndpointResolver
from sandbox.kube.admission.hook import AdmissionAttributes, AdmissionResult
from sandbox.kube.admission.matching import (
    ADMISSION_GROUP,
    any_rule_matches,
    exempt,
    namespace_selector_matches,
    object_selector_matches,
)
from sandbox.kube.admission.patching import apply_patch
from sandbox.kube.admission.review import InvalidResponse, build_review, request_fields, verify
from sandbox.kube.admission.selectors import SelectorError
from sandbox.kube.admission.source import ObjectSource
from sandbox.kube.admission.status import bad_request, denied, forbidden, internal_error
from sandbox.kube.admission.transport import CallError, WebhookTransport
from shared import vocab

log = logging.getLogger(__name__)

CONFIGURATIONS = "mutatingwebhookconfigurations"
_OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
_DRY_RUN_SAFE = frozenset({"None", "NoneOnDryRun"})


@dataclass
class DispatchTimes:
    """Seconds spent, summed over every request that reached the webhooks: deciding
    whether to call each webhook (rules, selectors, matchConditions — the CEL
    interpreter is most of it) and in webhook calls (review out, answer back)."""

    requests: int = 0
    matching_s: float = 0.0
    calls: int = 0
    calls_s: float = 0.0


@dataclass
class Reinvocation:
    """Bookkeeping of which ``IfNeeded`` webhooks must run again (by webhook key)."""

    previously_called: set[str] = field(default_factory=set)
    due: set[str] = field(default_factory=set)
    second_round: bool = False

    def object_changed(self) -> None:
        """Everything called so far saw an object that is now stale."""
        self.due |= self.previously_called
        self.previously_called = set()
        self.second_round = True

    def called(self, webhook: Webhook) -> None:
        """Remember a call of an ``IfNeeded`` webhook."""
        if webhook.reinvocation_policy == IF_NEEDED:
            self.previously_called.add(webhook.key)


@dataclass
class _Request:
    """One admission request in flight: the current object and what was collected."""

    attrs: AdmissionAttributes
    namespace_labels: dict[str, str]
    reinvocation: Reinvocation = field(default_factory=Reinvocation)
    warnings: list[str] = field(default_factory=list)

    def with_object(self, obj: dict[str, Any] | None) -> None:
        self.attrs = dataclasses.replace(self.attrs, object=obj)


class WebhookDispatcher:
    """``MutatingAdmission`` calling the webhooks of stored MutatingWebhookConfigurations."""

    def __init__(
        self,
        source: ObjectSource,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._source = source
        #: The webhook clients, one per client configuration (``transport`` module).
        self.http = WebhookTransport(EndpointResolver(source, rng), transport)
        #: Where the dispatch's time goes (benchmarks read it; never reset).
        self.times = DispatchTimes()
        #: The webhooks last parsed, with the configurations' stamp they were parsed from.
        self._parsed: tuple[object, list[Webhook]] | None = None

    async def _webhooks(self) -> list[Webhook]:
        """Every configuration's webhooks in calling order. Parsing (CEL conditions
        compiled) is redone only when the source's ``stamp`` of the configurations —
        which any write, deletion or re-creation of one changes — changed; a source
        without one is read and parsed every time."""
        stamp_of = getattr(self._source, "stamp", None)
        stamp = await stamp_of(ADMISSION_GROUP, CONFIGURATIONS) if stamp_of is not None else None
        if stamp is not None and self._parsed is not None and self._parsed[0] == stamp:
            return self._parsed[1]
        webhooks = webhooks_in_order(await self._source.list(ADMISSION_GROUP, CONFIGURATIONS))
        if stamp is not None:
            self._parsed = (stamp, webhooks)
        await self.http.retain(webhooks)
        return webhooks

    async def aclose(self) -> None:
        """Close every webhook client and its kept-alive connections (server stop)."""
        await self.http.aclose()

    async def __aenter__(self) -> WebhookDispatcher:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def admit(self, attrs: AdmissionAttributes) -> AdmissionResult:
        """Run up to two rounds of webhooks over the request's object."""
        if exempt(attrs) or attrs.operation not in _OPERATIONS:
            return AdmissionResult(attrs.object)
        webhooks = await self._webhooks()
        if not webhooks:
            return AdmissionResult(attrs.object)
        request = _Request(attrs, await self._namespace_labels(attrs))
        self.times.requests += 1
        await self._round(webhooks, request, reinvoking=False)
        if request.reinvocation.second_round:
            await self._round(webhooks, request, reinvoking=True)
        return AdmissionResult(request.attrs.object, request.warnings)

    async def passes_over(self, attrs: AdmissionAttributes) -> bool:
        """True when no webhook's rules cover the request: ``admit`` would call none
        (rules are checked first, before selectors and conditions), so the server may
        skip it. Reads only the request's operation, resource and namespace."""
        if exempt(attrs) or attrs.operation not in _OPERATIONS:
            return True
        webhooks = await self._webhooks()
        return not any(any_rule_matches(w.rules, attrs) for w in webhooks)

    async def _namespace_labels(self, attrs: AdmissionAttributes) -> dict[str, str]:
        if not attrs.namespace:
            return {}
        namespace = await self._source.get("", "namespaces", None, attrs.namespace)
        labels = dict(((namespace or {}).get("metadata") or {}).get("labels") or {})
        labels.setdefault(vocab.NAMESPACE_NAME_LABEL, attrs.namespace)
        return labels

    async def _round(self, webhooks: list[Webhook], request: _Request, reinvoking: bool) -> None:
        for webhook in webhooks:
            due = not reinvoking or webhook.key in request.reinvocation.due
            # A webhook not due is skipped whatever its conditions say; only an error
            # under Fail would show (403), so under Ignore they need no evaluation.
            conditions = due or not webhook.ignores_failures
            started = time.perf_counter()
            calling = should_call(webhook, request.attrs, request.namespace_labels, conditions)
            self.times.matching_s += time.perf_counter() - started
            if not calling or not due:
                continue
            if await self._call(webhook, request):
                request.reinvocation.object_changed()
            request.reinvocation.called(webhook)

    async def _call(self, webhook: Webhook, request: _Request) -> bool:
        """Call one webhook; True when its patch changed the object."""
        attrs = request.attrs
        if attrs.dry_run and webhook.side_effects not in _DRY_RUN_SAFE:
            raise bad_request(f'admission webhook "{webhook.name}" does not support dry run')
        review = build_review(attrs, attrs.object)
        started = time.perf_counter()
        try:
            body = await self.http.post(webhook, review)
            verdict = verify(body, review["request"]["uid"])
        except (CallError, InvalidResponse) as exc:
            return self._failed(webhook, exc)
        finally:
            self.times.calls += 1
            self.times.calls_s += time.perf_counter() - started
        request.warnings.extend(verdict.warnings)
        if not verdict.allowed:
            raise denied(webhook.name, verdict.status)
        if verdict.patch is None:
            return False
        patched = apply_patch(webhook.name, verdict.patch, attrs.object)
        changed = patched != attrs.object
        request.with_object(patched)
        return changed

    def _failed(self, webhook: Webhook, exc: Exception) -> bool:
        reason = str(exc)
        if isinstance(exc, InvalidResponse):
            reason = f"received invalid webhook response: {exc}"
        if webhook.ignores_failures:
            log.warning("failed calling webhook %s, failing open: %s", webhook.name, reason)
            return False
        raise internal_error(f'failed calling webhook "{webhook.name}": {reason}')


def should_call(
    webhook: Webhook,
    attrs: AdmissionAttributes,
    namespace_labels: dict[str, str],
    conditions: bool = True,
) -> bool:
    """Rules, selectors, then matchConditions (unless ``conditions`` is false: the
    caller will not call the webhook either way); a failing condition under ``Fail`` →
    403."""
    if not any_rule_matches(webhook.rules, attrs):
        return False
    try:
        if not namespace_selector_matches(webhook.namespace_selector, attrs, namespace_labels):
            return False
        if not object_selector_matches(webhook.object_selector, attrs):
            return False
    except SelectorError as exc:
        raise internal_error(str(exc)) from exc
    return _conditions_match(webhook, attrs) if conditions else True


def _conditions_match(webhook: Webhook, attrs: AdmissionAttributes) -> bool:
    if webhook.conditions is None:
        outcome = cel.MatchOutcome(False, "a match condition does not compile")
    elif not webhook.conditions:
        return True
    else:
        variables = cel.activation(attrs.object, attrs.old_object, request_fields(attrs))
        outcome = cel.match(webhook.conditions, variables)
    if outcome.error is None:
        return outcome.matches
    if webhook.ignores_failures:
        return False
    raise forbidden(attrs.group, attrs.resource, attrs.name, outcome.error)
