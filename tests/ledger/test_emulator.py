"""The ledger protocol against the kube emulator over TLS, through the webhook's gateway
(``LoopGateway``): the chart's CRD, the emulator's own ``test`` → 422, generation and
resourceVersion rules — not the unit-test fake's."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared import ledger, model
from shared.gateway import load_configuration
from shared.gateway.loop import LoopGateway
from shared.resources import GPU_RESERVATIONS
from tests.kube.conftest import Running, install_crd
from tests.ledger.fakes import NOW, facts

CRD = Path(__file__).parents[2] / "charts/gpu-reservation/crds/gpureservations.galends.io.yaml"
FAR = 1e12


@pytest.fixture(scope="module")
def kube() -> Iterator[Running]:
    running = Running()
    install_crd(running, yaml.safe_load(CRD.read_text()))
    yield running
    running.close()


Body = Callable[[LoopGateway, str], Awaitable[None]]


def run(kube: Running, tmp_path: Path, body: Body) -> None:
    """``body(gateway, namespace)`` with a fresh namespace holding ``res-1`` (8 GPUs, no
    status yet: as the mirror creates it)."""
    path = tmp_path / "kubeconfig"
    path.write_text(kube.server.kubeconfig())
    ns = f"t-{tmp_path.name[-8:].lower().replace('_', '-')}"
    with kube.client() as client:
        assert client.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).is_success

    async def scenario() -> None:
        gw = LoopGateway(load_configuration(str(path)))
        try:
            obj = model.to_object(model.GPUReservation(facts(gpus=8)), ns, NOW)
            await gw.create(GPU_RESERVATIONS, obj, ns)
            await body(gw, ns)
        finally:
            gw.close()

    asyncio.run(scenario())


async def claim(gw: LoopGateway, ns: str, gpus: int, **kw: Any) -> ledger.ClaimResult:
    return await ledger.claim(gw, ns, "res-1", gpus, pod="p", now=NOW, deadline=FAR, **kw)


async def amend(gw: LoopGateway, ns: str, change: Any) -> model.GPUReservation | None:
    return await ledger.amend(gw, ns, "res-1", change, now=NOW, deadline=FAR)


def test_claims_and_drops_do_not_race_but_adds_and_spec_changes_do(
    kube: Running, tmp_path: Path
) -> None:
    async def body(gw: LoopGateway, ns: str) -> None:
        first = await claim(gw, ns, 2)  # no status yet: the resourceVersion, a first token
        assert first.admitted
        stored = await gw.get(GPU_RESERVATIONS, "res-1", ns)
        assert model.token_of(stored["status"])
        assert stored["metadata"]["generation"] == 1
        second = await claim(gw, ns, 2)
        assert second.admitted

        # A claim decided before a drop lands on the ledger after it: no re-read.
        cached = copy.deepcopy(await gw.get(GPU_RESERVATIONS, "res-1", ns))
        assert await amend(gw, ns, lambda r: ledger.drop(r, {first.claim or ""}))
        landed = await claim(gw, ns, 4, cached=cached)
        assert (landed.reason, landed.conflicts) == ("admitted", 0)

        # A drop decided before a claim landed: the claim appended, the drop still lands.
        before = await gw.get(GPU_RESERVATIONS, "res-1", ns)
        raw = copy.deepcopy(before)
        current = model.from_object(raw)
        assert (await claim(gw, ns, 1)).admitted
        ops = ledger.shrink_ops(raw, current, ledger.drop(current, {second.claim or ""}), NOW)
        assert ops is not None
        await gw.patch(GPU_RESERVATIONS, "res-1", ops, ns, "json", subresource="status")
        after = model.from_object(await gw.get(GPU_RESERVATIONS, "res-1", ns))
        assert [h.gpus for h in after.holds] == [4, 1]

        # A spec change (gpuCount 8 → 5) bumps the generation: a claim decided before it
        # meets a 422 and re-decides on the new budget.
        cached = copy.deepcopy(await gw.get(GPU_RESERVATIONS, "res-1", ns))
        spec = await gw.get(GPU_RESERVATIONS, "res-1", ns)
        spec["spec"]["gpuCount"] = 5
        await gw.replace(GPU_RESERVATIONS, "res-1", spec, ns)
        refused = await claim(gw, ns, 2, cached=cached)
        assert (refused.reason, refused.conflicts) == ("full", 1)

        # A write that adds holds sets a new token: a claim decided before it re-decides.
        cached = copy.deepcopy(await gw.get(GPU_RESERVATIONS, "res-1", ns))
        hold = model.Hold("orphan", 0, NOW, "p-o", "u-o")
        assert await amend(gw, ns, lambda r: ledger.add_hold(r, hold))
        fits = await claim(gw, ns, 0, cached=cached)
        assert (fits.reason, fits.conflicts) == ("admitted", 1)
        final = model.from_object(await gw.get(GPU_RESERVATIONS, "res-1", ns))
        assert ledger.used(final) == 5

    run(kube, tmp_path, body)
