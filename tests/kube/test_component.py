"""Seeding from a scenario and the sandbox component."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sandbox.kube.component import KubeComponent
from sandbox.kube.seed import node_object, parse_taint
from sandbox.runner import SandboxContext
from sandbox.scenario import load_scenario
from shared import vocab


def test_taint_strings() -> None:
    """Scenario taints are ``key=value:Effect`` or ``key:Effect``; anything else is refused."""
    assert parse_taint(f"{vocab.GPU_CLASS_LABEL}=h100:{vocab.TAINT_EFFECT_NO_SCHEDULE}", "t") == {
        "key": vocab.GPU_CLASS_LABEL,
        "value": "h100",
        "effect": vocab.TAINT_EFFECT_NO_SCHEDULE,
    }
    with pytest.raises(ValueError, match=r"nodes\[0\].taints\[0\]"):
        node_object({"name": "n", "taints": ["no-effect"]}, 0)


def test_unknown_node_key_is_refused() -> None:
    """A misspelt node key names itself and the known keys."""
    with pytest.raises(ValueError, match="unknown key"):
        node_object({"name": "n", "gpus": 4}, 0)


def test_component_seeds_the_default_scenario(tmp_path: Path) -> None:
    """The default scenario: 6 GPU nodes, the user and controller namespaces; a bad effect fails."""

    async def scenario() -> None:
        ctx = SandboxContext(state_dir=tmp_path, scenario=load_scenario())
        component = KubeComponent()
        await component.start(ctx)
        try:
            headers = {"Authorization": f"Bearer {ctx.handles['kube'].admin_token}"}
            async with httpx.AsyncClient(base_url=ctx.endpoints["kube"], headers=headers) as client:
                nodes = (await client.get("/api/v1/nodes")).json()["items"]
                namespaces = (await client.get("/api/v1/namespaces")).json()["items"]
            assert len(nodes) == 6
            reserved = [
                n
                for n in nodes
                if any(t["key"] == vocab.RESERVATION_TAINT_KEY for t in n["spec"].get("taints", []))
            ]
            assert len(reserved) == 5
            names = {n["metadata"]["name"] for n in namespaces}
            assert {"alice", "bob", "carol", "dave", vocab.PRODUCT_NAME} <= names
            assert ctx.kubeconfig is not None
            assert "certificate-authority-data" in ctx.kubeconfig
        finally:
            await component.stop()
        bad = SandboxContext(
            state_dir=tmp_path, scenario={"nodes": [{"name": "x", "taints": ["a=b:Sometimes"]}]}
        )
        with pytest.raises(ValueError, match="Unsupported value"):
            await KubeComponent().start(bad)

    asyncio.run(scenario())


def test_sandbox_up_prints_ready_and_writes_state(tmp_path: Path) -> None:
    """``python -m sandbox up --components kube`` prints ``sandbox ready`` and writes the state "
    "files."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandbox",
            "up",
            "--components",
            "kube",
            "--state-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "sandbox ready"
        endpoints = json.loads((tmp_path / "endpoints.json").read_text())
        assert endpoints["kube"].startswith("http://127.0.0.1:")
        assert (tmp_path / "kubeconfig").exists()
    finally:
        process.terminate()
        code = process.wait(timeout=15)
        if process.stdout is not None:
            process.stdout.close()
    assert code == 0
