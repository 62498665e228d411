"""The reconciler's Prometheus metrics, all prefixed ``gpu_reservation_``.

Each process (and each in-process test instance) owns a registry, so several
reconcilers in one interpreter never clash. Label values are bounded sets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from shared import vocab
from shared.model import GPUReservation, State
from shared.policy.inventory import Inventory

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
            "by breach (reconciler.backstop.rules.Breach: no_admission, no_reference, "
            "unknown_reservation, not_owner, wrong_class, no_gpus, shared_claim, not_open, "
            "over_budget).",
            ["reason"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.grace_shortened = Counter(
            "termination_grace_shortened",
            "Pods terminating on a reserved node with more than EVICTION_GRACE_SECONDS left "
            "to run, deleted again with that grace (Event TerminationGraceShortened).",
            namespace=NAMESPACE,
            registry=r,
        )
        self.unseen_released = Counter(
            "ledger_unseen_holds_released",
            "Unbound ledger holds released because no pod carrying their claim appeared "
            "within LEDGER_UNSEEN_HOLD_SECONDS (an admission whose pod was never created).",
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

        self.capacity_physical = Gauge(
            "capacity_physical_gpus",
            "GPUs of schedulable, Ready reserved nodes per class at the last capacity audit.",
            ["gpu_class"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.capacity_app = Gauge(
            "capacity_app_gpus",
            "The reservation app's effective_gpus_today per class at the last audit.",
            ["gpu_class"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.capacity_deficit = Gauge(
            "capacity_deficit_gpus",
            "GPUs the app counts beyond the physical ones (0 = not overcommitted).",
            ["gpu_class"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.capacity_audits = Counter(
            "capacity_audits",
            "Capacity audits run, by outcome (ok, mismatch, unknown).",
            ["outcome"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.noshow_declared = Counter(
            "noshow_declared",
            "Bookings declared no-shows (recorded in their GPUReservation status).",
            namespace=NAMESPACE,
            registry=r,
        )
        self.noshow_outcomes = Counter(
            "noshow_cancels",
            "No-show cancel attempts by outcome (cancelled, failed, cleared: a pod "
            "raced in, already_cancelled: the app had it cancelled).",
            ["outcome"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.noshow_pending = Gauge(
            "noshow_pending",
            "Declared no-shows whose cancel has not landed yet.",
            namespace=NAMESPACE,
            registry=r,
        )
        #: Booked versus used (the usage keeper's).
        self.usage = UsageMetrics(r)

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)

    def watch_inventory(self, inventory: Callable[[], Inventory | None]) -> None:
        """Export the live node inventory (``inventory_gpus``) read at each scrape."""
        self.registry.register(InventoryCollector(inventory))

    def watch_ledgers(self, reservations: Callable[[], Iterable[GPUReservation]]) -> None:
        """Export GPUs held over budget (``ledger_over_budget_gpus``) at each scrape."""
        self.registry.register(LedgerCollector(reservations))


class InventoryCollector(Collector):
    """``gpu_reservation_inventory_gpus{gpu_class, figure}``: the node inventory at scrape
    time (figure: total, used, free, largest_block); no samples while it is unknown
    (a standby replica, or before the leader's caches synced)."""

    def __init__(self, inventory: Callable[[], Inventory | None]) -> None:
        self._inventory = inventory

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            f"{NAMESPACE}_inventory_gpus",
            "Physical GPUs per class now, from the leader's node and pod caches.",
            labels=["gpu_class", "figure"],
        )
        inv = self._inventory()
        for cls, cap in sorted((inv.classes if inv is not None else {}).items()):
            for figure, value in (
                ("total", cap.total),
                ("used", cap.used),
                ("free", cap.free),
                ("largest_block", cap.largest_block),
            ):
                family.add_metric([cls, figure], value)
        yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())


def over_budget(reservations: Iterable[GPUReservation]) -> dict[str, int]:
    """GPUs held beyond their reservation's budget, per GPU class; no side effects.

    Only active reservations count (a cancelled one's holds leave with its pods). The
    ledger protocol never claims past the budget, so a positive figure means the
    budget shrank under running pods (a booking reduced in the app), an upkeep that
    re-added the holds of admitted pods, or a hand edit.
    """
    found: dict[str, int] = {}
    for res in reservations:
        excess = res.used_gpus - res.facts.gpu_count
        if res.facts.state is State.ACTIVE and excess > 0:
            cls = res.facts.gpu_class
            found[cls] = found.get(cls, 0) + excess
    return found


class LedgerCollector(Collector):
    """``gpu_reservation_ledger_over_budget_gpus{gpu_class}`` (see ``over_budget``) at
    scrape time from the reservation cache; no samples while nothing is over budget
    (and on a standby replica, whose cache is empty)."""

    def __init__(self, reservations: Callable[[], Iterable[GPUReservation]]) -> None:
        self._reservations = reservations

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            f"{NAMESPACE}_ledger_over_budget_gpus",
            "GPUs held beyond their active reservation's budget, per class.",
            labels=["gpu_class"],
        )
        for gpu_class, gpus in sorted(over_budget(self._reservations()).items()):
            family.add_metric([gpu_class], gpus)
        yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())


@dataclass
class LeaseMetrics:
    """The lease path's metrics."""

    registry: CollectorRegistry
    asks: Counter = field(init=False)
    calls: Counter = field(init=False)
    candidates: Gauge = field(init=False)
    batches: Counter = field(init=False)
    grant_latency: Histogram = field(init=False)

    def __post_init__(self) -> None:
        r = self.registry
        self.asks = Counter(
            "ondemand_lease_asks",
            "Lease asks by outcome (granted, returned, replayed, contended, scheduled, "
            "structural, rejected, error, transient, revoked).",
            ["outcome"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.calls = Counter(
            "ondemand_app_calls",
            "Reservation-app calls the lease path made, by endpoint (lease, cancel, select).",
            ["call"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.candidates = Gauge(
            "ondemand_candidates",
            "Pods waiting for an on-demand lease after the last batch.",
            namespace=NAMESPACE,
            registry=r,
        )
        self.batches = Counter(
            "ondemand_batches",
            "Admission batches: batches with at least one candidate past the guards.",
            namespace=NAMESPACE,
            registry=r,
        )
        self.grant_latency = Histogram(
            "ondemand_seen_to_admitted_seconds",
            "From a candidate first seen to its pod admitted under its lease.",
            namespace=NAMESPACE,
            registry=r,
            buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0),
        )


#: Lag buckets (seconds) from a window opening to a waiting pod being tolerated.
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class QueueMetrics:
    """The reserved path's metrics, on the reconciler's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.depth = Gauge(
            "reserved_queue_depth",
            "Pods waiting on a reservation, by why (opens_later, full, too_small).",
            ["wait"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self.lag = Histogram(
            "window_open_to_admitted_seconds",
            "From a window opening to a pod that waited for it being tolerated.",
            namespace=NAMESPACE,
            registry=registry,
            buckets=LAG_BUCKETS,
        )
        self.admissions = Counter(
            "admissions",
            "Admissions by path (reserved: the reconciler's queue; on_demand: under a lease "
            "just granted; webhook: announced here, admitted at create).",
            ["path"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self.events = Counter(
            "events",
            "Events written on pods, by reason.",
            ["reason"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self.evictions = Counter(
            "evictions",
            "Pods deleted because their booking was cancelled or reassigned, by Event reason.",
            ["reason"],
            namespace=NAMESPACE,
            registry=registry,
        )


class SweepMetrics:
    """The sweep's metrics, on the reconciler's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.preempted = Counter(
            "preemptions",
            "Pods preempted, by cause (boundary, headroom).",
            ["cause"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self.unmet = Counter(
            "preemption_unmet_gpus",
            "GPUs a sweep needed but could not reclaim (no eligible pod), by class.",
            ["gpu_class"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self.selections = Counter(
            "preemption_selections",
            "Victim choices, by who chose (app, local).",
            ["by"],
            namespace=NAMESPACE,
            registry=registry,
        )
        self.warnings = Counter(
            "termination_warning_events",
            "TerminationWarning Events sent.",
            namespace=NAMESPACE,
            registry=registry,
        )


class UsageMetrics:
    """The booked / used / idle GPU-second counters (labels: class, kind, owner,
    group — each a bounded set: the app's classes, two kinds, its users, its groups)."""

    LABELS = ("gpu_class", "kind", "owner", "group")

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, text: str, labels: tuple[str, ...] = self.LABELS) -> Counter:
            return Counter(name, text, labels, namespace=NAMESPACE, registry=registry)

        self.booked = counter(
            "usage_booked_gpu_seconds",
            "GPU-seconds booked (GPUs x open window passed), by class, kind, owner, group.",
        )
        self.used = counter(
            "usage_used_gpu_seconds",
            "GPU-seconds admitted pods ran inside their reservation's window.",
        )
        self.idle = counter("usage_idle_gpu_seconds", "GPU-seconds booked and not used.")
        self.cpu = counter(
            "usage_pass_cpu_seconds",
            "CPU seconds (thread time) the usage passes took, their writes included.",
            (),
        )
        self.writes = counter(
            "usage_record_writes", "status.usage writes by outcome (ok, failed).", ("outcome",)
        )
