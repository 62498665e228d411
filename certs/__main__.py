"""``python -m certs``: put the webhook's certificates in place.

- ``ensure``: the Secrets and the webhook configuration's ``caBundle`` (Helm hook Job,
  the reconciler's rotation check). Kubeconfig from ``KUBECONFIG``, else in-cluster.
- ``write-files``: a CA and serving certificate in a directory, for local runs.

Exit status: 0 done, 1 the cluster refused or failed, 2 bad settings.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from certs.apply import CertsError, ensure
from certs.files import write_files
from certs.settings import FLAG_VARIABLES, EnsureSettings, overlay, read_ensure, read_files
from shared.clock import SystemClock
from shared.errors import KubeError
from shared.gateway import Gateway
from shared.logs import configure, log
from shared.settings import SettingsError

_log = logging.getLogger("certs")

EXIT_FAILED = 1
EXIT_BAD_SETTINGS = 2

_FLAGS: dict[str, str] = {
    "namespace": "namespace of the Service and the Secrets",
    "service": "the webhook's Service name (its DNS names become the SANs)",
    "secret": "the serving Secret (type kubernetes.io/tls)",
    "ca_secret": "the CA Secret (default: <secret>-ca)",
    "webhook_configuration": "MutatingWebhookConfiguration whose caBundle is set",
    "renew_before_days": "renew a certificate this many days before it expires",
    "validity_days": "lifetime of a serving certificate, days",
    "ca_validity_days": "lifetime of the CA, days",
}

#: The flags ``write-files`` takes too (no cluster objects to name).
_FILES_FLAGS = ("namespace", "service", "renew_before_days", "validity_days", "ca_validity_days")


def parser() -> argparse.ArgumentParser:
    """The command line; each flag overrides one environment variable."""
    top = argparse.ArgumentParser(
        prog="python -m certs", description="Put the webhook's certificates in place."
    )
    commands = top.add_subparsers(dest="command", required=True)
    ensure_cmd = commands.add_parser("ensure", help="Secrets and caBundle in the cluster")
    files_cmd = commands.add_parser("write-files", help="CA and serving certificate files")
    files_cmd.add_argument("--dir", dest="directory", help=f"env {FLAG_VARIABLES['directory']}")
    for dest, text in _FLAGS.items():
        flag = "--" + dest.replace("_", "-")
        help_text = f"{text} (env {FLAG_VARIABLES[dest]})"
        ensure_cmd.add_argument(flag, dest=dest, help=help_text)
        if dest in _FILES_FLAGS:
            files_cmd.add_argument(flag, dest=dest, help=help_text)
    return top


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run one subcommand; returns the exit status."""
    args = parser().parse_args(argv)
    merged = overlay(os.environ if env is None else env, vars(args))
    try:
        if args.command == "ensure":
            return _run_ensure(read_ensure(merged))
        return _run_write_files(merged)
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        return EXIT_BAD_SETTINGS


def _run_ensure(settings: EnsureSettings) -> int:
    configure(settings.common.log_level, settings.common.library_log_level)
    try:
        gateway = Gateway.for_process(settings.common)
    except Exception as exc:  # the client's config errors are not KubeErrors
        log(_log, logging.ERROR, "certs.no_credentials", detail=str(exc))
        return EXIT_FAILED
    try:
        outcome = asyncio.run(ensure(gateway, settings.target, settings.policy, SystemClock()))
    except (CertsError, KubeError) as exc:
        log(_log, logging.ERROR, "certs.failed", detail=str(exc))
        return EXIT_FAILED
    finally:
        gateway.close()
    log(
        _log,
        logging.INFO,
        "certs.ensured",
        action=str(outcome.action),
        changed=outcome.changed,
        secrets_written=list(outcome.secrets_written),
        webhooks_patched=outcome.webhooks_patched,
        not_after=outcome.not_after.isoformat(),
        fingerprint=outcome.fingerprint,
    )
    return 0


def _run_write_files(env: Mapping[str, str]) -> int:
    settings = read_files(env)
    configure(settings.common.log_level, settings.common.library_log_level)
    try:
        decision = write_files(
            settings.directory,
            settings.service,
            settings.namespace,
            SystemClock().now(),
            settings.policy,
        )
    except OSError as exc:
        log(_log, logging.ERROR, "certs.failed", detail=str(exc))
        return EXIT_FAILED
    log(
        _log,
        logging.INFO,
        "certs.files_written" if decision.findings else "certs.files_kept",
        directory=str(settings.directory),
        action=str(decision.action),
        findings=[f"{f.subject}: {f.problem}: {f.detail}" for f in decision.findings],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
