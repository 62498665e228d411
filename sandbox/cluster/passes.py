"""The pod and node caches the scheduler and the kubelet read, and the loop both run.

A cache is ``shared.watch.Watched`` over whole objects (LIST, then WATCH resumed by
resourceVersion, relist on 410 Gone, a pause on the sandbox clock after any other
error): the project's one watch mechanism. The scheduler and the kubelet share one
cache per resource, as their real counterparts share informers. ``Passes`` is the loop
both run: a pass after every change of pods or nodes, and at least every ``RESYNC_S``
wall seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from shared.clock import Clock
from shared.errors import KubeError
from shared.gateway import Gateway
from shared.resources import Resource
from shared.watch import Watched

log = logging.getLogger(__name__)

Cache = Watched[dict[str, Any]]

#: Sandbox seconds between attempts after a failed list or watch.
RETRY_S = 0.5
#: Wall seconds between passes when nothing changes.
RESYNC_S = 5.0


def cache(gateway: Gateway, res: Resource, clock: Clock, namespace: str | None = None) -> Cache:
    """Every object of ``res`` by ``namespace/name`` (``name`` when cluster-scoped); of
    one ``namespace`` only when given (a namespaced resource).

    No periodic relist: when the server ends a watch, the next one resumes from the
    last resourceVersion seen.
    """
    return Watched(
        gateway,
        res,
        _whole,
        clock=clock,
        namespace=namespace,
        resync_s=None,
        retry_s=RETRY_S,
    )


def _whole(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


def snapshot(objects: Cache) -> list[dict[str, Any]]:
    """The cached objects (shared dicts: read, do not modify)."""
    return list(objects.items.values())


class Woken:
    """Runs ``run_once`` after every change of its caches and every ``RESYNC_S``."""

    #: Names the loop in its log lines.
    what = "pass"

    def __init__(self, *caches: Cache) -> None:
        self._caches = caches
        self._wake = asyncio.Event()
        for cache in caches:
            cache.listeners.append(self._changed)

    def _changed(self, key: str, old: Any, new: Any) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Pass until cancelled, once every cache is filled."""
        for cache in self._caches:
            await cache.synced.wait()
        while True:
            self._wake.clear()
            try:
                await self.run_once()
            except KubeError as exc:
                log.warning("%s pass failed: %s", self.what, exc)
            # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a
            # cancellation that arrives as the wake-up does, and the loop then never ends
            # (a benchmark's teardown hung on it).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RESYNC_S):
                    await self._wake.wait()

    async def run_once(self) -> None:
        """One pass over the caches."""
        raise NotImplementedError


class Passes(Woken):
    """A loop over the cached pods and nodes (the scheduler's and the kubelet's)."""

    def __init__(self, gateway: Gateway, clock: Clock, pods: Cache, nodes: Cache) -> None:
        super().__init__(pods, nodes)
        self._gateway = gateway
        self._clock = clock
        self._pods = pods
        self._nodes = nodes
