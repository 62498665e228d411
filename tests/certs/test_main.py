"""``python -m certs``: settings, exit codes and ``write-files``."""

from __future__ import annotations

import logging
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from certs.__main__ import EXIT_BAD_SETTINGS, EXIT_FAILED, main
from certs.files import read_dir
from certs.pem import dns_names
from certs.plan import Action, Policy, plan
from certs.settings import overlay, read_ensure
from shared import vocab
from shared.clock import SystemClock

ENV = {"POD_NAMESPACE": "gpu-system", "LOG_LEVEL": "WARNING"}


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """``main`` configures the root logger; give the rest of the session its own back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_every_bad_setting_is_reported_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    env = {**ENV, "CERTS_VALIDITY_DAYS": "a year", "CERTS_SECRET_NAME": "Not_A_Name"}
    argv = ["ensure", "--service", "UPPER", "--renew-before-days", "0"]
    assert main(argv, env) == EXIT_BAD_SETTINGS
    problems = capsys.readouterr().err
    for variable in (
        "CERTS_VALIDITY_DAYS",
        "CERTS_SECRET_NAME",
        "CERTS_SERVICE_NAME",
        "CERTS_RENEW_BEFORE_DAYS",
    ):
        assert variable in problems


def test_inconsistent_lifetimes_are_a_settings_error(capsys: pytest.CaptureFixture[str]) -> None:
    env = {**ENV, "CERTS_VALIDITY_DAYS": "30", "CERTS_RENEW_BEFORE_DAYS": "30"}
    assert main(["ensure"], env) == EXIT_BAD_SETTINGS
    assert "longer than renew-before" in capsys.readouterr().err


def test_flags_override_the_environment_and_defaults_fill_the_rest() -> None:
    env = overlay({**ENV, "CERTS_SECRET_NAME": "from-env"}, {"secret": "from-flag"})
    settings = read_ensure(env)
    assert settings.target.secret == "from-flag"
    assert settings.target.ca_secret == "from-flag-ca"
    assert settings.target.namespace == "gpu-system"
    assert settings.target.webhook_configuration == vocab.PRODUCT_NAME
    assert settings.policy == Policy()


def test_ensure_without_a_cluster_fails_cleanly(tmp_path: Path) -> None:
    env = {**ENV, "KUBECONFIG": str(tmp_path / "missing-kubeconfig")}
    assert main(["ensure"], env) == EXIT_FAILED


def test_write_files_issues_once_then_keeps(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    argv = ["write-files", "--dir", str(directory), "--service", "hook"]
    assert main(argv, ENV) == 0
    contents = {p.name: p.read_bytes() for p in directory.iterdir()}
    assert set(contents) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    assert stat.S_IMODE((directory / "tls.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((directory / "ca.key").stat().st_mode) == 0o600
    leaf = x509.load_pem_x509_certificate(contents["tls.crt"])
    assert "hook.gpu-system.svc" in dns_names(leaf)
    assert main(argv, ENV) == 0
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == contents
    serving, ca = read_dir(directory)
    decision = plan(serving, ca, "hook", "gpu-system", SystemClock().now(), Policy())
    assert decision.action is Action.KEEP


def test_write_files_renews_for_another_service(tmp_path: Path) -> None:
    assert main(["write-files", "--dir", str(tmp_path), "--service", "one"], ENV) == 0
    ca_before = (tmp_path / "ca.crt").read_bytes()
    assert main(["write-files", "--dir", str(tmp_path), "--service", "two"], ENV) == 0
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    leaf = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    assert "two.gpu-system.svc" in dns_names(leaf)


def test_write_files_needs_a_directory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["write-files"], ENV) == EXIT_BAD_SETTINGS
    assert "CERTS_DIR" in capsys.readouterr().err
