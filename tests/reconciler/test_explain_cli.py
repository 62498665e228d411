"""The plugin's shell: kubeconfig files as kubectl reads them, the controller's Lease,
``list -A``.

kubectl's rules: ``--kubeconfig`` names the one file (missing → an error naming it);
``$KUBECONFIG`` lists files merged with the first file winning per key, missing ones
skipped; ``--context`` picks the context.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from reconciler import cli
from reconciler.base.apphealth import Health, format_health
from reconciler.explain.scene import Controller
from shared import model, vocab
from shared.clock import ManualClock
from shared.errors import from_status
from shared.gateway import Gateway
from shared.policy.matching import MatchRules
from shared.resources import GPU_RESERVATIONS, LEASES, PODS
from tests.fakekube import FakeKube
from tests.policy.builders import NOW, gpu_pod, reservation

CTL = vocab.PRODUCT_NAME


def write(path: Path, config: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return str(path)


def cluster(name: str, port: int) -> dict[str, Any]:
    return {"name": name, "cluster": {"server": f"https://127.0.0.1:{port}"}}


def context(name: str, cluster_name: str, namespace: str | None = None) -> dict[str, Any]:
    inner = {"cluster": cluster_name, "user": "u"}
    return {"name": name, "context": {**inner, **({"namespace": namespace} if namespace else {})}}


@pytest.fixture
def split(tmp_path: Path) -> tuple[str, str]:
    """Credentials in one file without a current-context, clusters and contexts in a
    second (a common setup: ``KUBECONFIG=creds:clusters``)."""
    creds = write(tmp_path / "creds", {"users": [{"name": "u", "user": {"token": "t"}}]})
    clusters = write(
        tmp_path / "clusters",
        {
            "current-context": "lab",
            "clusters": [cluster("lab", 9001), cluster("other", 9002)],
            "contexts": [context("lab", "lab", "bob"), context("other", "other")],
            "users": [{"name": "u", "user": {"token": "shadowed"}}],
        },
    )
    return creds, clusters


def test_kubeconfig_files_of_kubeconfig_skip_missing_ones(
    tmp_path: Path, split: tuple[str, str]
) -> None:
    missing = str(tmp_path / "absent")
    env = {"KUBECONFIG": f"{missing}:{split[0]}:{split[1]}"}
    assert cli.kubeconfig_files(None, env) == split


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_missing_file_is_named_as_the_file_tried(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = str(tmp_path / "nope" / "config")
    monkeypatch.setenv("HOME", str(tmp_path))
    if how == "flag":
        monkeypatch.delenv("KUBECONFIG", raising=False)
        argv = ["--kubeconfig", missing, "list"]
    else:
        monkeypatch.setenv("KUBECONFIG", f"{missing}:{missing}2")
        argv = ["list"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert missing in err
    assert ".kube/config" not in err


def test_no_kubeconfig_at_all_names_the_default(tmp_path: Path) -> None:
    with pytest.raises(cli.NoKubeconfig, match=r"\.kube/config"):
        cli.kubeconfig_files(None, {"HOME": str(tmp_path)})


def test_merged_files_give_the_first_current_context_and_its_namespace(
    tmp_path: Path, split: tuple[str, str]
) -> None:
    files = [*split]
    assert cli.current_context(files) == "lab"
    assert cli.context_namespace(files) == "bob"
    assert cli.context_namespace(files, "other") == "default"
    first = write(tmp_path / "first", {"current-context": "other"})
    assert cli.current_context([first, *files]) == "other"  # the first file wins


def test_the_official_loader_merges_and_the_context_picks_the_cluster(
    split: tuple[str, str],
) -> None:
    for ctx_name, port in ((None, 9001), ("other", 9002)):
        gateway = Gateway.from_kubeconfig(list(split), ctx_name or cli.current_context(split))
        try:
            assert gateway.endpoint().root == f"https://127.0.0.1:{port}"
            _root, auth = gateway.root_and_auth()
            assert auth["authorization"] == "Bearer t"  # the first file's user wins
        finally:
            gateway.close()


def test_an_unknown_context_is_refused_clearly(
    split: tuple[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", ":".join(split))
    assert cli.main(["--context", "nowhere", "list"]) == 1
    assert "nowhere" in capsys.readouterr().err


def test_context_is_accepted_after_the_command(split: tuple[str, str]) -> None:
    args = cli.parser("p").parse_args(["list", "--context", "other", "-A"])
    assert (args.context, args.all_namespaces) == ("other", True)
    args = cli.parser("p").parse_args(["--context", "other", "explain", "x"])
    assert args.context == "other"


# --- the controller's Lease and list -A ------------------------------------------------


def ctx_of(kube: FakeKube) -> cli.Context:
    return cli.Context(cast(Gateway, kube), CTL, ManualClock(NOW), None, MatchRules())


def lease(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": vocab.LEADER_LEASE_NAME, "namespace": CTL}
    if annotations is not None:
        meta["annotations"] = annotations
    return {
        "metadata": meta,
        "spec": {
            "holderIdentity": "r-0",
            "leaseDurationSeconds": 15,
            "renewTime": "2026-01-05T09:59:58.000000Z",
        },
    }


@pytest.mark.parametrize(
    ("notes", "app"),
    [
        (None, None),
        ({vocab.APP_HEALTH_ANNOTATION: "unreachable since 2026-01-05T09:50:00Z"}, False),
        ({vocab.APP_HEALTH_ANNOTATION: "ok since 2026-01-05T09:50:00Z"}, True),
        ({vocab.APP_HEALTH_ANNOTATION: "on fire"}, None),
    ],
)
def test_the_controller_is_read_from_its_lease(
    notes: dict[str, str] | None, app: bool | None
) -> None:
    kube = FakeKube()
    kube.add(LEASES, lease(notes), CTL)
    found = asyncio.run(cli.controller_of(ctx_of(kube)))
    assert found is not None
    assert found.running(NOW)
    assert (found.app.ok if found.app else None) is app


def test_no_lease_reads_as_not_running_and_a_refused_read_as_unknown() -> None:
    found = asyncio.run(cli.controller_of(ctx_of(FakeKube())))
    assert found == Controller(found=False)
    assert not found.running(NOW)

    class Refusing(FakeKube):
        async def get(self, res: Any, name: str, namespace: str | None = None) -> Any:
            raise from_status(403, b'{"reason": "Forbidden", "message": "no"}')

    assert asyncio.run(cli.controller_of(ctx_of(Refusing()))) is None


def test_explain_says_the_controller_is_not_running_without_a_lease() -> None:
    kube = FakeKube()
    kube.add(PODS, gpu_pod(namespace="bob").build(), "bob")
    text = asyncio.run(cli.run_explain(ctx_of(kube), "bob", "p"))
    assert "the controller is not running (no leader has ever run)" in text.splitlines()[0]
    kube.add(LEASES, lease(), CTL)
    text = asyncio.run(cli.run_explain(ctx_of(kube), "bob", "p"))
    assert "controller" not in text


def test_list_all_namespaces_shows_each_pod_against_its_own_bookings() -> None:
    kube = FakeKube()
    kube.add(LEASES, lease({vocab.APP_HEALTH_ANNOTATION: format_ok()}), CTL)
    for rid, owner in ((1, "alice"), (2, "bob")):
        res = reservation(rid, owner=owner, gpus=1)
        kube.add(GPU_RESERVATIONS, model.to_object(res, CTL, NOW), CTL)
    for ns in ("alice", "bob", "carol"):
        kube.add(PODS, gpu_pod(namespace=ns).build(), ns)
    text = asyncio.run(cli.run_list(ctx_of(kube), None))
    head, tail = text.split("\n\n")
    assert head.splitlines()[0].split()[:2] == ["OWNER", "NAME"]
    assert [line.split()[0] for line in head.splitlines()[1:]] == ["alice", "bob"]
    rows = {line.split()[0]: line.split() for line in tail.splitlines()[1:]}
    assert tail.splitlines()[0].split()[:2] == ["NAMESPACE", "POD"]
    assert rows["alice"][2:4] == ["admittable-now", "res-1"]
    assert rows["bob"][2:4] == ["admittable-now", "res-2"]
    assert rows["carol"][2] == "no-booking"
    one = asyncio.run(cli.run_list(ctx_of(kube), "bob"))
    assert "alice" not in one
    assert one.split("\n\n")[1].splitlines()[0].split()[0] == "POD"


def format_ok() -> str:
    return format_health(Health(True, NOW))


@pytest.mark.parametrize(
    "body",
    [
        {"metadata": {"name": vocab.LEADER_LEASE_NAME}},
        {"metadata": {"annotations": ["x"]}, "spec": {"renewTime": "garbage"}},
        {"metadata": {"annotations": {vocab.APP_HEALTH_ANNOTATION: 7}},
         "spec": {"holderIdentity": "r"}},
        {"spec": {"holderIdentity": "r", "renewTime": "2026-01-05T09:59:58.000000Z",
                  "leaseDurationSeconds": "15"}},
    ],
    ids=["no-spec", "garbage-time", "health-not-a-string", "duration-not-a-number"],
)  # fmt: skip
def test_a_malformed_lease_reads_as_no_live_leader_without_failing(body: dict[str, Any]) -> None:
    class Stored(FakeKube):
        async def get(self, res: Any, name: str, namespace: str | None = None) -> Any:
            return body

    found = asyncio.run(cli.controller_of(ctx_of(Stored())))
    assert found is not None
    assert found.found
    assert not found.running(NOW)
    assert found.app is None
