"""The imperative shell around ``decide``: parse, snapshot, decide, claim, answer.

One ``Admission.review`` call per AdmissionReview. Two error channels (CONVENTIONS 6):
a body that is not an AdmissionReview is HTTP 400; anything that goes wrong inside is
answered *fail-open* — allowed, not admitted, keeping the removal of forged state when
it was computed — counted by reason and logged with the request uid. Exception text
never reaches a response.

Admission order (DESIGN §3.2): decide → claim the budget (``webhook.claims``) →
only then stamp the pod (``decide.admit``). A refused claim (someone took the budget
first) re-decides with that reservation counted as full, so the pod tries the next
open booking or is queued with the "full" warning.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from shared import model, vocab
from shared.clock import Clock
from shared.errors import KubeError
from shared.ledger import Ask, ClaimResult, LedgerGateway
from shared.logs import log, log_fields
from shared.policy.matching import annotations_of
from shared.resources import GPU_RESERVATIONS
from webhook import wording
from webhook.cache import ReservationCache
from webhook.claims.engine import ClaimEngine
from webhook.decide import (
    Context,
    Outcome,
    Pin,
    Verdict,
    admit,
    decide_create,
    decide_update,
    pinned_denial,
)
from webhook.metrics import Metrics
from webhook.nodes import NodeCache
from webhook.patch import diff
from webhook.review import AdmissionRequest, Malformed, answer, parse
from webhook.settings import PolicySettings

_log = logging.getLogger(__name__)
#: Claim refusals after which the pod is queued instead (each tries the next booking).
MAX_CLAIM_ROUNDS = 4
#: The canonical line, one per request (flushed in batches: ``shared.logs``).
ADMISSION_LINE = "webhook.admission"
_FINAL = frozenset({Outcome.ALREADY_ADMITTED, Outcome.DENIED, Outcome.PASS})
#: The answers a pod pinned to a reserved node may get (any other becomes a denial).
_HOLDS_PIN = frozenset({Outcome.ADMITTED, Outcome.ALREADY_ADMITTED, Outcome.DENIED})


class Admission:
    """Answers AdmissionReviews for pods."""

    def __init__(
        self,
        policy: PolicySettings,
        cache: ReservationCache,
        gateway: LedgerGateway,
        clock: Clock,
        metrics: Metrics,
        *,
        ledger_deadline_s: float = 2.0,
        zone: ZoneInfo | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        nodes: NodeCache | None = None,
    ) -> None:
        self.policy = policy
        self.cache = cache
        #: Reserved nodes (None: no pod is ever taken as pinned to one).
        self.nodes = nodes
        self.gateway = gateway
        self.clock = clock
        self.metrics = metrics
        self.ledger_deadline_s = ledger_deadline_s
        self.zone = zone
        self.monotonic = monotonic
        self._answered: dict[str, Any] = {}  # outcome -> its requests_total child
        self.engine = ClaimEngine(gateway, cache, policy.namespace, metrics, monotonic=monotonic)

    async def review(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON document) for one request body."""
        started = self.monotonic()
        try:
            request = parse(body)
        except Malformed as exc:
            self.refused(exc.reason, len(body), str(exc))
            return 400, {"error": str(exc)}
        verdict, doc = await self._answer(request, started + self.ledger_deadline_s)
        elapsed = self.monotonic() - started
        self._count(verdict.outcome.value)
        self.metrics.latency.observe(elapsed)
        self._log_line(request, verdict, elapsed)
        return 200, doc

    def refused(self, reason: str, size: int, error: str) -> None:
        """A request to /mutate not read as a review (answered 400): logged with its
        reason and size, counted (``reviews_refused_total{reason}``; and as a
        ``malformed`` request). ``failurePolicy: Ignore`` lets its pod through; the
        reconciler's backstop covers it."""
        self.metrics.requests.labels("malformed").inc()
        self.metrics.reviews_refused.labels(reason).inc()
        log(_log, logging.WARNING, "review.refused", reason=reason, size=size, error=error)

    def _count(self, outcome: str) -> None:
        """``requests_total{outcome}`` + 1, the labelled child looked up once."""
        child = self._answered.get(outcome)
        if child is None:
            child = self._answered[outcome] = self.metrics.requests.labels(outcome)
        child.inc()

    async def _answer(
        self, request: AdmissionRequest, deadline: float
    ) -> tuple[Verdict, dict[str, Any]]:
        try:
            verdict = await self._decide(request, deadline)
            return verdict, self._document(request, verdict)
        except Exception:
            log(_log, logging.ERROR, "webhook.internal_error", uid=request.uid, exc_info=True)
            self.metrics.fail_open.labels("internal_error").inc()
            text = wording.not_admitted("internal error")
            return Verdict(outcome=Outcome.FAIL_OPEN), answer(request.uid, warnings=[text])

    def _document(self, request: AdmissionRequest, verdict: Verdict) -> dict[str, Any]:
        if verdict.outcome is Outcome.DENIED:
            return answer(
                request.uid, allowed=False, message=verdict.message, warnings=verdict.warnings
            )
        patch = diff(request.obj or {}, verdict.edited) if verdict.edited is not None else []
        return answer(request.uid, patch=patch, warnings=verdict.warnings)

    def _log_line(self, request: AdmissionRequest, verdict: Verdict, elapsed: float) -> None:
        """The canonical line: its fields built once, in one dict, absent ones left out
        (``log_fields``: no copy, no source-line lookup)."""
        if not _log.isEnabledFor(logging.INFO):
            return
        fields: dict[str, Any] = {
            "uid": request.uid,
            "operation": request.operation,
            "namespace": request.namespace,
        }
        pod = request.name or _generate_name(request.obj)
        if pod is not None:
            fields["pod"] = pod
        fields["outcome"] = verdict.outcome.value
        if verdict.reservation is not None:
            fields["reservation"] = verdict.reservation
        if request.dry_run:
            fields["dry_run"] = True
        fields["duration_ms"] = round(elapsed * 1000, 2)
        log_fields(_log, logging.INFO, ADMISSION_LINE, fields)

    # --- deciding ---------------------------------------------------------------------

    def _context(
        self,
        now: datetime,
        exclude: frozenset[str] = frozenset(),
        *,
        dry_run: bool = False,
        pinned: Pin | None = None,
    ) -> Context:
        return Context(
            policy=self.policy,
            now=now,
            zone=self.zone,
            exclude=exclude,
            dry_run=dry_run,
            pinned=pinned,
        )

    async def _decide(self, request: AdmissionRequest, deadline: float) -> Verdict:
        pod, old = request.obj, request.old
        if not request.is_pod or pod is None:
            return Verdict(outcome=Outcome.PASS)
        now = self.clock.now()
        if request.operation == "UPDATE" and old is not None:
            return decide_update(pod, old, request.username, self._context(now))
        if request.operation != "CREATE":
            return Verdict(outcome=Outcome.PASS)
        return await self._create(request, pod, now, deadline)

    async def _create(
        self, request: AdmissionRequest, pod: dict[str, Any], now: datetime, deadline: float
    ) -> Verdict:
        pin = self.nodes.pin(pod) if self.nodes is not None else None
        verdict = await self._create_as_pinned(request, pod, now, deadline, pin)
        if pin is None or verdict.outcome in _HOLDS_PIN:
            return verdict
        return pinned_denial(pin, verdict.notes)  # queued, not matched, failed open…

    async def _create_as_pinned(
        self,
        request: AdmissionRequest,
        pod: dict[str, Any],
        now: datetime,
        deadline: float,
        pin: Pin | None,
    ) -> Verdict:
        ns, dry_run = request.namespace, request.dry_run
        await self._catch_up(pod, deadline)
        ctx = self._context(now, dry_run=dry_run, pinned=pin)
        verdict = decide_create(pod, ns, self.cache.of_owner(ns), ctx)
        if verdict.outcome in _FINAL:
            return verdict
        if not self.cache.synced:
            blind = decide_create(pod, ns, [], ctx)
            return self._fail_open(request, blind, "cache_not_synced", "reservations not loaded")
        tried: set[str] = set()
        for _ in range(MAX_CLAIM_ROUNDS):
            if verdict.outcome is not Outcome.ADMIT:
                return verdict
            verdict = await self._claim(request, verdict, ctx, deadline, tried)
            if verdict.outcome is Outcome.ADMIT:
                retry = self._context(now, frozenset(tried), dry_run=dry_run, pinned=pin)
                verdict = decide_create(pod, ns, self.cache.of_owner(ns), retry)
        return verdict

    async def _claim(
        self,
        request: AdmissionRequest,
        verdict: Verdict,
        ctx: Context,
        deadline: float,
        tried: set[str],
    ) -> Verdict:
        """Claim the candidates in order for the request's pod; ADMIT back means "every
        one refused". ``ctx`` is the request's first context (no reservation excluded):
        the stamps read only its policy, instant, zone and dry-run flag."""
        pod = request.obj or {}
        ask = Ask(verdict.gpus, _name_of(pod), ctx.now)
        for cand in verdict.candidates:
            name = cand.reservation.name
            result = await self._claim_one(request.dry_run, name, ask, deadline)
            if result.admitted and result.claim:
                edited = verdict.edited if verdict.edited is not None else pod
                stamped, text = admit(edited, cand, result.claim, ctx)
                warnings = (*verdict.notes, text)
                return Verdict(
                    outcome=Outcome.ADMITTED,
                    edited=stamped,
                    warnings=warnings,
                    reservation=cand.reservation.name,
                )
            if result.reason in ("deadline", "error"):
                return self._fail_open(request, verdict, f"ledger_{result.reason}", "ledger busy")
            tried.add(cand.reservation.name)
            self.metrics.ledger_retries.inc()
        return verdict

    async def _claim_one(self, dry_run: bool, name: str, ask: Ask, deadline: float) -> ClaimResult:
        """A dry run decides alone; a real claim joins this replica's claim engine."""
        if dry_run:
            return await self.engine.dry_run(name, ask, deadline)
        return await self.engine.claim(name, ask, deadline)

    def _fail_open(
        self, request: AdmissionRequest, verdict: Verdict, reason: str, why: str
    ) -> Verdict:
        self.metrics.fail_open.labels(reason).inc()
        log(_log, logging.WARNING, "webhook.fail_open", uid=request.uid, reason=reason)
        warnings = (*verdict.notes, wording.not_admitted(why))
        return Verdict(outcome=Outcome.FAIL_OPEN, edited=verdict.edited, warnings=warnings)

    async def _catch_up(self, pod: dict[str, Any], deadline: float) -> None:
        """Re-read the reservation a pod references when the cache lacks its claim.

        Such a pod may be our own first-round admission (reinvocation, possibly on
        another replica) whose hold the watch has not delivered yet.
        """
        notes = annotations_of(pod)
        ref, claim = notes.get(vocab.BOOKING_REFERENCE), notes.get(vocab.ADMISSION_CLAIM)
        if not ref or not claim or model.parse_reference(ref) is None:
            return
        entry = self.cache.entry(ref)
        key = model.claim_key(claim)
        if entry is not None and any(h.claim == key for h in entry.reservation.holds):
            return
        timeout = max(deadline - self.monotonic(), 0.001)
        call = self.gateway.get(GPU_RESERVATIONS, ref, self.policy.namespace)
        try:
            async with asyncio.timeout(timeout):  # not wait_for: it can swallow a cancel
                found = await call
        except (KubeError, TimeoutError):
            return
        self.cache.upsert(found)


def _generate_name(pod: dict[str, Any] | None) -> Any:
    """The pod's ``generateName`` (for the log line), if it has metadata."""
    meta = (pod or {}).get("metadata")
    return meta.get("generateName") if isinstance(meta, dict) else None


def _name_of(pod: dict[str, Any]) -> str | None:
    """The pod's name (None for a ``generateName`` create)."""
    name = (pod.get("metadata") or {}).get("name")
    return name if isinstance(name, str) and name else None
