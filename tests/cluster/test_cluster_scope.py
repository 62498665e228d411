"""The cluster emulation confined to one namespace (``ctx.handles[SCOPE]``): its pods are
scheduled and run, a pod of any other namespace is left Pending, untouched."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from shared.gateway import Gateway
from shared.resources import NODES, PODS
from tests.cluster.builders import node
from tests.cluster.running import cluster_gateway

pytestmark = [
    pytest.mark.anyio,
    # see tests/admission/test_emulator.py: the emulator leaks a socket per error answer
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SERVED, OTHER = "system", "users"


def scoped(tmp_path: Path) -> contextlib.AbstractAsyncContextManager[Gateway]:
    return cluster_gateway(tmp_path, SERVED, OTHER, scope=SERVED)


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


async def test_only_the_served_namespace_is_scheduled(tmp_path: Path) -> None:
    async with scoped(tmp_path) as gateway:
        await gateway.create(NODES, node("cpu-1", gpus=0))
        # The other namespace's pod first: a scheduler that saw it would bind it in the
        # same pass as the served one, or an earlier one.
        await gateway.create(PODS, pod("ignored"), OTHER)
        await gateway.create(PODS, pod("served"), SERVED)
        deadline = asyncio.get_running_loop().time() + 30
        while not (await gateway.get(PODS, "served", SERVED))["spec"].get("nodeName"):
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        ignored = await gateway.get(PODS, "ignored", OTHER)
        assert not ignored["spec"].get("nodeName")
        assert not (ignored.get("status") or {}).get("conditions")
        assert (ignored.get("status") or {}).get("phase") == "Pending"
