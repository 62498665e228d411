"""``ledger_over_budget_gpus``: GPUs held beyond an active reservation's budget."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families

from reconciler.base.metrics import Metrics, over_budget
from shared.model import GPUReservation, State
from tests.policy.builders import reservation


def test_only_active_reservations_over_their_budget_count_per_class() -> None:
    within = reservation(1, gpus=2, holds=(1, 1))
    over = reservation(2, gpus=2, holds=(2, 1))  # a booking reduced from 3 to 2
    more = reservation(3, gpus=1, holds=(2,))
    other = reservation(4, gpu_class="a100", gpus=1, holds=(3,))
    cancelled = replace(over, facts=replace(over.facts, state=State.CANCELLED))
    assert over_budget([within, over, more, other, cancelled]) == {"h100": 2, "a100": 2}
    assert over_budget([]) == {}


def scrape(metrics: Metrics) -> dict[tuple[tuple[str, str], ...], float]:
    found = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        if family.name == "gpu_reservation_ledger_over_budget_gpus":
            for sample in family.samples:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_the_gauge_is_read_at_scrape_time_from_the_cache() -> None:
    cache: list[GPUReservation] = []
    metrics = Metrics()
    metrics.watch_ledgers(lambda: cache)
    assert scrape(metrics) == {}
    cache.append(reservation(1, gpus=1, holds=(1, 1)))
    assert scrape(metrics) == {(("gpu_class", "h100"),): 1.0}
