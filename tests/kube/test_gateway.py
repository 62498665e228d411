"""Our ``shared.gateway.Gateway`` works unmodified against the emulator."""

from __future__ import annotations

import asyncio
from pathlib import Path

import kubernetes.client
import pytest

from shared import errors
from shared.gateway import Gateway
from shared.resources import CONFIGMAPS, PODS
from tests.kube.conftest import Running, pod


def _gateway(kube: Running, tmp_path: Path) -> Gateway:
    """A gateway on the plain-HTTP listener (TLS is exercised by the kubectl tests)."""
    cfg = kubernetes.client.Configuration()
    cfg.host = kube.server.url
    cfg.api_key = {"authorization": f"Bearer {kube.server.admin_token}"}
    cfg.proxy = None
    return Gateway(cfg)


def test_gateway_verbs_and_error_mapping(kube: Running, ns: str, tmp_path: Path) -> None:
    """get/list_all/create/replace/patch/delete and NotFound/Conflict/Invalid mapping."""

    async def scenario() -> None:
        gw = _gateway(kube, tmp_path)
        try:
            created = (
                await gw.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"a": "1"}}, ns)
            ).body
            for i in range(3):
                await gw.create(CONFIGMAPS, {"metadata": {"name": f"x{i}"}}, ns)
            listed = await gw.list_all(CONFIGMAPS, ns)
            assert len(listed.items) == 4
            assert listed.resource_version
            fetched = await gw.get(CONFIGMAPS, "c", ns)
            fetched["data"]["a"] = "2"
            await gw.replace(CONFIGMAPS, "c", fetched, ns)
            with pytest.raises(errors.Conflict):
                await gw.replace(CONFIGMAPS, "c", created, ns)
            patched = await gw.patch(
                CONFIGMAPS, "c", [{"op": "add", "path": "/data/b", "value": "3"}], ns
            )
            assert patched["data"] == {"a": "2", "b": "3"}
            with pytest.raises(errors.Invalid):
                await gw.patch(
                    CONFIGMAPS, "c", [{"op": "test", "path": "/data/a", "value": "9"}], ns
                )
            await gw.create(PODS, pod(), ns)
            with pytest.raises(errors.Invalid):
                await gw.patch(
                    PODS,
                    "p",
                    {"spec": {"schedulingGates": [{"name": "example.com/g"}]}},
                    ns,
                    "strategic",
                )
            await gw.delete(CONFIGMAPS, "c", ns)
            with pytest.raises(errors.NotFound):
                await gw.get(CONFIGMAPS, "c", ns)
        finally:
            gw.close()

    asyncio.run(scenario())


def test_gateway_watch_and_gone(kube: Running, ns: str, tmp_path: Path) -> None:
    """Gateway.watch streams events from an RV and raises Gone for a compacted one."""

    async def scenario() -> None:
        gw = _gateway(kube, tmp_path)
        try:
            start = (await gw.list_all(CONFIGMAPS, ns)).resource_version
            await gw.create(CONFIGMAPS, {"metadata": {"name": "w"}}, ns)
            seen = [e async for e in gw.watch(CONFIGMAPS, start, ns, timeout_s=1)]
            assert [(e.type, e.object["metadata"]["name"]) for e in seen] == [("ADDED", "w")]
            kube.call(kube.server.compact_history)
            with pytest.raises(errors.Gone):
                async for _ in gw.watch(CONFIGMAPS, start, ns, timeout_s=1):
                    pass
        finally:
            gw.close()

    asyncio.run(scenario())
