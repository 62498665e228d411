"""The chart's alerting rules, evaluated by Prometheus' own rule engine (promtool).

The PrometheusRule is rendered from the chart, its groups written to a rules file,
checked with ``promtool check rules`` and unit-tested with ``promtool test rules``:
every alert has input series that make it fire (with its labels and summary) and
series that must leave it quiet. ``make test`` fetches promtool (the Makefile's
``promtool`` target) and names it in ``PROMTOOL``; elsewhere the tests look for it in
the virtual environment or on the PATH and are skipped without it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared import vocab
from tests.chart.render import ROOT, render, values

#: The job names of a default release (the Services the ServiceMonitors select).
WEBHOOK_JOB = f"{vocab.PRODUCT_NAME}-webhook"
RECONCILER_JOB = f"{vocab.PRODUCT_NAME}-reconciler"


def promtool() -> str:
    """The promtool binary; a test run by ``make test`` must have it."""
    named = os.environ.get("PROMTOOL")
    if named:
        assert Path(named).is_file(), f"PROMTOOL={named} does not exist"
        return named
    local = ROOT / ".venv" / "bin" / "promtool"
    found = str(local) if local.is_file() else shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (make promtool)")
    return found


def rule_groups(vals: dict[str, Any]) -> list[dict[str, Any]]:
    (rule,) = [d for d in render(vals) if d["kind"] == "PrometheusRule"]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def rules_by_name(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The alerting rules by name (recording rules have none)."""
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


DEFAULT_VALUES = values(prometheusRule={"enabled": True})


@dataclass(frozen=True)
class Case:
    """Series (``name{labels}`` → promtool's expanding notation) and, at ``at``, the
    alerts expected: (extra labels, summary) each; none: the alert must stay quiet."""

    alert: str
    name: str
    series: dict[str, str]
    at: str
    fires: list[tuple[dict[str, str], str]] = field(default_factory=list)
    interval: str = "1m"
    vals: dict[str, Any] = field(default_factory=lambda: DEFAULT_VALUES)


def _up(job: str, *states: str) -> dict[str, str]:
    return {f'up{{job="{job}", instance="10.0.0.{i}:8080"}}': s for i, s in enumerate(states)}


WH = "gpu_reservation_webhook_"
REC = "gpu_reservation_"
OTHER_WEBHOOK = 'up{job="cert-manager-webhook", instance="10.0.1.1:9402"}'

CASES = [
    # --- the webhook's and the reconciler's scrapes ------------------------------------
    Case(
        "GpuReservationWebhookDown",
        "every replica down",
        _up(WEBHOOK_JOB, "0x10", "0x10"),
        "6m",
        [({}, "No webhook replica is up")],
    ),
    Case(
        "GpuReservationWebhookDown",
        "no target at all, another webhook up",
        {OTHER_WEBHOOK: "1x10"},
        "6m",
        [({}, "No webhook replica is up")],
    ),
    Case(
        "GpuReservationWebhookDown",
        "one replica of two up",
        _up(WEBHOOK_JOB, "0x10", "1x10"),
        "10m",
    ),
    Case(
        "GpuReservationWebhookDown",
        "down for less than 5 minutes",
        _up(WEBHOOK_JOB, "1 1 0x10"),
        "5m",
    ),
    Case(
        "GpuReservationWebhookReplicaDown",
        "one replica of two down",
        _up(WEBHOOK_JOB, "0x15", "1x15"),
        "11m",
        [({}, "1 webhook replica(s) fail their scrape")],
    ),
    Case(
        "GpuReservationWebhookReplicaDown",
        "every replica up",
        _up(WEBHOOK_JOB, "1x15", "1x15"),
        "11m",
    ),
    Case(
        "GpuReservationReconcilerDown",
        "the only replica down",
        _up(RECONCILER_JOB, "0x10"),
        "6m",
        [({}, "No reconciler replica is up")],
    ),
    Case(
        "GpuReservationReconcilerDown",
        "no target, the webhook up",
        _up(WEBHOOK_JOB, "1x10"),
        "6m",
        [({}, "No reconciler replica is up")],
    ),
    Case(
        "GpuReservationReconcilerDown",
        "a standby down, the leader up",
        _up(RECONCILER_JOB, "1x10", "0x10"),
        "10m",
    ),
    # --- holds released because no pod appeared --------------------------------------
    Case(
        "GpuReservationUnseenHoldsReleased",
        "three holds released",
        {f"{REC}ledger_unseen_holds_released_total": "0x5 3x5"},
        "8m",
        [({}, "3 ledger holds were released because no pod appeared")],
    ),
    Case(
        "GpuReservationUnseenHoldsReleased",
        "none released since the start",
        {f"{REC}ledger_unseen_holds_released_total": "2x20"},
        "15m",
    ),
    Case(
        "GpuReservationUnseenHoldsReleased",
        "none in the last 10 minutes",
        {f"{REC}ledger_unseen_holds_released_total": "0 3x20"},
        "15m",
    ),
    # --- leadership ------------------------------------------------------------------
    Case(
        "GpuReservationNoLeader",
        "both replicas standby",
        {f'{REC}leader{{pod="a"}}': "0x10", f'{REC}leader{{pod="b"}}': "0x10"},
        "2m",
        [({}, "No reconciler replica leads")],
        interval="30s",
    ),
    Case(
        "GpuReservationNoLeader",
        "a takeover seen by one scrape",
        {f'{REC}leader{{pod="a"}}': "1 1 1 stale", f'{REC}leader{{pod="b"}}': "0 0 0 0 1x6"},
        "3m",
        interval="30s",
    ),
    Case(
        "GpuReservationNoLeader",
        "no leader for 90 s with a 60 s lease: still pending (for: 120 s)",
        {f'{REC}leader{{pod="a"}}': "0x10"},
        "1m30s",
        interval="30s",
        vals=values(
            prometheusRule={"enabled": True},
            reconciler={"leaderElection": {"leaseSeconds": 60, "renewSeconds": 20}},
        ),
    ),
    Case(
        "GpuReservationNoLeader",
        "no leader for 150 s with a 60 s lease",
        {f'{REC}leader{{pod="a"}}': "0x10"},
        "2m30s",
        [({}, "No reconciler replica leads")],
        interval="30s",
        vals=values(
            prometheusRule={"enabled": True},
            reconciler={"leaderElection": {"leaseSeconds": 60, "renewSeconds": 20}},
        ),
    ),
    Case(
        "GpuReservationTwoLeaders",
        "two replicas lead",
        {f'{REC}leader{{pod="a"}}': "1x5", f'{REC}leader{{pod="b"}}': "1x5"},
        "2m",
        [({}, "2 reconciler replicas think they lead")],
    ),
    Case(
        "GpuReservationTwoLeaders",
        "one leader, one standby",
        {f'{REC}leader{{pod="a"}}': "1x5", f'{REC}leader{{pod="b"}}': "0x5"},
        "2m",
    ),
    # --- the reconciler's work -------------------------------------------------------
    Case(
        "GpuReservationFetchFailing",
        "three failures in a row",
        {f"{REC}reservation_fetch_consecutive_failures": "3x10"},
        "6m",
        [({}, "The reservation sync failed 3 times in a row")],
    ),
    Case(
        "GpuReservationFetchFailing",
        "two failures in a row",
        {f"{REC}reservation_fetch_consecutive_failures": "2x10"},
        "6m",
    ),
    Case(
        "GpuReservationMirrorStale",
        "no success for 45 minutes",
        {f"{REC}reservation_fetch_last_success_timestamp_seconds": "0x60"},
        "45m",
        [({}, "No successful reservation sync for 45m 0s")],
    ),
    Case(
        "GpuReservationMirrorStale",
        "a success every minute",
        {f"{REC}reservation_fetch_last_success_timestamp_seconds": "0+60x60"},
        "45m",
    ),
    Case(
        "GpuReservationMirrorWriteErrors",
        "a write error every minute",
        {f'{REC}mirror_write_errors_total{{action="update"}}': "0+1x40"},
        "35m",
        [({}, "GPUReservation writes keep failing")],
    ),
    Case(
        "GpuReservationMirrorWriteErrors",
        "old errors only",
        {f'{REC}mirror_write_errors_total{{action="update"}}': "5x40"},
        "35m",
    ),
    Case(
        "GpuReservationTaskFailed",
        "the sync loop crashed",
        {f'{REC}background_task_failed{{task="sync"}}': "1x5"},
        "3m",
        [({"task": "sync"}, "Reconciler loop sync crashed")],
    ),
    Case(
        "GpuReservationTaskFailed",
        "every loop running",
        {f'{REC}background_task_failed{{task="sync"}}': "0x5"},
        "3m",
    ),
    Case(
        "GpuReservationSlowWindowOpen",
        "admitted 10-60 s after the window opens",
        {
            f'{REC}window_open_to_admitted_seconds_bucket{{le="10"}}': "0x60",
            f'{REC}window_open_to_admitted_seconds_bucket{{le="60"}}': "0+10x60",
            f'{REC}window_open_to_admitted_seconds_bucket{{le="+Inf"}}': "0+10x60",
        },
        "50m",
        [({}, "Queued pods wait 55s after their window opens")],
    ),
    Case(
        "GpuReservationSlowWindowOpen",
        "admitted within 10 s",
        {
            f'{REC}window_open_to_admitted_seconds_bucket{{le="10"}}': "0+10x60",
            f'{REC}window_open_to_admitted_seconds_bucket{{le="60"}}': "0+10x60",
            f'{REC}window_open_to_admitted_seconds_bucket{{le="+Inf"}}': "0+10x60",
        },
        "50m",
    ),
    Case(
        "GpuReservationUnmetPreemptionDemand",
        "a booking started 4 GPUs short",
        {f'{REC}preemption_unmet_gpus_total{{gpu_class="a100"}}': "0 0 4x10"},
        "5m",
        [({"gpu_class": "a100"}, "Bookings of a100 started 4 GPUs short")],
    ),
    Case(
        "GpuReservationUnmetPreemptionDemand",
        "no shortfall in 30 minutes",
        {f'{REC}preemption_unmet_gpus_total{{gpu_class="a100"}}': "4x40"},
        "35m",
    ),
    Case(
        "GpuReservationOnDemandLeaseErrors",
        "a lease error every minute",
        {f'{REC}ondemand_lease_asks_total{{outcome="error"}}': "0+1x40"},
        "30m",
        [({}, "On-demand lease requests keep failing")],
    ),
    Case(
        "GpuReservationOnDemandLeaseErrors",
        "only grants",
        {f'{REC}ondemand_lease_asks_total{{outcome="granted"}}': "0+1x40"},
        "30m",
    ),
    Case(
        "GpuReservationCapacityMismatch",
        "the app counts 2 more",
        {f'{REC}capacity_deficit_gpus{{gpu_class="a100"}}': "2x20"},
        "16m",
        [
            (
                {"gpu_class": "a100"},
                "The reservation app counts 2 more a100 GPUs than the nodes have",
            )
        ],
    ),
    Case(
        "GpuReservationCapacityMismatch",
        "no deficit",
        {f'{REC}capacity_deficit_gpus{{gpu_class="a100"}}': "0x20"},
        "16m",
    ),
    Case(
        "GpuReservationNoShowCancelsFailing",
        "a failed cancel every minute",
        {f'{REC}noshow_cancels_total{{outcome="failed"}}': "0+1x60"},
        "45m",
        [({}, "No-show cancels keep failing")],
    ),
    Case(
        "GpuReservationNoShowCancelsFailing",
        "cancels succeed",
        {f'{REC}noshow_cancels_total{{outcome="cancelled"}}': "0+1x60"},
        "45m",
    ),
    Case(
        "GpuReservationLedgerOverBudget",
        "one GPU held beyond the budget",
        {f'{REC}ledger_over_budget_gpus{{gpu_class="h100"}}': "1x20"},
        "11m",
        [({"gpu_class": "h100"}, "1 h100 GPUs are held beyond their bookings' budgets")],
    ),
    Case(
        "GpuReservationLedgerOverBudget",
        "nothing over budget (the series is absent)",
        {f'{REC}leader{{pod="a"}}': "1x20"},
        "11m",
    ),
    # --- the webhook's work ----------------------------------------------------------
    Case(
        "GpuReservationWebhookSlow",
        "p99 at 2.48 s",
        {
            f'{WH}request_duration_seconds_bucket{{le="0.5"}}': "0x30",
            f'{WH}request_duration_seconds_bucket{{le="2.5"}}': "0+10x30",
            f'{WH}request_duration_seconds_bucket{{le="+Inf"}}': "0+10x30",
        },
        "20m",
        [({}, "Webhook p99 latency is 2.48s")],
    ),
    Case(
        "GpuReservationWebhookSlow",
        "every answer within 0.5 s",
        {
            f'{WH}request_duration_seconds_bucket{{le="0.5"}}': "0+10x30",
            f'{WH}request_duration_seconds_bucket{{le="2.5"}}': "0+10x30",
            f'{WH}request_duration_seconds_bucket{{le="+Inf"}}': "0+10x30",
        },
        "20m",
    ),
    Case(
        "GpuReservationWebhookFailingOpen",
        "one in ten fails open",
        {
            f'{WH}fail_open_total{{reason="ledger_deadline"}}': "0+1x30",
            f'{WH}requests_total{{outcome="admitted"}}': "0+10x30",
        },
        "20m",
        [({}, "10% of admissions fail open")],
    ),
    Case(
        "GpuReservationWebhookFailingOpen",
        "one in a hundred fails open",
        {
            f'{WH}fail_open_total{{reason="ledger_deadline"}}': "0+1x30",
            f'{WH}requests_total{{outcome="admitted"}}': "0+100x30",
        },
        "20m",
    ),
    Case(
        "GpuReservationWebhookCacheStale",
        "no watch event for 400 s",
        {f"{WH}cache_age_seconds": "400x20"},
        "10m",
        [({}, "A webhook replica has not heard from the API server for 6m 40s")],
    ),
    Case(
        "GpuReservationWebhookCacheStale",
        "a fresh cache",
        {f"{WH}cache_age_seconds": "10x20"},
        "10m",
    ),
]


def unit_test(case: Case, rule: dict[str, Any]) -> dict[str, Any]:
    """One promtool test group for ``case``."""
    expected = [
        {
            "exp_labels": {"severity": rule["labels"]["severity"], **labels},
            "exp_annotations": {
                "summary": summary,
                "description": rule["annotations"]["description"],
            },
        }
        for labels, summary in case.fires
    ]
    return {
        "name": f"{case.alert}: {case.name}",
        "interval": case.interval,
        "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
        "alert_rule_test": [
            {"eval_time": case.at, "alertname": case.alert, "exp_alerts": expected}
        ],
    }


def run_promtool(
    tmp_path: Path, groups: list[dict[str, Any]], tests: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    checked = subprocess.run(
        [promtool(), "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    spec = tmp_path / "tests.yaml"
    spec.write_text(
        yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "30s", "tests": tests}),
        encoding="utf-8",
    )
    return subprocess.run(
        [promtool(), "test", "rules", str(spec)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    alerts = set(rules_by_name(rule_groups(DEFAULT_VALUES)))
    assert {c.alert for c in CASES if c.fires} == alerts
    assert {c.alert for c in CASES if not c.fires} == alerts


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.alert}: {c.name}")
def test_the_rules_fire_exactly_as_expected(case: Case, tmp_path: Path) -> None:
    groups = rule_groups(case.vals)
    result = run_promtool(tmp_path, groups, [unit_test(case, rules_by_name(groups)[case.alert])])
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_expectation_fails_the_harness(tmp_path: Path) -> None:
    """The harness is not vacuous: a quiet case claimed to fire makes promtool fail."""
    quiet = next(c for c in CASES if c.alert == "GpuReservationWebhookDown" and not c.fires)
    wrong = Case(
        quiet.alert, quiet.name, quiet.series, quiet.at, [({}, "No webhook replica is up")]
    )
    groups = rule_groups(DEFAULT_VALUES)
    result = run_promtool(tmp_path, groups, [unit_test(wrong, rules_by_name(groups)[wrong.alert])])
    assert result.returncode != 0
    assert "GpuReservationWebhookDown" in result.stdout + result.stderr


def test_the_jobs_follow_the_release_and_the_overrides() -> None:
    def exprs(vals: dict[str, Any]) -> str:
        rules = rules_by_name(rule_groups(vals))
        return str(rules["GpuReservationWebhookDown"]["expr"]) + str(
            rules["GpuReservationReconcilerDown"]["expr"]
        )

    assert f'job="{WEBHOOK_JOB}"' in exprs(DEFAULT_VALUES)
    named = exprs(values(prometheusRule={"enabled": True}, fullnameOverride="acme"))
    assert 'job="acme-webhook"' in named
    assert 'job="acme-reconciler"' in named
    overridden = exprs(
        values(prometheusRule={"enabled": True, "webhookJob": "wh", "reconcilerJob": "rc"})
    )
    assert 'job="wh"' in overridden
    assert 'job="rc"' in overridden
    assert f"{vocab.PRODUCT_NAME}-" not in overridden


def test_the_no_leader_delay_follows_the_lease() -> None:
    def delay(lease: int, renew: int) -> str:
        vals = values(
            prometheusRule={"enabled": True},
            reconciler={"leaderElection": {"leaseSeconds": lease, "renewSeconds": renew}},
        )
        return str(rules_by_name(rule_groups(vals))["GpuReservationNoLeader"]["for"])

    assert [delay(15, 5), delay(30, 10), delay(90, 30)] == ["60s", "60s", "180s"]


def test_the_usage_recording_rules(tmp_path: Path) -> None:
    """Booked 4 GPUs and used 1 of them for a whole hour (the leader's counters grow
    4 and 1 GPU-seconds per second): the rates read as GPUs, the ratio as 25 %."""
    labels = 'gpu_class="h100", kind="booking", owner="alice", group="lab"'
    scraped = labels + ', pod="a"'
    series = {
        f"{REC}usage_booked_gpu_seconds_total{{{scraped}}}": "0+240x90",
        f"{REC}usage_used_gpu_seconds_total{{{scraped}}}": "0+60x90",
    }
    expected = [
        ("gpu_reservation:usage_booked_gpus:rate5m", f"{{{labels}}}", 4),
        ("gpu_reservation:usage_used_gpus:rate5m", f"{{{labels}}}", 1),
        ("gpu_reservation:usage_utilisation:ratio_rate1h", '{gpu_class="h100"}', 0.25),
    ]
    test: dict[str, Any] = {
        "name": "usage recording rules",
        "interval": "1m",
        "input_series": [{"series": k, "values": v} for k, v in series.items()],
        "promql_expr_test": [
            {
                "expr": name,
                "eval_time": "80m",
                "exp_samples": [{"labels": f"{name}{lbls}", "value": value}],
            }
            for name, lbls, value in expected
        ],
    }
    result = run_promtool(tmp_path, rule_groups(DEFAULT_VALUES), [test])
    assert result.returncode == 0, result.stdout + result.stderr
    ratio = "gpu_reservation:usage_utilisation:ratio_rate1h"
    claim = {"labels": f'{ratio}{{gpu_class="h100"}}', "value": 0.5}
    wrong: dict[str, Any] = {
        **test,
        "promql_expr_test": [{"expr": ratio, "eval_time": "80m", "exp_samples": [claim]}],
    }
    assert run_promtool(tmp_path, rule_groups(DEFAULT_VALUES), [wrong]).returncode != 0
