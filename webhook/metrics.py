"""The webhook's Prometheus metrics, in one registry, prefix ``gpu_reservation_webhook_``.

Labels are bounded: ``outcome`` is a ``decide.Outcome`` value (or ``malformed``),
``reason`` one of the fail-open reasons below.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

PREFIX = "gpu_reservation_webhook"
#: Why an answer failed open (the pod allowed, not admitted).
FAIL_OPEN_REASONS = ("cache_not_synced", "ledger_deadline", "ledger_error", "internal_error")
#: Why a review was not read (answered 400): ``webhook.review``'s reasons and
#: ``webhook.app``'s ``too_large``.
REFUSED_REASONS = ("too_large", "not_json", "too_deep", "not_a_review")
_GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    """One set of metrics on its own registry (so tests can build many apps)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            f"{PREFIX}_requests",
            "AdmissionReview requests answered, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            f"{PREFIX}_request_duration_seconds",
            "Time to answer one AdmissionReview.",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.ledger_conflicts = Counter(
            f"{PREFIX}_ledger_conflicts",
            "HTTP 409s met while claiming a reservation's budget.",
            registry=self.registry,
        )
        self.claim_groups = Histogram(
            f"{PREFIX}_claim_group_size",
            "Claims decided together by one group commit (one status write when any fits).",
            buckets=_GROUP_BUCKETS,
            registry=self.registry,
        )
        self.reviews_refused = Counter(
            f"{PREFIX}_reviews_refused",
            "Requests to /mutate not read as an AdmissionReview (answered 400), by reason.",
            ["reason"],
            registry=self.registry,
        )
        for reason in REFUSED_REASONS:
            self.reviews_refused.labels(reason)
        self.ledger_retries = Counter(
            f"{PREFIX}_ledger_retries",
            "Claims retried on another open reservation after a refusal.",
            registry=self.registry,
        )
        self.fail_open = Counter(
            f"{PREFIX}_fail_open",
            "Pods allowed without admission because of a failure, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.cache_age = Gauge(
            f"{PREFIX}_cache_age_seconds",
            "Seconds since the GPUReservation cache last heard from the API server.",
            registry=self.registry,
        )

    def grouped(self, size: int) -> None:
        """A claim write carried ``size`` claims (``webhook.claims.ClaimMetrics``)."""
        self.claim_groups.observe(size)

    def conflicts(self, count: int) -> None:
        """A claim write lost ``count`` races on its way (once per write, not per
        caller). None lost (nearly every write): nothing to add, no lock taken."""
        if count:
            self.ledger_conflicts.inc(count)

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
