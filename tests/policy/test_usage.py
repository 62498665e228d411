"""Booked versus used accounting (shared.policy.usage): the edge rules, the stored
record, and a property test over random pod histories with restarts against a plain
reference computation."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.clock import utc
from shared.model import GPUReservation, Kind, ReservationFacts, State
from shared.policy import usage, usagerecord
from shared.policy.usage import Open, Record, Run, Window

T0 = utc(2026, 3, 2, 10)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


WIN = Window(at(0), at(60), 4)


def facts(**kw: object) -> ReservationFacts:
    base = ReservationFacts(
        id=7,
        owner="alice",
        gpu_class="h100",
        gpu_class_name="H100",
        gpu_count=4,
        kind=Kind.BOOKING,
        start=at(0),
        end=at(60),
        state=State.ACTIVE,
        updated_at=at(-100),
    )
    return replace(base, **kw)  # type: ignore[arg-type]


# --- edge rules -----------------------------------------------------------------------


def test_full_use_counts_the_whole_window() -> None:
    rec = usage.advance(Record(), WIN, [Run("a", 4, at(0))], at(0))
    fig = usage.figures(rec, WIN, at(60))
    assert (fig.booked, fig.used, fig.idle) == (4 * 3600, 4 * 3600, 0)
    assert fig.to_first_use == 0


def test_pending_time_is_not_used() -> None:
    rec = usage.advance(Record(), WIN, [Run("a", 2, None)], at(10))
    assert usage.figures(rec, WIN, at(10)).used == 0
    rec = usage.advance(rec, WIN, [Run("a", 2, at(20))], at(20))
    assert usage.figures(rec, WIN, at(30)).used == 2 * 600
    assert usage.figures(rec, WIN, at(30)).to_first_use == 20 * 60


def test_chained_pod_running_before_the_window_counts_only_inside_it() -> None:
    rec = usage.advance(Record(), WIN, [Run("a", 1, at(-30))], at(-30))
    assert rec.first_start is None  # it has not run inside this window yet
    assert usage.figures(rec, WIN, at(-1)).used == 0
    rec = usage.advance(rec, WIN, [Run("a", 1, at(-30))], at(5))
    assert usage.figures(rec, WIN, at(5)).used == 300
    assert rec.first_start == at(0)


def test_pod_past_the_end_is_not_counted_past_it() -> None:
    rec = usage.advance(Record(), WIN, [Run("a", 2, at(30))], at(30))
    assert usage.figures(rec, WIN, at(90)).used == 2 * 1800
    rec = usage.advance(rec, WIN, [Run("a", 2, at(30), at(95))], at(95))
    assert usage.figures(rec, WIN, at(100)).used == 2 * 1800


def test_preempted_pod_counts_until_it_stopped() -> None:
    rec = usage.advance(Record(), WIN, [Run("a", 4, at(0))], at(0))
    rec = usage.advance(rec, WIN, [Run("a", 4, at(0), at(15))], at(16))
    assert usage.figures(rec, WIN, at(60)).used == 4 * 900
    assert usage.figures(rec, WIN, at(60)).idle == 4 * 2700


def test_relinked_pod_counts_from_its_admission_here() -> None:
    rec = usage.advance(Record(), WIN, [Run("a", 1, at(-5), admitted=at(10))], at(10))
    assert usage.figures(rec, WIN, at(20)).used == 600


def test_a_finished_pod_seen_again_is_not_counted_twice() -> None:
    runs = [Run("a", 1, at(0), at(10))]
    rec = usage.advance(Record(), WIN, runs, at(11))
    again = usage.advance(rec, WIN, runs, at(20))
    assert again.closed == rec.closed == 600
    gone = usage.advance(again, WIN, [], at(30))
    assert gone.folded == ()
    assert gone.closed == 600


def test_a_pod_gone_while_nobody_watched_closes_at_the_last_record() -> None:
    rec = usage.advance(Record(), WIN, [Run("a", 1, at(0))], at(20))
    later = usage.advance(rec, WIN, [], at(40))
    assert later.closed == 20 * 60
    assert later.open == ()


def test_peak_and_current() -> None:
    rec = usage.advance(Record(), WIN, [Run("a", 1, at(0)), Run("b", 2, at(1))], at(2))
    rec = usage.advance(rec, WIN, [Run("a", 1, at(0), at(3)), Run("b", 2, at(1))], at(3))
    fig = usage.figures(rec, WIN, at(4))
    assert (fig.peak, fig.current) == (3, 2)
    assert usage.figures(rec, WIN, at(61)).current == 0


def test_cancelled_no_show_is_booked_until_its_cancel() -> None:
    record = {"declaredAt": "2026-03-02T10:20:00Z", "cancelledAt": "2026-03-02T10:21:00Z"}
    res = GPUReservation(facts(state=State.CANCELLED), status_extra={"noShow": record})
    win = usage.window_of(res)
    assert win.stop == at(21)
    assert usage.no_show(res)
    fig = usage.figures(usage.advance(Record(), win, [], at(60)), win, at(60))
    assert (fig.booked, fig.used, fig.idle) == (4 * 21 * 60, 0, 4 * 21 * 60)


def test_cancelled_by_the_user_stops_at_its_update() -> None:
    res = GPUReservation(facts(state=State.CANCELLED, updated_at=at(30)))
    assert usage.window_of(res).stop == at(30)
    early = GPUReservation(facts(state=State.CANCELLED, updated_at=at(-30)))
    assert usage.window_of(early).stop == at(0)  # cancelled before it opened: nothing booked
    assert not usage.no_show(res)


# --- the stored record ------------------------------------------------------------------


def test_record_round_trips() -> None:
    rec = usage.advance(Record(), WIN, [Run("a", 1, at(0)), Run("b", 2, at(1), at(5))], at(6))
    status = usagerecord.record_to_status(rec, WIN)
    assert status["usedGpuSeconds"] == 360 + 2 * 240
    assert status["bookedGpuSeconds"] == 4 * 360
    assert usagerecord.record_from_status({"usage": status}) == rec
    assert usagerecord.record_from_status({}) == Record()


@pytest.mark.parametrize(
    "raw",
    [
        "text",
        {"open": "x"},
        {"open": [1]},
        {"open": [{"uid": "", "gpus": 1, "since": "2026-03-02T10:00:00Z"}]},
        {"open": [{"uid": "a", "gpus": -1, "since": "2026-03-02T10:00:00Z"}]},
        {"open": [{"uid": "a", "gpus": True, "since": "2026-03-02T10:00:00Z"}]},
        {"open": [{"uid": "a", "gpus": 1, "since": "yesterday"}]},
        {"folded": [3]},
        {"folded": ["a"] * (usage.MAX_ENTRIES + 1)},
        {"closedGpuSeconds": 1.5},
        {"closedGpuSeconds": -1},
        {"peakGpus": "2"},
        {"closedByHour": [1, -2]},
        {"closedByHour": "x"},
        {"asOf": 5},
        {"firstPodStart": "soon"},
    ],
)
def test_malformed_records_are_refused(raw: object) -> None:
    with pytest.raises(ValueError, match=r"status\.usage"):
        usagerecord.record_from_status({"usage": raw})


def test_unchanged_ignores_as_of() -> None:
    a = Record(as_of=at(1), open=(Open("a", 1, at(0)),))
    assert usage.unchanged(a, replace(a, as_of=at(5)))
    assert not usage.unchanged(a, replace(a, closed=1))


# --- property: random histories, passes and restarts ----------------------------------


@dataclass(frozen=True)
class Pod:
    uid: str
    gpus: int
    created: int  # minute offsets from T0
    started: int | None
    stopped: int | None
    deleted: int | None


def reference(pods: list[Pod], win: Window, now: datetime) -> int:
    """GPU-seconds each pod ran inside the window up to ``now``, plainly."""
    total = 0
    for p in pods:
        if p.started is None or at(p.started) > now:
            continue
        end = now if p.stopped is None else min(at(p.stopped), now)
        if p.deleted is not None:
            end = min(end, at(p.deleted))
        lo, hi = max(at(p.started), win.start), min(end, win.stop)
        total += p.gpus * max(0, int((hi - lo).total_seconds()))
    return total


@st.composite
def pods_strategy(draw: st.DrawFn) -> list[Pod]:
    count = draw(st.integers(0, 6))
    pods = []
    for i in range(count):
        created = draw(st.integers(-40, 90))
        started = draw(st.one_of(st.none(), st.integers(created, created + 20)))
        stopped = None if started is None else draw(st.one_of(st.none(), st.integers(started, 120)))
        after = stopped if stopped is not None else (started if started is not None else created)
        deleted = draw(st.one_of(st.none(), st.integers(after, 130)))
        pods.append(Pod(f"p{i}", draw(st.integers(1, 4)), created, started, stopped, deleted))
    return pods


def visible(p: Pod, minute: int) -> Run | None:
    """The pod as a pass at ``minute`` finds it in the cache (None: absent)."""
    if minute < p.created or (p.deleted is not None and minute >= p.deleted):
        return None
    started = at(p.started) if p.started is not None and p.started <= minute else None
    stopped = at(p.stopped) if p.stopped is not None and p.stopped <= minute else None
    return Run(p.uid, p.gpus, started, stopped if started is not None else None)


def simulate(
    pods: list[Pod], passes: list[int], down: set[int], writes: list[bool]
) -> tuple[Record, int]:
    """Passes at ``passes`` (minutes); the process is down at minutes in ``down`` (it
    forgets what it watched and restarts from the stored record). A live process
    sees a deletion as it happens (the watch); a stored write may fail."""
    stored = Record()
    memory: Record | None = None
    gone: dict[str, Run] = {}
    last = passes[0]
    for minute, wrote in zip(passes, writes, strict=True):
        if minute in down:
            memory, gone = None, {}
            last = minute
            continue
        if memory is None:
            memory = stored
        else:
            for p in pods:  # deletions the watch told since the last pass
                if p.deleted is not None and last < p.deleted <= minute:
                    was = visible(p, p.deleted - 1) if p.deleted - 1 >= last else None
                    if was is not None and was.started is not None:
                        gone[p.uid] = replace(was, stopped=was.stopped or at(p.deleted))
        runs = {r.uid: r for p in pods if (r := visible(p, minute)) is not None}
        runs.update({u: r for u, r in gone.items() if u not in runs})
        memory = usage.advance(memory, WIN, runs.values(), at(minute))
        gone = {u: r for u, r in gone.items() if u not in memory.folded}
        if wrote:
            stored = memory
        last = minute
    final = memory if memory is not None else stored
    return final, passes[-1]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pods=pods_strategy(),
    passes=st.lists(st.integers(-45, 140), min_size=1, max_size=25, unique=True).map(sorted),
    data=st.data(),
)
def test_random_histories_with_restarts_never_double_count(
    pods: list[Pod], passes: list[int], data: st.DataObject
) -> None:
    down = set(data.draw(st.lists(st.sampled_from(passes), max_size=4)))
    writes = data.draw(st.lists(st.booleans(), min_size=len(passes), max_size=len(passes)))
    rec, _last = simulate(pods, passes, down, writes)
    now = rec.as_of or at(passes[0])  # a record read back tells its figures as of its pass
    assert usage.figures(rec, WIN, now).used <= reference(pods, WIN, now)
    assert sum(usage.used_by_hour(rec, WIN, now)) == usage.figures(rec, WIN, now).used


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods=pods_strategy(), data=st.data())
def test_restarts_give_the_reference_when_nothing_was_missed(
    pods: list[Pod], data: st.DataObject
) -> None:
    """Every minute a pass; the process is down at some minutes, but no pod is deleted
    while it is down and every write lands: then the figures are exactly the
    reference, restarts or not."""
    passes = list(range(-45, 141))
    deletions = {p.deleted for p in pods if p.deleted is not None}
    unseen = deletions | {d - 1 for d in deletions}
    down = set(data.draw(st.lists(st.sampled_from(passes), max_size=20))) - unseen
    rec, last = simulate(pods, passes, down, [True] * len(passes))
    for minute in (last, last + 30):
        used = usage.figures(rec, WIN, at(minute)).used
        assert used == reference(pods, WIN, at(minute))
        fast = usage.figures(rec, WIN, at(minute), usage.form_of(rec, WIN))
        assert fast == usage.figures(rec, WIN, at(minute))
        assert sum(usage.used_by_hour(rec, WIN, at(minute))) == used


def test_restarting_from_the_stored_record_gives_the_same_figures() -> None:
    pods = [Run("a", 2, at(-10)), Run("b", 1, at(5), at(25)), Run("c", 1, None)]
    rec = usage.advance(Record(), WIN, pods, at(30))
    restarted = usagerecord.record_from_status({"usage": usagerecord.record_to_status(rec, WIN)})
    again = usage.advance(restarted, WIN, pods, at(45))
    straight = usage.advance(rec, WIN, pods, at(45))
    assert again == straight
    assert usage.figures(again, WIN, at(45)).used == 2 * 45 * 60 + 20 * 60


# --- a pod's run from its status ------------------------------------------------------


def test_run_times_from_container_states() -> None:
    status = {
        "phase": "Succeeded",
        "startTime": "2026-03-02T09:59:00Z",
        "containerStatuses": [
            {
                "state": {
                    "terminated": {
                        "startedAt": "2026-03-02T10:01:00Z",
                        "finishedAt": "2026-03-02T10:30:00Z",
                    }
                }
            },
            {
                "state": {
                    "terminated": {
                        "startedAt": "2026-03-02T10:00:30Z",
                        "finishedAt": "2026-03-02T10:20:00Z",
                    }
                }
            },
        ],
    }
    assert usage.run_times(status) == ("2026-03-02T10:00:30Z", "2026-03-02T10:30:00Z")


def test_run_times_of_a_running_pod_fall_back_to_start_time() -> None:
    status = {"phase": "Running", "startTime": "2026-03-02T10:00:00Z", "containerStatuses": []}
    assert usage.run_times(status) == ("2026-03-02T10:00:00Z", "")


@pytest.mark.parametrize(
    "status",
    [
        {},
        {"phase": "Pending", "startTime": "2026-03-02T10:00:00Z"},
        {"phase": "Running", "startTime": "never"},
        {"phase": "Running", "containerStatuses": "x"},
        {"phase": "Running", "containerStatuses": [1, {"state": 2}, {"state": {"running": 3}}]},
        {"phase": "Running", "containerStatuses": [{"state": {"running": {"startedAt": 5}}}]},
    ],
)
def test_run_times_of_malformed_or_pending_statuses_are_empty(status: dict[str, object]) -> None:
    assert usage.run_times(status) == ("", "")


def test_a_finished_time_counts_only_once_the_pod_finished() -> None:
    status = {
        "phase": "Running",
        "containerStatuses": [
            {"state": {"running": {"startedAt": "2026-03-02T10:00:00Z"}}},
            {
                "state": {
                    "terminated": {
                        "startedAt": "2026-03-02T10:00:00Z",
                        "finishedAt": "2026-03-02T10:05:00Z",
                    }
                }
            },
        ],
    }
    assert usage.run_times(status) == ("2026-03-02T10:00:00Z", "")


def test_used_by_hour_splits_runs_at_the_hour() -> None:
    win = Window(at(0), at(180), 2)
    rec = usage.advance(Record(), win, [Run("a", 2, at(30), at(90))], at(100))
    rec = usage.advance(rec, win, [Run("b", 1, at(150))], at(150))
    assert usage.used_by_hour(rec, win, at(170)) == [2 * 1800, 2 * 1800, 1200]
