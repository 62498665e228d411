"""Issue 26, acceptance 1 and 2: the sandbox installs the chart with an operator's values
and runs what it renders.

Each values file of ``tests/chart/values/`` installs in a sandbox of its own (kube,
cluster, app, release: what ``make sandbox`` starts): every pod of the release becomes
Ready, as many as the values ask for, and the README's walk holds — alice's notebook is
admitted at creation, bob's training waits behind the scheduling gate. A broken value
shows what a cluster shows: refused by the chart's schema at install, or — one the
schema cannot see — a crash loop whose reason ``kubectl logs`` gives in the process's
own words. ``kubectl scale`` of the webhook gives three processes, and the API server
spreads admissions over them (each replica's ``requests_total``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.__main__ import main
from sandbox.release_component import SYSTEM_NODE
from sandbox.runner import Sandbox, SandboxContext
from sandbox.scenario import load_scenario
from sandbox.values import read_file
from shared import vocab
from tests.reconciler.test_integration import kubectl_sandbox_marks

pytestmark = kubectl_sandbox_marks(150)
ROOT = Path(__file__).resolve().parents[2]
VALUES = ROOT / "tests" / "chart" / "values"
EXAMPLES = ROOT / "sandbox" / "examples"
NS = vocab.PRODUCT_NAME
UP = ["kube", "cluster", "app", "release"]
#: The chart's default webhook.healthPort (metrics and probes).
HEALTH_PORT = 8080


class Terminal:
    """kubectl with the sandbox's admin kubeconfig."""

    def __init__(self, ctx: SandboxContext) -> None:
        self.ctx = ctx
        self.kubeconfig = ctx.state_dir / "kubeconfig"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        binary = shutil.which("kubectl") or "kubectl"
        return subprocess.run(
            [binary, "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def pods(self, namespace: str = NS) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(
            self.ok("get", "pods", "-n", namespace, "-o", "json")
        )["items"]
        return items

    def until(self, check: Any, within_s: float = 40) -> Any:
        deadline = time.monotonic() + within_s
        while True:
            found = check()
            if found:
                return found
            assert time.monotonic() < deadline, "not within the time"
            time.sleep(0.3)


@contextmanager
def installed(tmp_path: Path, files: list[Path], sets: tuple[str, ...] = ()) -> Iterator[Terminal]:
    """A sandbox as ``make sandbox`` starts it, with ``--values``/``--set``."""
    ctx = SandboxContext(state_dir=tmp_path, scenario=load_scenario())
    ctx.handles["release.user"] = (tuple(read_file(f) for f in files), sets)
    whole = Sandbox(ctx, UP)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(whole.start(), loop).result(120)
        yield Terminal(ctx)
    finally:
        asyncio.run_coroutine_threadsafe(whole.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def component(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"].get("app.kubernetes.io/component", ""))


MATRIX = sorted(p.stem for p in VALUES.glob("*.yaml"))


def test_the_matrix_has_the_issues_files() -> None:
    wanted = {"defaults", "high-availability", "monitoring", "scheduling-gate"}
    assert wanted | {"network-policy", "cert-manager"} <= set(MATRIX)


@pytest.mark.parametrize("case", MATRIX)
def test_each_values_file_installs_runs_ready_and_passes_the_walk(
    case: str, tmp_path: Path
) -> None:
    values = read_file(VALUES / f"{case}.yaml")
    with installed(tmp_path, [VALUES / f"{case}.yaml"]) as term:
        merged = term.ctx.handles["release"].rendered.effective
        want = {
            "webhook": int(merged["webhook"]["replicas"]),
            "reconciler": int(merged["reconciler"]["replicas"]),
        }
        pods = term.pods()
        assert {c: sum(component(p) == c for p in pods) for c in want} == want
        assert all(ready(p) for p in pods), [p["metadata"]["name"] for p in pods]
        assert {p["spec"]["nodeName"] for p in pods} == {SYSTEM_NODE}
        listing = term.ok("get", "pods", "-n", NS)
        assert "RESTARTS" in listing
        assert listing.count("1/1     Running") == sum(want.values())

        # The README's walk: admitted at creation; queued behind the gate.
        created = term.run("create", "-f", str(EXAMPLES / "alice-notebook.yaml"))
        assert created.returncode == 0, created.stderr
        assert "admitted under reservation" in created.stderr
        queued = term.run("create", "-f", str(EXAMPLES / "bob-training.yaml"))
        assert queued.returncode == 0, queued.stderr
        assert "held by a scheduling gate until then" in queued.stderr
        gate = (values.get("matching") or {}).get("podSchedulingGateName")
        bob = json.loads(term.ok("get", "pod", "-n", "bob", "training", "-o", "json"))
        assert bob["spec"]["schedulingGates"] == [{"name": gate or vocab.SANDBOX_SCHEDULING_GATE}]
        if case == "monitoring":
            for kind in ("servicemonitors", "prometheusrules", "configmaps"):
                assert NS in term.ok("get", kind, "-n", NS)


def test_a_value_the_schema_refuses_stops_up_with_helms_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["up", "--state-dir", str(tmp_path), "--set", "webhook.maxBodyBytes=-1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "maxBodyBytes" in err
    assert "want 1,024" in err


def test_a_value_the_process_refuses_crash_loops_and_logs_say_why(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text('webhook: {extraEnv: [{name: WEBHOOK_MAX_BODY_BYTES, value: "-1"}]}\n')
    with installed(tmp_path, [broken]) as term:
        assert any("CrashLoopBackOff" in p for p in term.ctx.handles["release"].problems)

        def crash_looping() -> str | None:
            for line in term.ok("get", "pods", "-n", NS).splitlines():
                if line.startswith(f"{NS}-webhook-") and "CrashLoopBackOff" in line:
                    return line.split()[0]
            return None

        name = term.until(crash_looping)
        logs = term.ok("logs", "-n", NS, name, "--previous")
        assert "WEBHOOK_MAX_BODY_BYTES" in logs
        pod = json.loads(term.ok("get", "pod", "-n", NS, name, "-o", "json"))
        (status,) = pod["status"]["containerStatuses"]
        assert status["restartCount"] >= 1
        assert status["lastState"]["terminated"]["exitCode"] != 0
        # The chart's FallbackToLogsOnError: kubectl describe shows why it crashed.
        assert "WEBHOOK_MAX_BODY_BYTES" in status["lastState"]["terminated"]["message"]
        assert "WEBHOOK_MAX_BODY_BYTES" in term.ok("describe", "pod", "-n", NS, name)
        # the reconciler is not affected
        assert all(ready(p) for p in term.pods() if component(p) == "reconciler")


def test_kubectl_scale_gives_three_webhook_processes(tmp_path: Path) -> None:
    with installed(tmp_path, [VALUES / "defaults.yaml"]) as term:
        term.ok("scale", f"deploy/{NS}-webhook", "-n", NS, "--replicas=3")
        processes = term.ctx.handles["processes"]

        def three() -> list[Any] | None:
            pods = [p for p in term.pods() if component(p) == "webhook" and ready(p)]
            found = [processes.of(NS, p["metadata"]["name"]) for p in pods]
            alive = [f for f in found if f is not None and f.alive]
            return alive if len(alive) == 3 else None

        alive = term.until(three)
        assert len({p.pid for p in alive}) == 3
        ips = {p["status"]["podIP"] for p in term.pods() if component(p) == "webhook"}
        assert len(ips) == 3

        # The API server spreads the admissions over the three: each replica's own
        # requests_total counts some of 30 creates (all on one: 3 x (1/3)^30).
        def three_endpoints() -> bool:
            got = json.loads(term.ok("get", "endpoints", f"{NS}-webhook", "-n", NS, "-o", "json"))
            return sum(len(s.get("addresses") or []) for s in got.get("subsets") or []) == 3

        term.until(three_endpoints)
        before = {ip: requests_total(ip) for ip in ips}
        pods = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"spread-{i}", "labels": {vocab.GPU_CLASS_LABEL: "h100"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            }
            for i in range(30)
        ]
        manifest = tmp_path / "spread.yaml"
        manifest.write_text(yaml.safe_dump_all(pods))
        term.ok("create", "-n", "carol", "-f", str(manifest))
        spread = {ip: requests_total(ip) - before[ip] for ip in ips}
        assert sum(spread.values()) == 30, spread
        assert all(count > 0 for count in spread.values()), spread


def requests_total(ip: str) -> float:
    """The webhook replica's ``requests_total`` summed over outcomes (its metrics port)."""
    with urllib.request.urlopen(f"http://{ip}:{HEALTH_PORT}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gpu_reservation_webhook_requests_total{")
    )
