"""The capacity audit: the app's GPU count per class against the cluster's (R37).

The reservation app admits bookings and leases against ``effective_gpus_today`` of a
class (else ``total_gpus``; neither means the app side is unknown). The cluster has
what the node inventory counts (``shared.policy.inventory``). When the app counts more
than the cluster has, the class is **overcommitted** by ``deficit = app − physical``
GPUs: leases sold against it may never start, so new on-demand admissions for it are
held (guard 4 reads ``overcommitted``/``deficit``). A difference the other way is only
reported. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shared.policy.inventory import Inventory


@dataclass(frozen=True)
class AppClass:
    """What the audit needs of one app-side class (``GpuClassResponse``)."""

    label: str | None
    #: ``effective_gpus_today``, else ``total_gpus``; None when the app gives neither.
    gpus: int | None
    active: bool = True


@dataclass(frozen=True)
class ClassAudit:
    """One class's comparison. ``app`` or ``physical`` is None when unknown."""

    gpu_class: str
    app: int | None
    physical: int | None

    @property
    def mismatch(self) -> bool:
        """Both sides known and different (in either direction)."""
        return self.app is not None and self.physical is not None and self.app != self.physical

    @property
    def overcommitted(self) -> bool:
        """The app counts more GPUs than the cluster has (never with an unknown side)."""
        return self.deficit > 0

    @property
    def deficit(self) -> int:
        """GPUs the app sells that do not exist (0 unless overcommitted)."""
        if self.app is None or self.physical is None:
            return 0
        return max(0, self.app - self.physical)


def app_counts(classes: Iterable[AppClass]) -> dict[str, int]:
    """App-side GPUs per class label: active classes with a label and a known count.

    An inactive class cannot be booked, so it is left out of the audit (its label,
    should it still taint nodes, is compared as "app side unknown"). Two classes with
    one label (an app misconfiguration) add up: the app admits against both.
    """
    counts: dict[str, int] = {}
    for cls in classes:
        if cls.label and cls.active and cls.gpus is not None:
            counts[cls.label] = counts.get(cls.label, 0) + max(0, cls.gpus)
    return counts


def audit(inventory: Inventory, app: Mapping[str, int]) -> dict[str, ClassAudit]:
    """Compare every class either side knows, by class label (sorted)."""
    result: dict[str, ClassAudit] = {}
    for cls in sorted(set(app) | set(inventory.classes)):
        cap = inventory.capacity(cls)
        result[cls] = ClassAudit(cls, app.get(cls), cap.total if cap is not None else None)
    return result
