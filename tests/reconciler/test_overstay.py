"""Overstay reports when an overstaying pod leaves (R42): what is reported, when not."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from reconciler.base.pods import PodView, project_pod
from reconciler.preemption.overstay import (
    DELETED,
    TERMINATED,
    OverstayReporter,
    leaving_reason,
    report_for,
)
from shared import model, vocab
from shared.appclient.outcomes import Invalid
from shared.appclient.requests import OverstayReport
from shared.clock import ManualClock
from shared.policy.matching import MatchRules
from tests.reconciler.builders import START
from tests.reconciler.upholdkit import facts, raw_pod

H = timedelta(hours=1)
NOW = START + 2 * H
RES = {f.name: model.GPUReservation(f) for f in [facts(1, START, START + H)]}


def view(name: str = "p", ref: str | None = "res-1", **notes: str) -> PodView:
    found = project_pod(raw_pod(name, ref, notes=notes), MatchRules())
    assert found is not None
    return found


def finished(pod: PodView) -> PodView:
    return PodView(**{**pod.__dict__, "phase": "Succeeded"})


def test_a_pod_past_its_guarantee_is_reported_from_the_guarantee_end() -> None:
    report = report_for(view(), RES, NOW, DELETED, use_group=False)
    assert report == OverstayReport(1, "uid-p", 1, START + H, NOW, DELETED)


def test_inside_the_guarantee_or_without_a_start_nothing_is_reported() -> None:
    assert report_for(view(), RES, START + H, DELETED, use_group=False) is None  # now == end
    assert report_for(view(ref=None), RES, NOW, DELETED, use_group=False) is None
    assert report_for(view(ref="res-9"), RES, NOW, DELETED, use_group=False) is None


def test_a_gone_reservation_falls_back_to_the_frozen_until() -> None:
    pod = view(ref="res-9", **{vocab.GUARANTEED_UNTIL: "2026-01-05T10:30:00Z"})
    report = report_for(pod, RES, NOW, DELETED, use_group=False)
    assert report is not None
    assert report.start == START + 1.5 * H
    garbage = view(ref="res-9", **{vocab.GUARANTEED_UNTIL: "half past ten"})
    assert report_for(garbage, RES, NOW, DELETED, use_group=False) is None


def test_leaving_means_deleted_or_just_finished() -> None:
    pod = view()
    assert leaving_reason(pod, None) == DELETED
    assert leaving_reason(pod, finished(pod)) == TERMINATED
    assert leaving_reason(finished(pod), None) is None  # reported when it finished
    assert leaving_reason(None, pod) is None
    assert leaving_reason(pod, pod) is None


class App:
    def __init__(self) -> None:
        self.reports: list[OverstayReport] = []

    async def report_overstay(self, report: OverstayReport) -> Any:
        self.reports.append(report)
        return Invalid(422, "end_utc must be after start_utc")  # a failure is only logged


def test_the_listener_files_one_report_per_leaving_pod() -> None:
    async def scenario() -> None:
        app = App()
        reporter = OverstayReporter(app, ManualClock(NOW), lambda: RES, use_group=False)
        pod = view()
        reporter.pod_changed(pod.key, pod, finished(pod))
        reporter.pod_changed(pod.key, finished(pod), None)
        reporter.pod_changed(pod.key, None, pod)
        await asyncio.gather(*reporter.pending)
        assert [r.end_reason for r in app.reports] == [TERMINATED]

    asyncio.run(scenario())
