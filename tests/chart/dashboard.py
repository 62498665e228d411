"""The Grafana dashboard of gpu-reservation, built with grafanalib.

``charts/gpu-reservation/files/dashboard.json`` is this module's output, committed so
the chart can ship it in a ConfigMap (``grafanaDashboard.enabled``);
``tests/chart/test_monitoring.py`` fails when the file and this code disagree.
Regenerate after a change:

    .venv/bin/python -m tests.chart.dashboard > charts/gpu-reservation/files/dashboard.json
"""

from __future__ import annotations

import json
from typing import Any

from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from shared import vocab

#: Panels are laid out on Grafana's 24-column grid, rows of this height.
HEIGHT = 8
#: The Prometheus data source is chosen when the dashboard is imported.
DATASOURCE = "${datasource}"
UID = vocab.PRODUCT_NAME

#: (title, unit, [(expr, legend), ...]) of each time series, row by row.
ROWS: list[tuple[str, list[tuple[str, str, list[tuple[str, str]]]]]] = [
    (
        "Webhook",
        [
            (
                "AdmissionReviews by outcome",
                "reqps",
                [
                    (
                        "sum by (outcome) (rate(gpu_reservation_webhook_requests_total[5m]))",
                        "{{outcome}}",
                    )
                ],
            ),
            (
                "Answer latency",
                "s",
                [
                    (
                        f"histogram_quantile({q}, sum by (le) "
                        "(rate(gpu_reservation_webhook_request_duration_seconds_bucket[5m])))",
                        f"p{round(q * 100)}",
                    )
                    for q in (0.5, 0.9, 0.99)
                ],
            ),
            (
                "Fail-open admissions by reason",
                "reqps",
                [
                    (
                        "sum by (reason) (rate(gpu_reservation_webhook_fail_open_total[5m]))",
                        "{{reason}}",
                    )
                ],
            ),
            (
                "Ledger conflicts and retries",
                "ops",
                [
                    ("sum(rate(gpu_reservation_webhook_ledger_conflicts_total[5m]))", "409s"),
                    ("sum(rate(gpu_reservation_webhook_ledger_retries_total[5m]))", "retries"),
                ],
            ),
            (
                "Reservation cache age",
                "s",
                [("max by (pod) (gpu_reservation_webhook_cache_age_seconds)", "{{pod}}")],
            ),
        ],
    ),
    (
        "Reconciler",
        [
            ("Leader", "short", [("gpu_reservation_leader", "{{pod}}")]),
            (
                "Reservation fetches",
                "ops",
                [
                    (
                        "sum by (outcome) (rate(gpu_reservation_reservation_fetches_total[15m]))",
                        "{{outcome}}",
                    ),
                    ("max(gpu_reservation_reservation_fetch_consecutive_failures)", "failing"),
                ],
            ),
            (
                "Mirror",
                "short",
                [
                    ("max(gpu_reservation_mirrored_reservations)", "reservations"),
                    (
                        "sum by (action) (rate(gpu_reservation_mirror_write_errors_total[15m]))",
                        "errors {{action}}",
                    ),
                ],
            ),
            (
                "Push requests by answer",
                "reqps",
                [("sum by (code) (rate(gpu_reservation_push_requests_total[5m]))", "{{code}}")],
            ),
            (
                "Crashed loops",
                "short",
                [("max by (task) (gpu_reservation_background_task_failed)", "{{task}}")],
            ),
        ],
    ),
    (
        "Reserved path",
        [
            (
                "Pods waiting on a reservation",
                "short",
                [("sum by (wait) (gpu_reservation_reserved_queue_depth)", "{{wait}}")],
            ),
            (
                "Window open to admitted",
                "s",
                [
                    (
                        f"histogram_quantile({q}, sum by (le) "
                        "(rate(gpu_reservation_window_open_to_admitted_seconds_bucket[30m])))",
                        f"p{round(q * 100)}",
                    )
                    for q in (0.5, 0.9)
                ],
            ),
            (
                "Admissions by path",
                "ops",
                [("sum by (path) (rate(gpu_reservation_admissions_total[15m]))", "{{path}}")],
            ),
            (
                "Events on pods by reason",
                "ops",
                [("sum by (reason) (rate(gpu_reservation_events_total[15m]))", "{{reason}}")],
            ),
            (
                "Evictions by reason",
                "ops",
                [("sum by (reason) (increase(gpu_reservation_evictions_total[1h]))", "{{reason}}")],
            ),
        ],
    ),
]


ROWS.append(
    (
        "On-demand leases and preemption",
        [
            (
                "Lease asks by outcome",
                "ops",
                [
                    (
                        "sum by (outcome) (rate(gpu_reservation_ondemand_lease_asks_total[15m]))",
                        "{{outcome}}",
                    )
                ],
            ),
            (
                "Pods waiting for a lease",
                "short",
                [("max(gpu_reservation_ondemand_candidates)", "candidates")],
            ),
            (
                "Seen to admitted under a lease",
                "s",
                [
                    (
                        "histogram_quantile(0.9, sum by (le) "
                        "(rate(gpu_reservation_ondemand_seen_to_admitted_seconds_bucket[30m])))",
                        "p90",
                    )
                ],
            ),
            (
                "Preemptions by cause",
                "short",
                [("sum by (cause) (increase(gpu_reservation_preemptions_total[1h]))", "{{cause}}")],
            ),
            (
                "Unmet preemption demand (GPUs)",
                "short",
                [
                    (
                        "sum by (gpu_class) "
                        "(increase(gpu_reservation_preemption_unmet_gpus_total[1h]))",
                        "{{gpu_class}}",
                    )
                ],
            ),
            (
                "Termination warnings sent",
                "short",
                [("sum(increase(gpu_reservation_termination_warning_events_total[1h]))", "sent")],
            ),
        ],
    )
)


ROWS.append(
    (
        "Capacity, no-shows and the backstop",
        [
            (
                "GPUs per class: nodes and app",
                "short",
                [
                    (
                        "max by (gpu_class) (gpu_reservation_capacity_physical_gpus)",
                        "nodes {{gpu_class}}",
                    ),
                    ("max by (gpu_class) (gpu_reservation_capacity_app_gpus)", "app {{gpu_class}}"),
                ],
            ),
            (
                "Capacity deficit",
                "short",
                [("max by (gpu_class) (gpu_reservation_capacity_deficit_gpus)", "{{gpu_class}}")],
            ),
            (
                "No-show cancels by outcome",
                "short",
                [
                    (
                        "sum by (outcome) (increase(gpu_reservation_noshow_cancels_total[1h]))",
                        "{{outcome}}",
                    ),
                    ("max(gpu_reservation_noshow_pending)", "pending"),
                ],
            ),
            (
                "GPUs held over budget",
                "short",
                [
                    (
                        "max by (gpu_class) (gpu_reservation_ledger_over_budget_gpus)",
                        "{{gpu_class}}",
                    )
                ],
            ),
            (
                "Node inventory",
                "short",
                [
                    (
                        'sum by (gpu_class) (gpu_reservation_inventory_gpus{figure="free"})',
                        "free {{gpu_class}}",
                    ),
                    (
                        "max by (gpu_class) "
                        '(gpu_reservation_inventory_gpus{figure="largest_block"})',
                        "largest block {{gpu_class}}",
                    ),
                ],
            ),
            (
                "Unadmitted tolerations evicted",
                "short",
                [
                    (
                        "sum by (reason) "
                        "(increase(gpu_reservation_unadmitted_evictions_total[1h]))",
                        "{{reason}}",
                    )
                ],
            ),
        ],
    )
)


ROWS.append(
    (
        "Booked vs used",
        [
            (
                "Booked and used GPUs by class",
                "short",
                [
                    (
                        "sum by (gpu_class) (gpu_reservation:usage_booked_gpus:rate5m)",
                        "booked {{gpu_class}}",
                    ),
                    (
                        "sum by (gpu_class) (gpu_reservation:usage_used_gpus:rate5m)",
                        "used {{gpu_class}}",
                    ),
                ],
            ),
            (
                "Utilisation of booked GPUs by class (1 h)",
                "percentunit",
                [("gpu_reservation:usage_utilisation:ratio_rate1h", "{{gpu_class}}")],
            ),
            (
                "Idle booked GPU-hours by owner (top 10, 24 h)",
                "short",
                [
                    (
                        "topk(10, sum by (owner) "
                        "(increase(gpu_reservation_usage_idle_gpu_seconds_total[24h])) / 3600)",
                        "{{owner}}",
                    )
                ],
            ),
            (
                "Used GPUs by group and kind",
                "short",
                [
                    (
                        "sum by (group, kind) (gpu_reservation:usage_used_gpus:rate5m)",
                        "{{group}} {{kind}}",
                    )
                ],
            ),
        ],
    )
)


def panels() -> list[g.Panel]:
    """A collapsed-free row header, then its time series three to a line."""
    out: list[g.Panel] = []
    y = 0
    for row_title, series in ROWS:
        out.append(g.RowPanel(title=row_title, gridPos=g.GridPos(h=1, w=24, x=0, y=y)))
        y += 1
        for index, (title, unit, queries) in enumerate(series):
            x = (index % 3) * 8
            if index and index % 3 == 0:
                y += HEIGHT
            targets = [
                g.Target(expr=expr, legendFormat=legend, refId=chr(ord("A") + i))
                for i, (expr, legend) in enumerate(queries)
            ]
            out.append(
                g.TimeSeries(
                    title=title,
                    dataSource=DATASOURCE,
                    targets=targets,
                    unit=unit,
                    gridPos=g.GridPos(h=HEIGHT, w=8, x=x, y=y),
                )
            )
        y += HEIGHT
    return out


def dashboard() -> g.Dashboard:
    source = g.Template(
        name="datasource", query="prometheus", type="datasource", label="Prometheus", default=None
    )
    return g.Dashboard(
        title="GPU reservations",
        uid=UID,
        description="Admission webhook, reconciler and reserved path of gpu-reservation.",
        tags=[vocab.PRODUCT_NAME],
        timezone="browser",
        refresh="30s",
        panels=panels(),
        templating=g.Templating(list=[source]),
    ).auto_panel_ids()


def as_json() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    loaded: dict[str, Any] = json.loads(
        json.dumps(dashboard().to_json_data(), cls=DashboardEncoder)
    )
    return loaded


def render() -> str:
    return json.dumps(as_json(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(render(), end="")
