"""``python -m sandbox up`` refuses bad input with a one-line message and exit code 2."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sandbox.__main__ import main
from sandbox.runner import SandboxError, clock_env
from sandbox.scenario import clock_of, load_scenario
from sandbox.values import Layers
from shared.clock import ScaledClock, SystemClock, parse_utc


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nodes: [\n", "not valid YAML"),
        ("- just\n- a list\n", "must be a mapping"),
        ("pods: []\n", "unknown section"),
    ],
    ids=["broken-yaml", "not-a-mapping", "unknown-section"],
)
def test_a_bad_scenario_file_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    scenario = write(tmp_path, text)
    code = main(["up", "--scenario", str(scenario), "--state-dir", str(tmp_path / "s")])
    assert code == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "s" / "endpoints.json").exists()


def test_an_invalid_component_section_stops_the_sandbox_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = write(tmp_path, "app:\n  classes: 7\n")
    code = main(
        ["up", "--components", "app", "--scenario", str(scenario), "--state-dir", str(tmp_path)]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("sandbox: component 'app':")
    assert "classes" in err


def test_unknown_components_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["up", "--components", "kube,etcd", "--state-dir", str(tmp_path)]) == 2
    assert "etcd" in capsys.readouterr().err


@pytest.mark.parametrize("replicas", ["0", "-1", "two"])
def test_webhook_replicas_must_be_a_positive_whole_number(replicas: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["up", "--webhook-replicas", replicas])
    assert info.value.code == 2


def test_a_child_clock_agrees_with_the_sandbox_clock_to_the_fraction() -> None:
    epoch = datetime(2026, 12, 2, 13, 0, 0, 700000, tzinfo=UTC)
    env = clock_env(ScaledClock(factor=20, epoch=epoch, started_at=1000.25))
    assert parse_utc(env["CLOCK_EPOCH"]) == epoch
    assert float(env["CLOCK_FACTOR"]) == 20
    assert float(env["CLOCK_STARTED_AT"]) == 1000.25
    assert clock_env(SystemClock()) == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("clock: {factor: banana}\n", "clock.factor: must be a number"),
        ("clock: {factor: 0}\n", "clock.factor: must be > 0"),
        ("clock: {factor: .inf}\n", "clock.factor: must be > 0"),
        ("clock: {factor: 100000}\n", "clock.factor: must be > 0 and <= 3600"),
        ("clock: {speed: 2}\n", "clock: unknown key(s) ['speed']"),
        ("clock: 60\n", "clock: must be a mapping"),
    ],
    ids=["not-a-number", "zero", "infinite", "too-fast", "unknown-key", "not-a-mapping"],
)
def test_a_malformed_clock_section_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    scenario = write(tmp_path, text)
    code = main(["up", "--scenario", str(scenario), "--state-dir", str(tmp_path / "s")])
    assert code == 2
    assert expected in capsys.readouterr().err


def test_the_clock_section_sets_the_sandbox_clock(tmp_path: Path) -> None:
    assert isinstance(clock_of({}), SystemClock)
    assert isinstance(clock_of({"clock": {"factor": 1}}), SystemClock)
    fast = clock_of(load_scenario(write(tmp_path, "clock: {factor: 60}\n")))
    assert isinstance(fast, ScaledClock)
    assert fast.factor == 60.0


def test_webhook_replicas_is_the_charts_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--webhook-replicas N`` is ``--set webhook.replicas=N`` (a --set of it wins)."""
    import sandbox.__main__ as cli

    seen: list[Any] = []

    def refuse(sandbox: Any) -> Any:  # stop before anything starts
        seen.append(sandbox.ctx.handles["release.user"])
        raise SandboxError("stopped by the test")

    monkeypatch.setattr(cli, "run_until_interrupted", refuse)
    args = ["up", "--state-dir", str(tmp_path), "--webhook-replicas", "3"]
    assert cli.main([*args, "--set", "webhook.replicas=2"]) == 2
    files, sets = seen[0]
    assert files == ()
    assert Layers({}, {}, files, sets).merged()["webhook"]["replicas"] == 2
    assert cli.main(args) == 2
    assert Layers({}, {}, *seen[1]).merged()["webhook"]["replicas"] == 3


@pytest.mark.timeout(60)
def test_the_release_without_the_cluster_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The process kubelet is the one way our processes run: a release without the
    cluster component would install Deployments nobody runs."""
    state = tmp_path / "state"
    assert main(["up", "--components", "kube,release", "--state-dir", str(state)]) == 2
    assert "the release needs the cluster component" in capsys.readouterr().err
