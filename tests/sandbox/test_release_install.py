"""The release in a running sandbox: installed as Helm installs it, upgraded from the
command line with more values, a bad value refused with nothing changed."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.__main__ import main
from sandbox.apply import Applier, Kinds, ReleaseError
from sandbox.cluster.processes import LOCAL_IMAGES
from sandbox.release import HOOK, HOOK_DELETE_POLICY, secret_name, sort
from sandbox.release import RELEASE_NAME as RELEASE
from sandbox.runner import Sandbox, SandboxContext
from sandbox.scenario import load_scenario
from shared import vocab
from shared.errors import NotFound
from shared.gateway import Gateway
from shared.resources import MUTATING_WEBHOOK_CONFIGURATIONS, SECRETS, SERVICES
from tests.webhook.sandbox_thread import SandboxThread

pytestmark = pytest.mark.timeout(120)


class Running(SandboxThread):
    """kube, cluster, app and the release on a background loop."""

    def __init__(self, state_dir: Path, files: tuple[Any, ...] = (), sets: tuple[str, ...] = ()):
        self.ctx = SandboxContext(state_dir=state_dir, scenario=load_scenario())
        self.ctx.handles["release.user"] = (files, sets)
        self.sandbox = Sandbox(self.ctx, ["kube", "cluster", "app", "release"])
        import threading

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.run(self.sandbox.start())
        self.kubeconfig = state_dir / "kubeconfig"
        self.gateway = Gateway.from_kubeconfig(str(self.kubeconfig))

    def get(self, api_version: str, kind: str, name: str) -> dict[str, Any]:
        async def read() -> dict[str, Any]:
            res = await Kinds(self.gateway).resource(api_version, kind)
            return await self.gateway.get(res, name, self.namespace if res.namespaced else None)

        return self.run(read())

    def exists(self, api_version: str, kind: str, name: str) -> bool:
        try:
            self.get(api_version, kind, name)
        except NotFound:
            return False
        return True


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = Running(tmp_path_factory.mktemp("release"), ({"userAccess": {"enabled": False}},))
    try:
        yield running
    finally:
        running.close()


def release_secret(sandbox: Running, version: int) -> dict[str, Any]:
    return sandbox.run(sandbox.gateway.get(SECRETS, secret_name(version), sandbox.namespace))


def test_the_install_puts_the_chart_and_what_an_operator_creates_first(sandbox: Running) -> None:
    ns = sandbox.namespace
    key = sandbox.run(sandbox.gateway.get(SECRETS, f"{RELEASE}-api-key", ns))
    assert base64.b64decode(key["data"]["api-key"]).decode() == sandbox.ctx.app_keys["read_write"]
    assert sandbox.exists("policy/v1", "PodDisruptionBudget", f"{RELEASE}-webhook")
    sandbox.run(sandbox.gateway.get(SERVICES, f"{RELEASE}-reconciler", ns))
    config = sandbox.run(sandbox.gateway.get(MUTATING_WEBHOOK_CONFIGURATIONS, RELEASE))
    assert config["webhooks"]
    # the user's file reached the render: no user-access RBAC
    assert not sandbox.exists("rbac.authorization.k8s.io/v1", "Role", f"{RELEASE}-users")
    record = release_secret(sandbox, 1)
    assert record["metadata"]["labels"]["status"] == "deployed"


def test_an_upgrade_applies_the_difference_and_keeps_what_others_set(
    sandbox: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, pdb = RELEASE, f"{RELEASE}-webhook"
    config = sandbox.run(sandbox.gateway.get(MUTATING_WEBHOOK_CONFIGURATIONS, name))
    bundles = {h["clientConfig"].get("caBundle") for h in config["webhooks"]}
    assert None not in bundles  # set by the post-install certs hook
    values = tmp_path / "monitoring.yaml"
    values.write_text("serviceMonitor: {enabled: true}\nwebhook: {timeoutSeconds: 7}\n")
    args = ["upgrade", "--state-dir", str(sandbox.ctx.state_dir), "-f", str(values)]
    assert main([*args, "--set", "webhook.podDisruptionBudget.enabled=false"]) == 0
    assert "REVISION: 2" in capsys.readouterr().out
    assert sandbox.exists("monitoring.coreos.com/v1", "ServiceMonitor", f"{RELEASE}-webhook")
    assert not sandbox.exists("policy/v1", "PodDisruptionBudget", pdb)
    config = sandbox.run(sandbox.gateway.get(MUTATING_WEBHOOK_CONFIGURATIONS, name))
    assert {h["timeoutSeconds"] for h in config["webhooks"]} == {7}
    assert {h["clientConfig"].get("caBundle") for h in config["webhooks"]} == bundles
    assert release_secret(sandbox, 1)["metadata"]["labels"]["status"] == "superseded"
    assert release_secret(sandbox, 2)["metadata"]["labels"]["status"] == "deployed"

    # the layers so far stay: a later upgrade with only --set keeps the file's values
    assert main(["upgrade", "--state-dir", str(sandbox.ctx.state_dir), "--set", "a=1"]) == 1
    assert "additional properties" in capsys.readouterr().err.lower()
    assert (
        main(
            [
                "upgrade",
                "--state-dir",
                str(sandbox.ctx.state_dir),
                "--set",
                "serviceMonitor.interval=10s",
            ]
        )
        == 0
    )
    monitor = sandbox.get("monitoring.coreos.com/v1", "ServiceMonitor", f"{RELEASE}-webhook")
    assert "10s" in json.dumps(monitor)
    assert not sandbox.exists("policy/v1", "PodDisruptionBudget", pdb)


def test_a_value_that_does_not_render_changes_nothing(
    sandbox: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    before = sandbox.run(sandbox.gateway.list_all(SECRETS, sandbox.namespace)).items
    code = main(
        ["upgrade", "--state-dir", str(sandbox.ctx.state_dir), "--set", "webhook.maxBodyBytes=x"]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: UPGRADE FAILED:")
    assert "maxBodyBytes" in err
    after = sandbox.run(sandbox.gateway.list_all(SECRETS, sandbox.namespace)).items
    assert len(after) == len(before)


def test_up_refuses_bad_values_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("webhook: {replicas: many}\n")
    assert main(["up", "--state-dir", str(tmp_path / "s"), "-f", str(bad)]) == 2
    assert "replicas" in capsys.readouterr().err
    assert main(["up", "--state-dir", str(tmp_path / "s"), "--set", "webhook.replicas"]) == 2
    assert "failed parsing --set data" in capsys.readouterr().err
    assert not (tmp_path / "s" / "endpoints.json").exists()


def hook_job(name: str, code: int, policies: str) -> dict[str, Any]:
    """A pre-install hook Job of our image whose process exits with ``code``."""
    toleration = {"key": vocab.SANDBOX_SYSTEM_TAINT, "operator": "Exists"}
    container = {
        "name": "c",
        "image": f"{next(iter(LOCAL_IMAGES))}:test",
        "command": ["python", "-c", f"raise SystemExit({code})"],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": RELEASE,
            "annotations": {HOOK: "pre-install", HOOK_DELETE_POLICY: policies},
        },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [toleration],
                    "containers": [container],
                }
            },
        },
    }


def test_hooks_are_waited_for_and_deleted_by_their_policies(sandbox: Running) -> None:
    applier = Applier(sandbox.gateway, RELEASE, now=lambda: "now", hook_timeout_s=60)
    texts = {"h.yaml": json.dumps(hook_job("works", 0, "hook-succeeded"))}
    sandbox.run(applier.run_hooks(sort(texts, [], {}), "pre-install"), timeout=90)
    assert not sandbox.exists("batch/v1", "Job", "works")  # hook-succeeded: deleted

    texts = {"h.yaml": json.dumps(hook_job("fails", 1, "hook-succeeded"))}
    with pytest.raises(ReleaseError, match="hook Job 'fails' failed: BackoffLimitExceeded"):
        sandbox.run(applier.run_hooks(sort(texts, [], {}), "pre-install"), timeout=90)
    assert sandbox.exists("batch/v1", "Job", "fails")  # kept for kubectl logs

    texts = {"h.yaml": json.dumps(hook_job("fails", 1, "hook-failed"))}
    with pytest.raises(ReleaseError, match="already exists"):
        sandbox.run(applier.run_hooks(sort(texts, [], {}), "pre-install"), timeout=90)
    texts = {"h.yaml": json.dumps(hook_job("fails", 1, "before-hook-creation,hook-failed"))}
    with pytest.raises(ReleaseError, match="failed"):
        sandbox.run(applier.run_hooks(sort(texts, [], {}), "pre-install"), timeout=90)
    assert not sandbox.exists("batch/v1", "Job", "fails")  # hook-failed: deleted
