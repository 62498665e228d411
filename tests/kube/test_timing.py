"""What benchmarks ask of the emulator: its own answer times
(``KubeServer.time_requests``) and a settled garbage collector (``settle_collector``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from sandbox.kube.server import settle_collector
from sandbox.kube.timing import RequestTimes, summary
from tests.kube.conftest import Running


@pytest.fixture(scope="module")
def kube() -> Iterator[Running]:
    running = Running()
    yield running
    running.close()


def test_answers_are_timed_by_method_once_asked_and_watches_are_not(kube: Running) -> None:
    path = "/api/v1/namespaces/alice/configmaps"
    with kube.client() as api:
        assert api.get(path).status_code == 200  # before: not recorded
        times = kube.server.time_requests()
        assert kube.server.time_requests() is times
        assert api.post(path, json={"metadata": {"name": "c"}, "data": {}}).status_code == 201
        assert api.get(f"{path}/c").status_code == 200
        assert api.get(f"{path}/missing").status_code == 404
        watched = api.get(path, params={"watch": "true", "timeoutSeconds": "1"})
        assert watched.status_code == 200
    found = kube.call(lambda: {m: list(t) for m, t in times.by_method.items()})
    assert sorted(found) == ["GET", "POST"]
    assert len(found["GET"]) == 2
    assert len(found["POST"]) == 1
    assert all(0 < t < 30 for t in found["GET"] + found["POST"])
    kube.call(times.clear)
    assert times.by_method == {}


def test_summary_gives_count_mean_and_percentiles_in_milliseconds() -> None:
    assert summary([]) == {"count": 0}
    found = summary([i / 1000 for i in range(1, 101)])
    assert found["count"] == 100
    assert found["mean_ms"] == pytest.approx(50.5)
    assert (found["p50_ms"], found["p99_ms"]) == pytest.approx((51.0, 100.0))
    assert isinstance(RequestTimes().by_method, dict)


def test_settling_the_collector_exempts_what_is_alive_and_collects_what_comes_after() -> None:
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    try:
        kept = Cycle()
        settle_collector()
        assert gc.get_freeze_count() > 0
        assert gc.is_tracked(kept)
        later = Cycle()
        del later
        assert gc.collect() >= 1  # a cycle made afterwards is still collected
    finally:
        gc.unfreeze()
