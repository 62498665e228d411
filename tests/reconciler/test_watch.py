"""The watched cache: LIST, WATCH resumed by resourceVersion, 410 → relist, resync."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from reconciler.base.caches import project_reservation, same_reservation
from reconciler.base.pods import project_pod
from shared import model, vocab
from shared.clock import SystemClock, utc
from shared.errors import Gone
from shared.gateway import ListResult, WatchEvent
from shared.policy.matching import MatchRules
from shared.resources import GPU_RESERVATIONS, PODS
from shared.watch import Watched


def obj(name: str, rv: str, gpus: int = 1, label: bool = True) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "alice",
            "uid": f"u-{name}",
            "resourceVersion": rv,
            "labels": {vocab.GPU_CLASS_LABEL: "a100"} if label else {},
        },
        "spec": {"containers": [{"resources": {"requests": {vocab.GPU_RESOURCE: str(gpus)}}}]},
        "status": {"phase": "Pending"},
    }


class Script:
    """Lists come from ``lists``; each watch call plays the next entry of ``watches``."""

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[Any]) -> None:
        self.lists, self.watches = lists, watches
        self.watched_from: list[str] = []
        self.done = asyncio.Event()

    async def list_all(self, res, namespace=None, label_selector=None, field_selector=None):
        items = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
        return ListResult(items, str(10 * len(self.watched_from) + 10))

    async def watch(
        self, res, resource_version, namespace=None, label_selector=None, timeout_s=270, known=None
    ) -> AsyncIterator[WatchEvent]:
        self.watched_from.append(resource_version)
        if not self.watches:
            self.done.set()
            await asyncio.Event().wait()
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item


def cache(script: Script) -> Watched[Any]:
    return Watched(
        script, PODS, lambda o: project_pod(o, MatchRules()), clock=SystemClock(), resync_s=3600
    )


def test_list_then_watch_resumes_from_the_last_version_and_tells_listeners() -> None:
    async def scenario() -> None:
        script = Script(
            [[obj("a", "1"), obj("plain", "2", gpus=0, label=False)]],
            [
                [
                    WatchEvent("ADDED", obj("b", "11")),
                    WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "15"}}),
                ],
                [WatchEvent("DELETED", obj("a", "16"))],
            ],
        )
        watched = cache(script)
        heard: list[tuple[str, bool, bool]] = []
        watched.listeners.append(lambda k, old, new: heard.append((k, old is None, new is None)))
        task = asyncio.create_task(watched.run())
        await asyncio.wait_for(script.done.wait(), 30)
        assert script.watched_from == ["10", "15", "16"]
        assert list(watched.items) == ["alice/b"]  # a deleted; the non-GPU pod never cached
        assert heard == [
            ("alice/a", True, False),
            ("alice/b", True, False),
            ("alice/a", False, True),
        ]
        task.cancel()

    asyncio.run(scenario())


def test_gone_relists_and_the_diff_reports_deletes_missed_meanwhile() -> None:
    async def scenario() -> None:
        script = Script(
            [[obj("a", "1"), obj("b", "2")], [obj("b", "2"), obj("c", "3")]],
            [[Gone(410, "too old", "Expired")]],
        )
        watched = cache(script)
        heard: list[tuple[str, bool]] = []
        watched.listeners.append(lambda k, old, new: heard.append((k, new is None)))
        task = asyncio.create_task(watched.run())
        await asyncio.wait_for(script.done.wait(), 30)
        assert watched.relists == 2
        assert sorted(watched.items) == ["alice/b", "alice/c"]
        assert ("alice/a", True) in heard
        assert ("alice/c", False) in heard
        task.cancel()

    asyncio.run(scenario())


def test_projections_are_slim() -> None:
    view = project_pod(obj("a", "1", gpus=2), MatchRules())
    assert view is not None
    assert (view.key, view.gpus, view.tolerated, view.admitted) == ("alice/a", 2, False, False)
    assert project_pod(obj("cpu", "1", gpus=0, label=False), MatchRules()) is None


def test_an_event_at_or_below_the_cached_version_is_not_projected_again() -> None:
    """With ``version_of``: the watch's echo of a write already upserted (same version)
    and older events are skipped without projecting; newer ones and deletes apply; an
    upsert can hand its own projection in. Versions that are not integers: only an equal
    one is skipped."""
    projected: list[str] = []

    def project(o: dict[str, Any]) -> tuple[str, str]:
        projected.append(o["metadata"]["resourceVersion"])
        return o["metadata"]["name"], o["metadata"]["resourceVersion"]

    watched: Watched[tuple[str, str]] = Watched(
        Script([[]], []),
        PODS,
        project,
        clock=SystemClock(),
        version_of=lambda view: view[1],
    )
    watched.upsert(obj("a", "7"), ("a", "7"))
    assert projected == []
    assert watched.apply(WatchEvent("MODIFIED", obj("a", "7"))) == "7"
    watched.apply(WatchEvent("MODIFIED", obj("a", "5")))
    assert projected == []
    assert watched.items["alice/a"] == ("a", "7")
    watched.apply(WatchEvent("MODIFIED", obj("a", "9")))
    assert projected == ["9"]
    assert watched.items["alice/a"] == ("a", "9")
    watched.apply(WatchEvent("DELETED", obj("a", "8")))
    assert "alice/a" not in watched.items
    watched.upsert(obj("b", "x1"))
    watched.apply(WatchEvent("MODIFIED", obj("b", "x1")))
    watched.apply(WatchEvent("MODIFIED", obj("b", "x0")))
    assert projected == ["9", "x1", "x0"]
    assert watched.items["alice/b"] == ("b", "x0")


class OneList:
    """A gateway whose LIST answers ``items``."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    async def list_all(self, res: Any, namespace: Any = None) -> ListResult:
        return ListResult(self.items, "9")


def test_a_reservation_whose_version_alone_moved_is_kept_without_telling_listeners() -> None:
    """A status write of the derived phase/usedGpus only (e.g. the startup sync's
    deferred status) wakes no loop; a ledger or spec change still does."""
    start = utc(2026, 1, 5, 9)
    facts = model.ReservationFacts(
        1, "alice", "a100", "A100", 2, model.Kind.BOOKING, start, start + timedelta(hours=3),
        model.State.ACTIVE, start,
    )  # fmt: skip

    def raw(rv: str, holds: tuple[model.Hold, ...] = (), phase_at: int = 0) -> dict[str, Any]:
        obj = model.to_object(model.GPUReservation(facts, holds, rv), "ns", start)
        if phase_at == 0:
            obj.pop("status")  # as created: no status yet
        return obj

    async def scenario() -> None:
        gateway = OneList([raw("1")])
        cache = Watched(
            gateway,  # type: ignore[arg-type]
            GPU_RESERVATIONS,
            project_reservation,
            clock=SystemClock(),
            same=same_reservation,
        )
        heard: list[str] = []
        cache.listeners.append(
            lambda key, old, new: heard.append(new.resource_version if new else "")
        )
        await cache.relist()
        assert heard == ["1"]
        cache.apply(WatchEvent("MODIFIED", raw("2", phase_at=1)))  # phase and usedGpus only
        gateway.items = [raw("3", phase_at=1)]
        await cache.relist()
        assert heard == ["1"]
        assert cache.items["ns/res-1"].resource_version == "3"  # the newest is kept
        cache.apply(WatchEvent("MODIFIED", raw("4", (model.Hold("c", 1, start, "p", None),), 1)))
        assert heard == ["1", "4"]

    asyncio.run(scenario())
