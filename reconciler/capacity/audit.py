"""The capacity audit on the leader, every CAPACITY_CHECK_INTERVAL (R37).

Compares the reservation app's per-class count (``effective_gpus_today``, else
``total_gpus``) with the node inventory (``Caches.inventory()``) through
``shared.policy.capacity.audit``. The first audit runs as soon as the first class list
and the node and pod caches exist. Each audit:

- logs every class whose counts differ as ``capacity_audit.mismatch`` (WARNING, with
  ``app``, ``physical``, ``deficit``, ``overcommitted``), and a class entering or
  leaving the overcommitted state as ``capacity_audit.paused`` / ``.resumed``;
- sets the gauges ``capacity_physical_gpus``, ``capacity_app_gpus`` and
  ``capacity_deficit_gpus`` per class;
- writes the kubectl-visible summary: an Event on the leader election Lease (the
  controller's own object in its namespace) per overcommitted class —
  ``CapacityOvercommitted`` (Warning) at every audit while it lasts, so it stays
  visible past the apiserver's Event TTL, and ``CapacityRestored`` (Normal) once it
  clears. ``kubectl describe lease -n <ns> gpu-reservation-reconciler`` or
  ``kubectl get events -n <ns>`` show them.

Guard 4 of the lease path reads ``deficits()`` (``deficit(cls)`` for one class):
recomputed from the current inventory and class list on each call (the pause set
follows the inventory at once, R37), falling back to the last audit while either is
unknown.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping

from reconciler.base import events
from reconciler.base.component import Ground, Loop
from reconciler.base.kube import KubeWriter
from reconciler.base.loops import until_ready
from reconciler.base.metrics import Metrics
from shared import vocab
from shared.appclient import GpuClass
from shared.clock import Clock
from shared.errors import KubeError
from shared.logs import log
from shared.policy.capacity import AppClass, ClassAudit, app_counts, audit
from shared.policy.inventory import Inventory
from shared.resources import LEASES

_log = logging.getLogger(__name__)
AUDIT_TASK = "capacity-audit"


def app_side(classes: Mapping[int, GpuClass] | None) -> dict[str, int] | None:
    """App-side GPUs per class label; None before the first class list."""
    if classes is None:
        return None
    return app_counts(
        AppClass(c.label_value, c.capacity, c.is_active)
        for c in sorted(classes.values(), key=lambda c: c.id)
    )


def overcommit_message(row: ClassAudit) -> str:
    """The operator-facing text of ``CapacityOvercommitted``."""
    return (
        f"GPU class {row.gpu_class}: the reservation app counts {row.app} GPUs today but "
        f"the cluster has {row.physical} on schedulable, Ready reserved nodes "
        f"({row.deficit} short). On-demand admissions for {row.gpu_class} are held "
        "until the counts agree: fix the nodes, or lower the class capacity in the app."
    )


def restored_message(row: ClassAudit) -> str:
    """The operator-facing text of ``CapacityRestored``."""
    return (
        f"GPU class {row.gpu_class}: the cluster has {row.physical} GPUs again for the "
        f"{row.app} the reservation app counts; on-demand admissions are no longer held."
    )


class CapacityAuditor:
    """Runs the audit and keeps its result for guard 4, metrics and the summary."""

    def __init__(
        self,
        gateway: KubeWriter,
        namespace: str,
        clock: Clock,
        metrics: Metrics,
        inventory: Callable[[], Inventory | None],
        classes: Callable[[], Mapping[int, GpuClass] | None],
        interval_s: float,
        *,
        recorder: events.Recorder | None = None,
    ) -> None:
        self._gateway = gateway
        #: Writes the Lease's Events; repeats of one fold into a count.
        self._recorder = recorder or events.Recorder()
        self._ns = namespace
        self._clock = clock
        self._metrics = metrics
        self._inventory = inventory
        self._classes = classes
        self._interval_s = interval_s
        #: The last audit's rows by class (empty before the first audit).
        self.last: dict[str, ClassAudit] = {}

    def live(self) -> dict[str, ClassAudit]:
        """The audit of the current inventory and class list (the last one while
        either is unknown). Pure apart from reading the caches."""
        inv, app = self._inventory(), app_side(self._classes())
        if inv is None or app is None:
            return dict(self.last)
        return audit(inv, app)

    def deficit(self, gpu_class: str) -> int:
        """GPUs the app over-counts for ``gpu_class`` now (0: not overcommitted)."""
        row = self.live().get(gpu_class)
        return row.deficit if row is not None else 0

    def deficits(self) -> dict[str, int]:
        """Every overcommitted class now, with its deficit (guard 4 of the lease path)."""
        return {c: r.deficit for c, r in self.live().items() if r.overcommitted}

    def loops(self) -> list[Loop]:
        """The audit's loop."""
        return [(AUDIT_TASK, self.run)]

    def reset(self) -> None:
        """Forget the last audit (a later leader term audits afresh)."""
        self.last = {}

    def _ready(self) -> bool:
        return self._inventory() is not None and self._classes() is not None

    async def run(self) -> None:
        """Audit once the inputs exist, then every interval."""
        await until_ready(self._ready)
        while True:
            await self.once()
            await self._clock.sleep(self._interval_s)

    async def once(self) -> dict[str, ClassAudit]:
        """One audit: log, metrics, summary Events; the rows (empty when unknown)."""
        inv, app = self._inventory(), app_side(self._classes())
        if inv is None or app is None:
            self._metrics.capacity_audits.labels("unknown").inc()
            log(_log, logging.INFO, "capacity_audit.skipped", why="no inventory or class list")
            return {}
        rows = audit(inv, app)
        previous, self.last = self.last, rows
        self._export(rows, previous)
        for row in rows.values():
            if row.mismatch:
                log(
                    _log,
                    logging.WARNING,
                    "capacity_audit.mismatch",
                    gpu_class=row.gpu_class,
                    app=row.app,
                    physical=row.physical,
                    deficit=row.deficit,
                    overcommitted=row.overcommitted,
                )
        await self._summarise(rows, previous)
        outcome = "mismatch" if any(r.mismatch for r in rows.values()) else "ok"
        self._metrics.capacity_audits.labels(outcome).inc()
        overcommitted = sorted(r.gpu_class for r in rows.values() if r.overcommitted)
        log(
            _log,
            logging.INFO,
            "capacity_audit.done",
            classes=len(rows),
            overcommitted=overcommitted,
        )
        return rows

    def _export(self, rows: Mapping[str, ClassAudit], previous: Mapping[str, ClassAudit]) -> None:
        m = self._metrics
        for gone in set(previous) - set(rows):
            for gauge in (m.capacity_physical, m.capacity_app, m.capacity_deficit):
                with contextlib.suppress(KeyError):
                    gauge.remove(gone)
        for cls, row in rows.items():
            if row.physical is not None:
                m.capacity_physical.labels(cls).set(row.physical)
            if row.app is not None:
                m.capacity_app.labels(cls).set(row.app)
            m.capacity_deficit.labels(cls).set(row.deficit)

    async def _summarise(
        self, rows: Mapping[str, ClassAudit], previous: Mapping[str, ClassAudit]
    ) -> None:
        was = {c for c, r in previous.items() if r.overcommitted}
        now_over = {c for c, r in rows.items() if r.overcommitted}
        if not was and not now_over:
            return
        lease = await self._lease()
        for cls in sorted(now_over):
            row = rows[cls]
            if cls not in was:
                log(
                    _log,
                    logging.WARNING,
                    "capacity_audit.paused",
                    gpu_class=cls,
                    deficit=row.deficit,
                )
            await self._event(lease, vocab.AUDIT_REASON_OVERCOMMITTED, overcommit_message(row))
        for cls in sorted(was - now_over):
            row = rows.get(cls) or ClassAudit(cls, previous[cls].app, None)
            log(_log, logging.INFO, "capacity_audit.resumed", gpu_class=cls)
            await self._event(lease, vocab.AUDIT_REASON_RESTORED, restored_message(row))

    async def _lease(self) -> dict[str, str]:
        """The Lease as an Event's involved object (its uid when it can be read)."""
        involved = {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "name": vocab.LEADER_LEASE_NAME,
        }
        try:
            obj = await self._gateway.get(LEASES, vocab.LEADER_LEASE_NAME, self._ns)
        except KubeError:
            return involved  # no Lease (election off): the Event still lists by name
        uid = (obj.get("metadata") or {}).get("uid")
        return {**involved, "uid": uid} if isinstance(uid, str) and uid else involved

    async def _event(self, lease: Mapping[str, str], reason: str, message: str) -> None:
        type_ = events.WARNING if reason == vocab.AUDIT_REASON_OVERCOMMITTED else events.NORMAL
        body = events.object_event_body(self._ns, lease, reason, message, type_, self._clock.now())
        await self._recorder.send(self._gateway, body)


def setup(ground: Ground, classes: Callable[[], Mapping[int, GpuClass] | None]) -> CapacityAuditor:
    """The capacity audit of one leader term over the node inventory and the app's
    ``classes`` (None until they were fetched)."""
    return CapacityAuditor(
        ground.gateway,
        ground.settings.common.namespace,
        ground.clock,
        ground.metrics,
        ground.caches.inventory,
        classes,
        float(ground.settings.capacity_check_s),
        recorder=ground.recorder,
    )
