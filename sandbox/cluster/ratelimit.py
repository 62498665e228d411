"""The client-side rate limit of a kube-controller-manager controller.

client-go limits each client with a token bucket (``flowcontrol.NewTokenBucketRateLimiter``):
``burst`` requests at once, then ``qps`` a second. kube-controller-manager's defaults
are ``--kube-api-qps=20`` and ``--kube-api-burst=30``, and each controller builds its
own client from that configuration, so each controller has its own bucket. The bucket
runs on the monotonic wall clock, as client-go's does (not the sandbox clock).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from shared.gateway import Gateway
from shared.resources import Resource

#: kube-controller-manager's ``--kube-api-qps`` and ``--kube-api-burst`` defaults.
QPS = 20.0
BURST = 30


class TokenBucket:
    """``burst`` tokens, refilled at ``qps`` a second; ``take`` waits for one."""

    def __init__(
        self, qps: float = QPS, burst: int = BURST, now: Callable[[], float] = time.monotonic
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be positive and burst at least 1")
        self.qps, self.burst = qps, burst
        self._now = now
        self._tokens = float(burst)
        self._at = now()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._now()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.qps)
        self._at = now

    @property
    def tokens(self) -> float:
        """Tokens free now."""
        self._refill()
        return self._tokens

    def wait_s(self) -> float:
        """Seconds until a token is free (0 when one is)."""
        self._refill()
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.qps

    async def take(self) -> None:
        """Wait for a token and take it (callers are served in order)."""
        async with self._lock:
            wait = self.wait_s()
            if wait > 0:
                await asyncio.sleep(wait)
                self._refill()
            self._tokens -= 1


class LimitedClient:
    """A gateway behind one controller's bucket: every request takes a token first."""

    def __init__(self, gateway: Gateway, bucket: TokenBucket | None = None) -> None:
        self.gateway = gateway
        self.bucket = bucket or TokenBucket()

    async def create(self, res: Resource, body: dict[str, Any], namespace: str) -> dict[str, Any]:
        await self.bucket.take()
        return (await self.gateway.create(res, body, namespace)).body

    async def get(self, res: Resource, name: str, namespace: str | None) -> dict[str, Any]:
        await self.bucket.take()
        return await self.gateway.get(res, name, namespace)

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: dict[str, Any],
        namespace: str | None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """A merge patch."""
        await self.bucket.take()
        return await self.gateway.patch(res, name, patch, namespace, "merge", subresource)

    async def delete(self, res: Resource, obj: dict[str, Any]) -> None:
        """Delete ``obj`` (uid precondition), its dependents in the background."""
        meta = obj["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
            "preconditions": {"uid": meta["uid"]},
        }
        await self.bucket.take()
        await self.gateway.request(
            "DELETE", res.path(meta.get("namespace"), meta["name"]), None, body
        )
