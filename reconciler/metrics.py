"""The reconciler's Prometheus metrics, all prefixed ``gpu_reservation_``.

Each process (and each in-process test instance) owns a registry, so several
reconcilers in one interpreter never clash. Label values are bounded sets.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from shared import vocab

#: ``gpu_reservation``: the prefix every metric name carries.
NAMESPACE = vocab.PRODUCT_NAME.replace("-", "_")


class Metrics:
    """Every metric the reconciler exposes on ``GET /metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.fetches = Counter(
            "reservation_fetches",
            "Full reservation fetches by outcome (ok, failed).",
            ["outcome"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.fetch_failures_in_a_row = Gauge(
            "reservation_fetch_consecutive_failures",
            "Failed fetches since the last good one (0 = the mirror is current).",
            namespace=NAMESPACE,
            registry=r,
        )
        self.last_good_fetch = Gauge(
            "reservation_fetch_last_success_timestamp_seconds",
            "Unix time of the last good fetch.",
            namespace=NAMESPACE,
            registry=r,
        )
        self.mirror_writes = Counter(
            "mirror_writes",
            "GPUReservation writes by the sync and push paths, by action.",
            ["action"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.mirror_errors = Counter(
            "mirror_write_errors",
            "Failed GPUReservation writes, by action.",
            ["action"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.mirrored = Gauge(
            "mirrored_reservations",
            "GPUReservation objects after the last sync.",
            namespace=NAMESPACE,
            registry=r,
        )
        self.pushes = Counter(
            "push_requests",
            "Inbound push requests by answer (200, 401, 422, 503).",
            ["code"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.leader = Gauge(
            "leader",
            "1 while this replica leads, else 0.",
            namespace=NAMESPACE,
            registry=r,
        )
        self.unadmitted = Counter(
            "unadmitted_evictions",
            "Pods evicted by the proof-of-admission backstop (Event UnadmittedToleration), "
            "by breach (no_reference, unknown_reservation, not_owner, shared_claim).",
            ["reason"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.task_failures = Gauge(
            "background_task_failed",
            "1 for a guarded task that crashed or exited.",
            ["task"],
            namespace=NAMESPACE,
            registry=r,
        )

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
